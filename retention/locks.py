"""A PostgreSQL session-level advisory lock, so that only one purge runs at a time across all hosts, and proof
that the session holding it is the one running each batch.

The key is derived from a name by a fixed, documented rule (README): the first 8 bytes of the SHA-256 of the
UTF-8 name, read as a big-endian signed 64-bit integer. A session lock lives as long as the database session.

Behind a connection pooler in transaction mode (PgBouncer `pool_mode = transaction`) a client's transactions run on
whichever server session is free: the lock would land on a shared server session, another client could take it
again there (advisory locks are re-entrant within a session), batches could run on sessions that do not hold it,
and a killed job would leave it behind in the pool for good. So the job marks its session (a session setting
holding the run id) and refuses, before it locks anything, when:

* the session already holds the lock (another client left it on this shared server session);
* a pooler answers for the server (the pid the connection was given at start-up is not the backend's) and a
  second client connection lands on the same server session, marker and all: that is transaction pooling;
* the session that took the lock is not the one running the next statement (pid or marker changed).

Every batch transaction re-checks the last point in its first statement (`LockSession.verify`). Session pooling
keeps a client on one server session and resets it (`DISCARD ALL`, which releases advisory locks) when the client
goes, so it passes all checks and a killed job's lock goes with its client.
"""

import hashlib
import logging
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

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
POOLED_SESSION = (
    "the job's database connection (alias {alias!r}) goes through a connection pooler in transaction mode, where "
    "a session advisory lock cannot hold; point DELISTED_RETENTION_DATABASE_URL at PostgreSQL directly or at a "
    "session-pooling pool (README: The advisory lock)"
)

Transaction = Callable[[], AbstractContextManager]  # a bounded transaction on the job's connection, yielding a cursor


class PooledSessionError(RuntimeError):
    """The job's session is shared with other clients (transaction pooling): nothing was locked or deleted."""


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
            raise PooledSessionError(POOLED_SESSION.format(alias=self.alias))


@contextmanager
def advisory_lock(
    name: str, *, using: str = "default", marker: str | None = None, transaction: Transaction | None = None,
    application_name: str = "purge_delisted",
) -> Iterator[LockSession | None]:
    """Try to take the lock without waiting; yield the session holding it, or None when another run holds it; release
    it on the way out. Raises PooledSessionError, holding nothing, when the session is shared. `marker` names the
    holder (the run id); `transaction` runs each statement (the run's bounded transactions)."""
    key = advisory_lock_key(name)
    connection = connections[using]
    marker = marker or str(uuid.uuid4())
    transaction = transaction or (lambda: plain_transaction(using))
    pooled = PooledSessionError(POOLED_SESSION.format(alias=using))
    with transaction() as cursor:
        cursor.execute(
            f"SELECT pg_backend_pid(), set_config(%(marker_name)s, %(marker)s, false), ({LOCK_HELD})",
            {"marker_name": SESSION_MARKER, "marker": marker, **key_parts(key)},
        )
        backend_pid, _, already_held = cursor.fetchone()
    if already_held:
        raise pooled
    if connection.connection.info.backend_pid != backend_pid and second_client_sees(connection, marker, application_name):
        raise pooled
    with transaction() as cursor:
        cursor.execute(
            "SELECT pg_try_advisory_lock(%s), pg_backend_pid(), current_setting(%s, true)", [key, SESSION_MARKER]
        )
        acquired, backend_pid_now, marker_now = cursor.fetchone()
        if (backend_pid_now, marker_now) != (backend_pid, marker):
            if acquired:  # still on the session that took it, in this transaction
                cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
            raise pooled
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


def second_client_sees(connection, marker: str, application_name: str) -> bool:
    """Whether another client connection, opened like the job's, lands on the job's server session (its marker)."""
    probe = connection.get_new_connection(connection.get_connection_params())
    try:
        with probe.cursor() as cursor:
            cursor.execute("SELECT set_config('application_name', %s, false)", [application_name])
            cursor.execute("SELECT current_setting(%s, true)", [SESSION_MARKER])
            return cursor.fetchone()[0] == marker
    finally:
        probe.close()


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
