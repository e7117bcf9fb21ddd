"""A PostgreSQL session-level advisory lock, so that only one purge runs at a time across all hosts.

The key is derived from a name by a fixed, documented rule (README): the first 8 bytes of the SHA-256 of the
UTF-8 name, read as a big-endian signed 64-bit integer. A session lock lives as long as the database session,
so it needs a real session: not a connection behind a transaction-pooling PgBouncer.
"""

import hashlib
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DatabaseError, connections

logger = logging.getLogger(__name__)


def advisory_lock_key(name: str) -> int:
    digest = hashlib.sha256(name.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], byteorder="big", signed=True)


@contextmanager
def advisory_lock(name: str, *, using: str = "default") -> Iterator[bool]:
    """Try to take the lock without waiting; yield whether it was taken; release it on the way out."""
    key = advisory_lock_key(name)
    connection = connections[using]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
        acquired = cursor.fetchone()[0]
    # The session that holds the lock. Django replaces a connection it had to drop (a failed rollback after the
    # connection was lost) with a new one on the next query, and a new session holds no lock.
    session = connection.connection
    try:
        yield acquired
    finally:
        if acquired:
            release(connection, session, name, key)


def release(connection, session, name: str, key: int) -> None:
    if connection.connection is session and not session.closed:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
                if not cursor.fetchone()[0]:
                    logger.error("advisory lock %s (%s) was not held by this session at release", name, key)
            return
        except DatabaseError:
            pass  # the connection broke just now
    # A session lock goes with its session: there is nothing left to release.
    logger.warning("advisory lock %s (%s) went with its session, which is gone", name, key)
