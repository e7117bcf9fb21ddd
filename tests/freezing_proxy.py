"""A TCP proxy on a free loopback port in front of a PostgreSQL server, forwarding both ways until it is frozen.
Frozen, it is a network partition: an nftables table drops every packet to and from its listening port and of its
connections to the server, so that neither the job nor the server hears from the other again (no byte, no ACK, no
FIN, no RST) and each end's TCP keepalives and user timeout find a dead peer, as on a real partition; it accepts no
new client either. Without the drop, the proxy's kernel would go on acknowledging both ends and neither would ever
see a dead peer. `freeze_before(pattern, after=...)` freezes it just before it would forward the client's bytes
holding `pattern` (once it forwarded some holding `after`), so that a test can cut the job off at one exact
statement, its COMMIT say. Started by the `freezing_proxy` fixture (tests/servers.py), which needs root and `nft`
(Debian package nftables). The table is deleted when the proxy closes, whatever happened.
"""

import selectors
import socket
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager

from psycopg.conninfo import conninfo_to_dict


class FreezingProxy:
    def __init__(self, database_url: str, nft: str):
        self.database_url = database_url
        self.nft = nft
        target = conninfo_to_dict(database_url)  # libpq's reading: a host in the netloc or in `?host=`
        host, port = target.get("host") or "localhost", int(target.get("port") or 5432)
        # The embedded server listens on a Unix socket only: its directory is the URL's host. No packet to drop
        # there: only the job's side of the proxy is partitioned, and the server's idle timeouts end the orphan.
        self.upstream = (socket.AF_UNIX, f"{host}/.s.PGSQL.{port}") if host.startswith("/") else (
            socket.AF_INET, (host, port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.table = f"partition_{self.port}"
        self.frozen_at: float | None = None
        self.trigger: tuple[bytes, bytes | None] | None = None
        self.sockets: list[socket.socket] = [self.listener]
        self.clients = 0  # connections accepted
        self.server_ports: list[tuple[int, int]] = []  # (the proxy's port, the server's) of each server connection
        self.stopping = threading.Event()

    @property
    def partitions_the_server(self) -> bool:
        """Whether the server's side is partitioned too: not through a Unix socket (the embedded server's), where the
        server sees a live client until its own idle timeouts, or a statement's end."""
        return self.upstream[0] == socket.AF_INET

    def url(self, query: str = "") -> str:
        """The database URL through the proxy, with `query` (libpq options, `connect_timeout=2` say)."""
        target = urllib.parse.urlsplit(self.database_url)
        user = target.netloc.rpartition("@")[0]
        return target._replace(netloc=f"{user}@127.0.0.1:{self.port}", query=query).geturl()

    def freeze(self) -> None:
        """The partition: from now on every packet of the proxy's connections is dropped, both ways."""
        if self.frozen_at is not None:
            return
        self.frozen_at = time.monotonic()
        rules = [f"tcp dport {self.port} drop", f"tcp sport {self.port} drop"]
        for own, server in self.server_ports:
            rules += [f"tcp sport {own} tcp dport {server} drop", f"tcp sport {server} tcp dport {own} drop"]
        chain = "\n".join(["type filter hook output priority 0;", *rules])
        subprocess.run([self.nft, "-f", "-"], input=f"table ip {self.table} {{\nchain output {{\n{chain}\n}}\n}}\n",
                       text=True, check=True, capture_output=True)

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
        self.clients += 1
        server = socket.socket(self.upstream[0], socket.SOCK_STREAM)
        server.connect(self.upstream[1])
        if self.upstream[0] == socket.AF_INET:
            self.server_ports.append((server.getsockname()[1], server.getpeername()[1]))
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
        """The partition ends, then every socket closes."""
        self.stopping.set()
        subprocess.run([self.nft, "delete", "table", "ip", self.table], capture_output=True)  # none if never frozen
        for end in self.sockets:
            end.close()


@contextmanager
def running_freezing_proxy(database_url: str, *, nft: str) -> Iterator[FreezingProxy]:
    proxy = FreezingProxy(database_url, nft)
    forwarding = threading.Thread(target=proxy.forward, name="freezing proxy", daemon=True)
    forwarding.start()
    try:
        yield proxy
    finally:
        proxy.stopping.set()
        forwarding.join(timeout=5)
        proxy.close()
