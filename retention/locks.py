"""A PostgreSQL session-level advisory lock, so that only one purge runs at a time across all hosts, and proof
that the session holding it is the one running each batch.

The key is derived from a name by a fixed, documented rule (README): the first 8 bytes of the SHA-256 of the
UTF-8 name, read as a big-endian signed 64-bit integer. A session lock lives as long as the database session.

Behind a connection pooler a session lock holds only in session pooling (PgBouncer `pool_mode = session`), which
keeps a client on one server session. In transaction or statement pooling the lock would land on a server session
shared with other clients, batches would run on sessions that do not hold it, and a killed job would leave it in
the pool. A client cannot tell transaction from session pooling reliably (a probe connection lands on the job's
server session only by luck), so the job does not guess: when a pooler answers (the pid the connection was given
at start-up is not the backend's), it refuses before it locks anything unless the operator declared the pool a
session pool (DELISTED_RETENTION_POOLER=session). With the declaration:

* a lock the fresh session already holds was left by a killed client of a pool that does not reset its server
  sessions (`server_reset_query` empty): the job releases it with a warning and goes on;
* every batch statement returns the session it ran on, checked before its COMMIT against the session that took
  the lock (`LockSession.verify`), so a pool that is not a session pool after all is refused at its first batch.

The first statement through a pooler may wait for a free server without limit: it runs under the run's time left
and its stop request (`bounded`).
"""

import hashlib
import logging
import os
import socket
import uuid
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import timedelta

from django.db import DatabaseError, connections
from django.db.transaction import atomic

logger = logging.getLogger(__name__)

SESSION_MARKER = "purge_delisted.run_id"
LOCK_HELD = """
SELECT EXISTS (
    SELECT FROM pg_locks
     WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
       AND classid = %(classid)s AND objid = %(objid)s AND objsubid = 1
)
"""
SESSION_POOL = "session"
POOLED_SESSION = (
    "the job's database connection (alias {alias!r}) goes through a connection pooler, and a session advisory lock "
    "holds only in session pooling: point DELISTED_RETENTION_DATABASE_URL at PostgreSQL directly, or, if the pool "
    "is a session pool, declare it with DELISTED_RETENTION_POOLER=session (README: The advisory lock)"
)
STATEMENT_POOLING = (
    "the job's database connection (alias {alias!r}) goes through a connection pooler in statement mode, which "
    "refuses transactions: point DELISTED_RETENTION_DATABASE_URL at PostgreSQL directly or at a session-pooling "
    "pool (README: The advisory lock)"
)
SESSION_CHANGED = (
    "the job's database connection (alias {alias!r}) was declared a session pool (DELISTED_RETENTION_POOLER="
    "session) but its session changed between statements, as in transaction pooling: set the pool's pool_mode "
    "to session or point DELISTED_RETENTION_DATABASE_URL at PostgreSQL directly (README: The advisory lock)"
)
HELD_BY_THIS_SESSION = (
    "the job's own database session (alias {alias!r}) already holds the advisory lock: a run is in progress on "
    "this connection; let it finish"
)
STALE_LOCK_RELEASED = (
    "the pooled session already held the advisory lock, left by a killed client: released; set the pool's "
    "server_reset_query to DISCARD ALL so that a client's session state goes with it"
)
POOL_SATURATED = (
    "the connection pooler in front of the job's database (alias {alias!r}) gave it no server session within the "
    "run's time: every server of the pool is busy; raise the pool's default_pool_size or run the job at a quieter "
    "time (README: The advisory lock)"
)
# PgBouncer's errors: a transaction in statement pooling; a client that waited query_wait_timeout for a server.
STATEMENT_POOLING_ERROR = "transaction blocks not allowed in statement pooling mode"
QUERY_WAIT_TIMEOUT_ERROR = "query_wait_timeout"
WATCH_SECONDS = 0.1

Transaction = Callable[[], AbstractContextManager]  # a bounded transaction on the job's connection, yielding a cursor


class PooledSessionError(RuntimeError):
    """The job's session may be shared with other clients (a pooler not declared a session pool, or whose session
    changed): nothing was locked by it, and nothing deleted after it was found."""


class PoolSaturated(RuntimeError):
    """The pooler gave the job no server session within the run's time: nothing was locked or deleted."""


class PoolerWaitStopped(RuntimeError):
    """The first statement through a pooler was cancelled by a stop request while it waited."""


def advisory_lock_key(name: str) -> int:
    digest = hashlib.sha256(name.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], byteorder="big", signed=True)


def key_parts(key: int) -> dict[str, int]:
    """How pg_locks shows a bigint advisory key: its high and low 32 bits."""
    return {"classid": (key >> 32) & 0xFFFFFFFF, "objid": key & 0xFFFFFFFF}


@dataclass(frozen=True)
class LockSession:
    """The database session that holds the lock: its backend pid and the run id it was marked with."""

    alias: str
    backend_pid: int
    marker: str

    def verify(self, backend_pid: int, marker: str | None) -> None:
        if (backend_pid, marker) != (self.backend_pid, self.marker):
            raise PooledSessionError(SESSION_CHANGED.format(alias=self.alias))


