"""A TCP proxy on a free loopback port in front of a PostgreSQL server, forwarding both ways until it is frozen.
Frozen, it keeps every socket open and moves no byte, and accepts no new client: what a partition that drops
packets looks like to both ends (no FIN, no RST). `freeze_before(pattern, after=...)` freezes it just before it
would forward the client's bytes holding `pattern` (once it forwarded some holding `after`), so that a test can cut
the job off at one exact statement, its COMMIT say. Started by the `freezing_proxy` fixture (tests/servers.py).

Its kernel still acknowledges what both ends send, so the server's TCP keepalives find the proxy alive: what ends
the job's orphaned session here is the server's idle timeouts, as behind a middlebox that keeps a dead connection.
"""

import selectors
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager

from psycopg.conninfo import conninfo_to_dict


class FreezingProxy:
    def __init__(self, database_url: str):
        self.database_url = database_url
        target = conninfo_to_dict(database_url)  # libpq's reading: a host in the netloc or in `?host=`
        host, port = target.get("host") or "localhost", int(target.get("port") or 5432)
        # The embedded server listens on a Unix socket only: its directory is the URL's host.
        self.upstream = (socket.AF_UNIX, f"{host}/.s.PGSQL.{port}") if host.startswith("/") else (
            socket.AF_INET, (host, port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.frozen_at: float | None = None
        self.trigger: tuple[bytes, bytes | None] | None = None
        self.sockets: list[socket.socket] = [self.listener]
        self.stopping = threading.Event()

    def url(self) -> str:
        """The database URL through the proxy."""
        target = urllib.parse.urlsplit(self.database_url)
        user = target.netloc.rpartition("@")[0]
        return target._replace(netloc=f"{user}@127.0.0.1:{self.port}", query="").geturl()

    def freeze(self) -> None:
        self.frozen_at = self.frozen_at or time.monotonic()

    def freeze_before(self, pattern: bytes, *, after: bytes | None = None) -> None:
        self.trigger = (pattern, after)

    def forward(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self.listener, selectors.EVENT_READ)
            while not self.stopping.is_set():
                if self.frozen_at is not None:
                    time.sleep(0.02)
                    continue
                for key, _ in selector.select(timeout=0.05):
                    if key.fileobj is self.listener:
                        self.accept(selector)
                    elif self.frozen_at is None:
                        self.relay(selector, key.fileobj, key.data)

    def accept(self, selector) -> None:
        client, _ = self.listener.accept()
        server = socket.socket(self.upstream[0], socket.SOCK_STREAM)
        server.connect(self.upstream[1])
        self.sockets += [client, server]
        selector.register(client, selectors.EVENT_READ, data=(server, True))
        selector.register(server, selectors.EVENT_READ, data=(client, False))

    def relay(self, selector, source: socket.socket, destination_and_direction) -> None:
        destination, from_client = destination_and_direction
        data = source.recv(65536)
        if not data:  # one end closed, not frozen: close the other
            for end in (source, destination):
                selector.unregister(end)
                end.close()
            return
        if from_client and self.trigger:
            pattern, after = self.trigger
            if after is None and pattern in data:
                self.freeze()
                return  # never delivered
            if after is not None and after in data:
                self.trigger = (pattern, None)
        destination.sendall(data)

    def close(self) -> None:
        self.stopping.set()
        for end in self.sockets:
            end.close()


@contextmanager
def running_freezing_proxy(database_url: str) -> Iterator[FreezingProxy]:
    proxy = FreezingProxy(database_url)
    forwarding = threading.Thread(target=proxy.forward, name="freezing proxy", daemon=True)
    forwarding.start()
    try:
        yield proxy
    finally:
        proxy.stopping.set()
        forwarding.join(timeout=5)
        proxy.close()
