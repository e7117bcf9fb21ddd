"""Real servers the tests start on free loopback ports and tear down after: a PgBouncer in front of a database,
a throwaway primary with a streaming standby, a Pushgateway, and a TCP proxy that freezes as a network partition
(tests.freezing_proxy). Registered as a pytest plugin by tests/conftest.py,
so the fixtures at the end are available to every test.

PostgreSQL's own programs and PgBouncer refuse to run as root: as root, they run as the `postgres` OS user, in
a temporary directory that user owns.
"""

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from django.conf import settings
from django.db import connections

from tests.freezing_proxy import FreezingProxy, running_freezing_proxy
from tests.support import PROJECT_ROOT, database_url_of_tests, free_loopback_port, installed_tool, manage_command

STARTUP_SECONDS = 30
SERVER_OS_USER = "postgres"


def tests_server_major() -> int | None:
    """The major version of the server the suite runs on (Debian's 15, the embedded 16, ...); None if it does not
    answer (the tests that need it then fail on their own)."""
    db = settings.DATABASES["default"]
    try:
        with psycopg.connect(
            dbname="postgres", user=db["USER"], host=db["HOST"] or db.get("OPTIONS", {}).get("host"),
            port=db["PORT"] or None, connect_timeout=5,
        ) as connection:
            return connection.info.server_version // 10000
    except psycopg.OperationalError:
        return None


def programs_of_major(major: int | None) -> str:
    """Where PostgreSQL's programs of that major version are: Debian's, else the embedded server's own (pgserver
    ships them), else Debian's path, where installed_tool says which package to install. pg_dump refuses a newer
    server, and a standby needs the primary's major version."""
    debian = f"/usr/lib/postgresql/{major}/bin"
    if Path(debian).is_dir():
        return debian
    # Found without importing pgserver, which looks up (and warns about) the user's runtime directory.
    embedded = importlib.util.find_spec("pgserver")
    if embedded and embedded.submodule_search_locations:
        bindir = Path(embedded.submodule_search_locations[0]) / "pginstall" / "bin"
        version = subprocess.run([bindir / "postgres", "--version"], capture_output=True, text=True).stdout
        if re.search(rf"\b{major}\.\d+", version):
            return str(bindir)
    return debian


POSTGRES_MAJOR = tests_server_major()
POSTGRES_BINDIR = programs_of_major(POSTGRES_MAJOR)


def server_process_user(os_user: str = SERVER_OS_USER) -> dict:
    """subprocess arguments that run a server program as that OS user (postgres unless said) when we are root."""
    if os.geteuid() != 0:
        return {}
    return {"user": os_user, "group": os_user, "extra_groups": []}


@contextmanager
def server_directory(prefix: str, os_user: str = SERVER_OS_USER) -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        if os.geteuid() == 0:
            shutil.chown(directory, os_user, os_user)
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def wait_until_connectable(url: str, *, what: str, log: Path, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        try:
            with psycopg.connect(url, connect_timeout=1, autocommit=True) as probe:
                probe.execute("SELECT 1")
            return
        except psycopg.OperationalError as error:
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"{what} did not accept connections ({error}); its log:\n{log.read_text()}")
            time.sleep(0.05)