@contextmanager
def advisory_lock(
    name: str, *, using: str = "default", marker: str | None = None, transaction: Transaction | None = None,
    pooler: str = "", time_left: Callable[[], timedelta] | None = None, stop=None,
) -> Iterator[LockSession | None]:
    """Try to take the lock without waiting; yield the session holding it, or None when another run holds it; release
    it on the way out. Raises PooledSessionError, holding nothing, when a pooler answers that `pooler` does not
    declare a session pool. `marker` names the holder (the run id); `transaction` runs each statement (the run's
    bounded transactions); `time_left` and `stop` (a service.StopRequest) bound the first statement, which may wait
    for a pooled server."""
    key = advisory_lock_key(name)
    connection = connections[using]
    marker = marker or str(uuid.uuid4())
    transaction = transaction or (lambda: plain_transaction(using))
    pooled = pooler_answers(connection, time_left=time_left, stop=stop)
    if pooled and pooler != SESSION_POOL:
        raise PooledSessionError(refusal(connection, using))
    with transaction() as cursor:
        cursor.execute(
            f"SELECT pg_backend_pid(), set_config(%(marker_name)s, %(marker)s, false), ({LOCK_HELD})",
            {"marker_name": SESSION_MARKER, "marker": marker, **key_parts(key)},
        )
        backend_pid, _, already_held = cursor.fetchone()
        if already_held and not pooled:  # this very connection holds it: a run in progress in this process
            raise PooledSessionError(HELD_BY_THIS_SESSION.format(alias=using))
        if already_held:  # a fresh pooled session holds it: a killed client of a pool that does not reset left it
            cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
            logger.warning(STALE_LOCK_RELEASED, extra={"lock": name})
    with transaction() as cursor:
        cursor.execute(
            "SELECT pg_try_advisory_lock(%s), pg_backend_pid(), current_setting(%s, true)", [key, SESSION_MARKER]
        )
        acquired, backend_pid_now, marker_now = cursor.fetchone()
        if (backend_pid_now, marker_now) != (backend_pid, marker):
            if acquired:  # still on the session that took it, in this transaction
                cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
            raise PooledSessionError(SESSION_CHANGED.format(alias=using))
    session = connection.connection
    try:
        yield LockSession(alias=using, backend_pid=backend_pid, marker=marker) if acquired else None
    finally:
        if acquired:
            release(connection, session, name, key)


@contextmanager
def plain_transaction(using: str) -> Iterator:
    with atomic(using=using), connections[using].cursor() as cursor:
        yield cursor


def pooler_answers(connection, *, time_left: Callable[[], timedelta] | None, stop) -> bool:
    """Whether a pooler stands between the job and PostgreSQL: the backend pid of the start-up message
    (BackendKeyData) is the pooler's own, not the server session's."""
    with bounded(connection, time_left=time_left, stop=stop):
        connection.ensure_connection()  # Django's first statements (the time zone) may wait for a server too
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            backend_pid = cursor.fetchone()[0]
    return connection.connection.info.backend_pid != backend_pid


@contextmanager
def bounded(connection, *, time_left: Callable[[], timedelta] | None, stop) -> Iterator[None]:
    """End the statement in the block when the run's time is up or it is asked to stop. statement_timeout cannot
    bound it: a statement waiting in a pooler's queue for a free server has not reached PostgreSQL. A watcher
    polls, because Django opens the connection (and runs its first statements) inside the block."""
    done = threading.Event()

    def must_end() -> bool:
        return (stop is not None and stop.requested) or (time_left is not None and time_left() <= timedelta(0))

    def watch() -> None:
        while not done.wait(WATCH_SECONDS):
            if must_end() and connection.connection is not None:
                disconnect(connection.connection)
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield
    except DatabaseError as error:
        if stop is not None and stop.requested:
            raise PoolerWaitStopped() from error
        if QUERY_WAIT_TIMEOUT_ERROR in str(error) or must_end():
            raise PoolSaturated(POOL_SATURATED.format(alias=connection.alias)) from error
        raise
    finally:
        done.set()
        watcher.join()


def disconnect(database_connection) -> None:
    """End the connection under a statement that waits in a pooler's queue: PgBouncer ignores a cancel request for
    a client that has no server yet. The statement then fails as a lost connection."""
    try:
        with socket.socket(fileno=os.dup(database_connection.pgconn.socket)) as connection_socket:
            connection_socket.shutdown(socket.SHUT_RDWR)
    except OSError as error:  # already gone: the statement fails on its own
        logger.warning("could not end the connection waiting for the pooler: %s", error)


def refusal(connection, using: str) -> str:
    """The cause a pooler not declared a session pool is refused with: statement pooling shows itself by refusing a
    transaction; transaction and session pooling look alike."""
    try:
        with atomic(using=using), connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as error:
        if STATEMENT_POOLING_ERROR in str(error):
            return STATEMENT_POOLING.format(alias=using)
        raise
    return POOLED_SESSION.format(alias=using)


def release(connection, session, name: str, key: int) -> None:
    # Django replaces a connection it had to drop (a failed rollback after the connection was lost) with a new one
    # on the next query, and a new session holds no lock.
    if connection.connection is session and not session.closed:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
                if not cursor.fetchone()[0]:
                    logger.error("advisory lock was not held by this session at release", extra={"lock": name})
            return
        except DatabaseError:
            pass  # the connection broke just now
    # A session lock goes with its session: there is nothing left to release.
    logger.warning("advisory lock went with its session, which is gone", extra={"lock": name})
