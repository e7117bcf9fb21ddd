"""The job's database session: one object owning the alias, the run's limits and deadline, its stop request, and the
bounds the server keeps on it, which hold whatever the client or the network does; the client keeps only a stop
flag, read before each batch. A `Session` reads on an alias (the admin page, the web metrics). Why:
docs/how-it-works.md, "The job's session" and "Stopping a run".
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property

from django.db import DatabaseError, connections, transaction

from config.keepalives import keepalives
from config.logging import RunLog
from retention.limits import PurgeLimits
from retention.results import StopReason
from retention.statements import STATEMENTS

logger = logging.getLogger(__name__)

STOP_POLL = 0.1  # seconds: how soon a sleeping run sees a stop request
# The settings "set bounds" gives the job's session, which any role may set for its own, and "reset bounds" undoes.
BOUNDS = ("statement_timeout", "lock_timeout", "idle_session_timeout", "idle_in_transaction_session_timeout",
          "client_connection_check_interval", "tcp_keepalives_idle", "tcp_keepalives_interval",
          "tcp_keepalives_count", "tcp_user_timeout", "synchronous_commit")


class StopRequest:
    """A graceful stop, asked by SIGTERM/SIGINT (the command's handler) or by a caller: a flag the run reads before
    each batch. Setting an attribute is all a signal handler may safely do."""

    requested = False

    def request(self) -> None:
        self.requested = True


class StopRun(Exception):
    """A stop request, or the run's time run out, found before a batch or a part of a culprit search: the run ends
    there, the transaction in flight rolled back whole."""

    def __init__(self, reason: StopReason):
        super().__init__(reason)
        self.reason = reason


class Session:
    """Reads on the database `using`, each transaction on its own."""

    def __init__(self, using: str = "default"):
        self.using = using

    @contextmanager
    def transaction(self, *, writes: bool = False) -> Iterator:
        with transaction.atomic(using=self.using), connections[self.using].cursor() as cursor:
            yield cursor


@dataclass
class JobSession(Session):
    """A run's session on `using`: its id, log, limits, deadline and stop request, and the connection its bounds are
    set on, never replaced once lost: a new one would hold no lock; the server ends the orphan and its lock."""

    using: str
    limits: PurgeLimits
    stop: StopRequest = field(default_factory=StopRequest)
    run_id: uuid.UUID = field(default_factory=uuid.uuid4)
    started: float = field(default_factory=time.monotonic)
    holder: tuple[int, str] | None = None  # the advisory lock's (backend pid, marker): each batch proves it
    bounded: object = None  # the connection (psycopg's) the bounds are set on: the run's
    commit_unknown: bool = False  # the connection was lost at a COMMIT: whether it committed is unknown

    @cached_property
    def log(self) -> RunLog:
        """The run's log, the service's logger: every line carries the run id."""
        return RunLog(logging.getLogger("retention.service"), {"run_id": str(self.run_id)})

    def server_bounds(self) -> dict[str, str]:
        """The parameters of "set bounds" (docs/how-it-works.md, "The server keeps the run's bounds"): COMMITs are
        durable on the primary alone, so none waits for a standby, a wait only the client could end."""
        limits = self.limits
        idle, interval, count, user_timeout = keepalives(limits.dead_peer_timeout.total_seconds())
        return {
            "statement_timeout": milliseconds(limits.statement_timeout),
            "lock_timeout": milliseconds(limits.lock_timeout),
            "idle_session_timeout": milliseconds(limits.longest_pause + limits.dead_peer_timeout),
            "idle_in_transaction_session_timeout": milliseconds(limits.dead_peer_timeout),  # the job never waits there
            "client_connection_check_interval": "1s", "tcp_keepalives_idle": str(idle),
            "tcp_keepalives_interval": str(interval), "tcp_keepalives_count": str(count),
            "tcp_user_timeout": str(user_timeout), "synchronous_commit": "local",
            "application_name": f"purge_delisted {self.run_id}",
        }

    def left(self) -> timedelta:
        return timedelta(seconds=self.started + self.limits.max_duration.total_seconds() - time.monotonic())

    def check(self) -> None:
        """Before work: StopRun when a stop was asked or the run's time is up."""
        if self.stop.requested or self.left() <= timedelta(0):
            raise StopRun(StopReason.STOPPED if self.stop.requested else StopReason.MAX_DURATION)

    def sleep(self, seconds: float) -> None:
        """Sleep, never past the run's end, waking within STOP_POLL of a stop request."""
        end = time.monotonic() + min(seconds, self.left().total_seconds())
        while not self.stop.requested and (remaining := end - time.monotonic()) > 0:
            time.sleep(min(remaining, STOP_POLL))

    @property
    def lost(self) -> bool:
        """The run's connection is gone or broken: nothing more is sent on it, and no other is opened."""
        connection = connections[self.using].connection
        return self.bounded is not None and (connection is not self.bounded or connection.closed or connection.broken)

    @contextmanager
    def transaction(self, *, writes: bool = False) -> Iterator:
        """Statements under the server's bounds, which the first sets: a writing transaction (BEGIN ... COMMIT), or,
        without `writes`, each statement its own transaction, two round trips fewer for a read. A writing transaction
        is begun and ended here, not by an atomic block, which on a lost connection connects again (to turn autocommit
        back on): a lost connection is closed, and one lost once the block ran was lost at its COMMIT
        (`commit_unknown`). In a caller's atomic block (a test's) the transaction is a savepoint of it."""
        connection = connections[self.using]
        if self.bounded is None:
            with connection.cursor() as cursor:
                cursor.execute(STATEMENTS["set bounds"], self.server_bounds())
            self.bounded = connection.connection
        if not writes or connection.in_atomic_block:
            with transaction.atomic(using=self.using) if writes else nullcontext(), connection.cursor() as cursor:
                yield cursor
            return
        committing = False
        connection.set_autocommit(False)
        try:
            with connection.cursor() as cursor:
                yield cursor
            committing = True
            connection.commit()
        except BaseException:
            if self.lost:
                self.commit_unknown = committing
                connection.close()
            else:
                connection.rollback()
            raise
        finally:
            if not self.lost:
                connection.set_autocommit(True)

    def __enter__(self) -> JobSession:
        return self

    def __exit__(self, *exc_info) -> None:
        """The server's bounds back to the session's defaults, on a connection that outlives the run (a shell, a
        test): no 60 s statement timeout, no idle timeout there."""
        if self.bounded is not None and not self.lost:
            try:
                with connections[self.using].cursor() as cursor:
                    cursor.execute(STATEMENTS["reset bounds"], {"names": list(BOUNDS)})
            except DatabaseError as error:
                logger.warning("could not reset the session's bounds: %s", error)


def milliseconds(duration: timedelta) -> str:
    return f"{max(1, round(duration.total_seconds() * 1000))}ms"
