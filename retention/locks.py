"""A PostgreSQL session advisory lock, so that one purge runs at a time across all hosts, and the proof before each
batch's COMMIT that it ran on the session holding it (`prove_holder`). A pooler may share the lock's session or keep
it after the job is killed, so the job refuses one before it locks anything (docs/poolers.md). The key:
docs/operations.md, "The advisory lock".
"""

import hashlib
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DatabaseError, connections

from retention.session import JobSession
from retention.statements import STATEMENTS

logger = logging.getLogger(__name__)

SESSION_MARKER = "purge_delisted.run_id"
POOLED = (
    "the job's database connection (alias {alias!r}) goes through a connection pooler, where a session advisory "
    "lock cannot be trusted: point DELISTED_RETENTION_DATABASE_URL at PostgreSQL directly (docs/poolers.md)"
)
SESSION_CHANGED = (
    "the job's database session (alias {alias!r}) changed between statements, so it no longer holds the advisory "
    "lock: the run stops (docs/poolers.md)"
)
LOCK_GONE = "advisory lock not released: its session is lost, and the server ends the lock with it"
QUERY_WAIT_TIMEOUT_ERROR = "query_wait_timeout"  # PgBouncer: a client waited that long for a server


class PooledSessionError(RuntimeError):
    """The job's session is or may be shared with other clients: nothing was deleted after it was found."""


def advisory_lock_key(name: str) -> int:
    digest = hashlib.sha256(name.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], byteorder="big", signed=True)


@contextmanager
def advisory_lock(session: JobSession, name: str) -> Iterator[bool]:
    """Try to take the lock on the session without waiting; yield whether it was taken, and release it on the way
    out. The session is marked with its run id, so that each batch can prove it ran on the holding session."""
    key, marker = advisory_lock_key(name), str(session.run_id)
    refuse_a_pooler(session)
    with session.transaction() as cursor:
        cursor.execute(STATEMENTS["advisory lock"], {"marker_name": SESSION_MARKER, "marker": marker, "key": key})
        backend_pid, _, acquired = cursor.fetchone()
    session.holder = (backend_pid, marker) if acquired else None
    try:
        yield acquired
    finally:
        session.holder = None
        if acquired:
            release(session, name, key)


def prove_holder(session: JobSession, backend_pid: int, marker: str | None) -> None:
    """That a batch ran on the session holding the advisory lock."""
    if session.holder is not None and (backend_pid, marker) != session.holder:
        raise PooledSessionError(SESSION_CHANGED.format(alias=session.using))


def refuse_a_pooler(session: JobSession) -> None:
    """Refuse when a pooler stands between the job and PostgreSQL: the backend pid of the start-up message
    (BackendKeyData) is the pooler's own, not the server session's. A pooler with no server to give holds the probe
    until its own query_wait_timeout, which is then refused the same way."""
    connection = connections[session.using]
    try:
        with connection.cursor() as cursor:
            cursor.execute(STATEMENTS["pooler probe"])
            backend_pid = cursor.fetchone()[0]
    except DatabaseError as error:
        if QUERY_WAIT_TIMEOUT_ERROR in str(error):
            raise PooledSessionError(POOLED.format(alias=session.using)) from error
        raise
    if connection.connection.info.backend_pid != backend_pid:
        raise PooledSessionError(POOLED.format(alias=session.using))


def release(session: JobSession, name: str, key: int) -> None:
    """Unlock on the session; a lock whose session is lost ends with it on the server (the session opens no other)."""
    try:
        if not session.lost:
            with session.transaction() as cursor:
                cursor.execute(STATEMENTS["advisory unlock"], {"key": key})
            return
    except DatabaseError:  # broke just now: a session lock goes with its session
        pass
    logger.warning(LOCK_GONE, extra={"lock": name})
