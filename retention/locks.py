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
    try:
        yield acquired
    finally:
        if acquired:
            release(connection, name, key)


def release(connection, name: str, key: int) -> None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
            released = cursor.fetchone()[0]
    except DatabaseError:
        # The session is gone (connection lost), and a session lock goes with it.
        logger.warning("advisory lock %s (%s) was not released explicitly: its session is gone", name, key)
        return
    if not released:
        logger.error("advisory lock %s (%s) was not held by this session at release", name, key)