@contextmanager
def running_pgbouncer(
    *, pool_mode: str, database_url: str, default_pool_size: int = 20, server_round_robin: int = 0,
    server_reset_query: str = "DISCARD ALL", query_wait_timeout: int = 120,
) -> Iterator[str]:
    """A PgBouncer of its own in front of the database of `database_url`, with `pool_mode` session, transaction or
    statement and the other settings as named (PgBouncer's defaults), trusting the URL's user. Yields the
    postgres:// URL of the same database through it."""
    if pool_mode not in ("session", "transaction", "statement"):
        raise ValueError(f"pool_mode must be session, transaction or statement, got {pool_mode!r}")
    binary = installed_tool("pgbouncer", "pgbouncer")
    target = urllib.parse.urlsplit(database_url)
    database = target.path.lstrip("/")
    port = free_loopback_port()
    # The embedded PostgreSQL listens on a Unix socket only, in its data directory, which only the directory's
    # owner may enter: then PgBouncer runs as that owner.
    host = re.sub(r":\d+$", "", target.netloc.rpartition("@")[2])
    socket_directory = urllib.parse.unquote(host) if host[:3].lower() == "%2f" else None
    os_user = Path(socket_directory).owner() if socket_directory else SERVER_OS_USER
    with server_directory("pgbouncer-", os_user) as directory:
        (directory / "users.txt").write_text(f'"{target.username}" ""\n')
        (directory / "pgbouncer.ini").write_text(
            f"""
[databases]
{database} = host={socket_directory or target.hostname} port={target.port or 5432} dbname={database}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {directory / "users.txt"}
; The admin console (database pgbouncer), where a test reads who waits for a server: pgbouncer_clients_waiting.
admin_users = {target.username}
pool_mode = {pool_mode}
default_pool_size = {default_pool_size}
server_round_robin = {server_round_robin}
query_wait_timeout = {query_wait_timeout}
; DISCARD ALL (the default): a session-pooled server connection is reset when its client goes, which ends the
; client's session state (its advisory locks included). Transaction pooling never runs it.
server_reset_query = {server_reset_query}
"""
        )
        log = directory / "pgbouncer.log"
        with log.open("w") as log_file:
            process = subprocess.Popen(
                [binary, str(directory / "pgbouncer.ini")], stdout=subprocess.DEVNULL, stderr=log_file,
                **server_process_user(os_user),
            )
        try:
            url = f"postgres://{target.username}@127.0.0.1:{port}/{database}"
            wait_until_connectable(url, what=f"PgBouncer ({pool_mode} pooling)", log=log, process=process)
            yield url
        finally:
            process.terminate()
            process.wait(timeout=10)


def pgbouncer_clients_waiting(url: str) -> int:
    """How many clients of the PgBouncer at `url` (running_pgbouncer's) wait for a server: SHOW POOLS' cl_waiting,
    read on its admin console."""
    with psycopg.connect(url.rsplit("/", 1)[0] + "/pgbouncer", autocommit=True) as console:
        cursor = console.execute("SHOW POOLS")
        waiting = [column.name for column in cursor.description].index("cl_waiting")
        return sum(row[waiting] for row in cursor.fetchall())


@dataclass(frozen=True)
class Replica:
    primary_url: str
    standby_url: str
    standby_data: Path

    def require_synchronous_standby(self) -> None:
        """Every commit that writes waits until a standby confirms it (synchronous_standby_names = '*')."""
        with psycopg.connect(self.primary_url, autocommit=True) as primary:
            primary.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
            primary.execute("SELECT pg_reload_conf()")

    def stop_standby(self) -> None:
        run_server_program("pg_ctl", "stop", "--mode=immediate", "--wait", "-D", str(self.standby_data))

    def pause_replay(self) -> None:
        self.standby_execute("SELECT pg_wal_replay_pause()")

    def resume_replay(self) -> None:
        self.standby_execute("SELECT pg_wal_replay_resume()")

    def standby_execute(self, sql: str) -> None:
        with psycopg.connect(self.standby_url, autocommit=True) as standby:
            standby.execute(sql)


class Cluster:
    """One throwaway PostgreSQL server: its data directory, port and log."""

    def __init__(self, directory: Path, name: str):
        self.data = directory / name
        self.log = directory / f"{name}.log"
        self.port = free_loopback_port()

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    @contextmanager
    def running(self) -> Iterator[None]:
        # Small and fast rather than durable. Local sockets off: everything goes over loopback TCP. Streaming
        # needs nothing more: PostgreSQL 15 defaults to wal_level = replica and max_wal_senders = 10.
        options = (
            f"-c port={self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c fsync=off"
            " -c full_page_writes=off -c shared_buffers=16MB -c max_connections=40"
        )
        try:
            # --wait returns once the server accepts connections.
            run_server_program(
                "pg_ctl", "start", "--wait", f"--timeout={STARTUP_SECONDS}", "-D", str(self.data), "-l",
                str(self.log), "-o", options, log=self.log,
            )
            yield
        finally:
            # Also after a failed start: the server may have come up after pg_ctl gave up on it.
            run_server_program("pg_ctl", "stop", "--mode=immediate", "-D", str(self.data), check=False)


def run_server_program(name: str, *args: str, check: bool = True, log: Path | None = None) -> None:
    binary = installed_tool(name, f"postgresql-{POSTGRES_MAJOR}", path=POSTGRES_BINDIR)
    completed = subprocess.run(
        [binary, *args], capture_output=True, text=True, timeout=2 * STARTUP_SECONDS, **server_process_user(),
    )
    if check and completed.returncode != 0:
        server_log = f"the server's log:\n{log.read_text()}" if log and log.exists() else ""
        raise RuntimeError(f"{name} {' '.join(args)} failed:\n{completed.stdout}{completed.stderr}{server_log}")


@contextmanager
def streaming_replica(*, database: str = "catalog") -> Iterator[Replica]:
    """A throwaway primary with `database` (empty) and a standby streaming from it, each on a free port (trust
    auth, as initdb's `-A trust` sets it up for local and replication connections). Both stop and their
    directories go when the block ends, also when starting failed half-way."""
    with ExitStack() as servers:
        directory = servers.enter_context(server_directory("streaming-replica-"))
        primary, standby = Cluster(directory, "primary"), Cluster(directory, "standby")
        run_server_program(
            "initdb", "-D", str(primary.data), "-U", "postgres", "-A", "trust", "--encoding=UTF8",
            "--locale=C.UTF-8", "--no-sync", "--no-instructions",
        )
        servers.enter_context(primary.running())
        with psycopg.connect(primary.url("postgres"), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{database}"')
        # -R writes standby.signal and primary_conninfo: the copy starts as a standby of the primary.
        run_server_program(
            "pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres", "-D",
            str(standby.data), "-R", "--checkpoint=fast", "--wal-method=stream", "--no-sync",
        )
        servers.enter_context(standby.running())
        replica = Replica(
            primary_url=primary.url(database), standby_url=standby.url(database), standby_data=standby.data,
        )
        wait_until_streaming(replica, log=standby.log)
        yield replica


def wait_until_streaming(replica: Replica, *, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    with psycopg.connect(replica.primary_url, autocommit=True) as primary:
        while not primary.execute("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'").fetchone()[0]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the standby did not start streaming; its log:\n{log.read_text()}")
            time.sleep(0.05)


def migrate(database_url: str) -> None:
    """The project's schema in that database, by the project's own `manage.py migrate`."""
    completed = subprocess.run(
        manage_command("migrate", "--noinput", "-v", "0"), cwd=PROJECT_ROOT, capture_output=True, text=True,
        env=os.environ | {"DATABASE_URL": database_url}, timeout=120,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"migrate failed on {database_url}:\n{completed.stderr}")


@contextmanager
def database_alias(alias: str, database_url: str) -> Iterator[str]:
    """The database of `database_url` as a Django connection alias for the block, with the test database's other
    settings; a thread that used it closes its own connection. Not for a test marked django_db: Django's test case
    refuses aliases it did not set up itself. Such a test unblocks pytest-django's `django_db_blocker` instead."""
    target = urllib.parse.urlsplit(database_url)
    connections.settings[alias] = connections["default"].settings_dict | {
        "NAME": target.path.lstrip("/"), "USER": target.username, "HOST": target.hostname, "PORT": target.port,
    }
    try:
        yield alias
    finally:
        connections[alias].close()
        del connections[alias]
        del connections.settings[alias]


@pytest.fixture
def pgbouncer(django_db_setup) -> Iterator[Callable[[str], str]]:
    """`pgbouncer("transaction", default_pool_size=5)` starts a PgBouncer with that pool mode and settings in front
    of the test database and returns its URL; every PgBouncer started stops after the test."""
    with ExitStack() as poolers:
        yield lambda pool_mode, **settings: poolers.enter_context(
            running_pgbouncer(pool_mode=pool_mode, database_url=database_url_of_tests(), **settings)
        )


@pytest.fixture(scope="module")
def replica() -> Iterator[Replica]:
    """One throwaway primary with a streaming standby for the whole test module (the catalog schema is not
    migrated: `migrate(replica.primary_url)` does it, and the standby replays it)."""
    with streaming_replica() as started:
        yield started


@pytest.fixture
def pushgateway() -> Iterator[str]:
    """A real Pushgateway of its own on a free loopback port, in memory only (the Debian build would otherwise
    persist to /var/lib/prometheus). Yields its URL."""
    binary = installed_tool("prometheus-pushgateway", "prometheus-pushgateway")
    url = f"http://127.0.0.1:{free_loopback_port()}"
    process = subprocess.Popen(
        [binary, f"--web.listen-address={url.removeprefix('http://')}", "--persistence.file="],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                urllib.request.urlopen(f"{url}/-/ready", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError(f"the Pushgateway at {url} did not become ready") from None
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def freezing_proxy(django_db_setup) -> Iterator[FreezingProxy]:
    """A proxy in front of the test database that forwards until the test freezes it, and then drops every packet of
    its connections (tests.freezing_proxy): nftables, as root."""
    nft = installed_tool("nft", "nftables")
    with running_freezing_proxy(database_url_of_tests(), nft=nft) as proxy:
        yield proxy
