"""The job's database session: one object owning the alias, the timeouts, the run's deadline and its stop request.
A `Session` reads on an alias (the admin page, the web metrics); a `JobSession` is a run's, under the bounds the
server keeps (retention.bounds). A connection lost or cut is never replaced: the server ends the orphan, the advisory
lock with it. Why: docs/how-it-works.md, "The job's session" and "Stopping a run".
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

from django.db import DatabaseError, OperationalError, connections, transaction

from config.logging import RunLog
from retention.bounds import BOUNDS, client_options, server_bounds
from retention.limits import PurgeLimits
from retention.results import StopReason
from retention.statements import STATEMENTS
from retention.stopping import GRACE, STEP, StopRequest, StopRun

logger = logging.getLogger(__name__)

NO_NEW_CONNECTION = "the run's database connection is lost; a new one would hold no lock, so the run opens none"
# PostgreSQL's WARNING when a COMMIT's wait for a synchronous standby is cancelled (syncrep.c): the COMMIT then
# returns success, the transaction is committed locally.
SYNC_WAIT_CANCEL_NOTICE = "wait for synchronous replication"
SYNC_WAIT_CANCELLED_MESSAGE = (
    "a batch committed on the primary but its synchronous standby did not confirm it (the wait was cancelled by "
    "the run's stop or time limit): the run stops; check the standby named in synchronous_standby_names"
)


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
    """A run's session on `using`: the run's id, log and limits, their bounds and deadline, its stop request."""

    using: str
    limits: PurgeLimits
    stop: StopRequest = field(default_factory=StopRequest)
    run_id: uuid.UUID = field(default_factory=uuid.uuid4)
    started: float = field(default_factory=time.monotonic)
    holder: tuple[int, str] | None = None  # the advisory lock's (backend pid, marker): each batch proves it
    unconfirmed_commit: bool = False  # a COMMIT's wait for the synchronous standby was cancelled
    connected: bool = False  # the run has a connection: it opens no other
    lost: bool = False  # the connection was lost or cut: nothing more is sent
    _timed: tuple = field(default=(None, timedelta.max), repr=False)  # the connection with the bounds, its timeout

    def __post_init__(self):
        self.stop.deadline = self.started + self.limits.max_duration.total_seconds()
        self.stop.requested_at = max(self.stop.requested_at, self.started)  # asked before the run: from its start

    @cached_property
    def log(self) -> RunLog:
        """The run's log, the service's logger: every line carries the run id."""
        return RunLog(logging.getLogger("retention.service"), {"run_id": str(self.run_id)})

    def left(self) -> timedelta:
        return timedelta(seconds=self.stop.deadline - time.monotonic())

    def sleep(self, seconds: float) -> bool:
        """Sleep, waking at once on a stop request; whether the run may go on (no stop was requested)."""
        self.stop.wait(min(seconds, max(0.0, self.left().total_seconds())))
        return not self.stop.requested

    def must_stop(self) -> StopReason | None:
        if self.stop.requested:
            return StopReason.STOPPED
        return StopReason.MAX_DURATION if self.left() <= timedelta(0) else None

    def check(self) -> None:
        """Before work: StopRun when the run must not start it."""
        if reason := self.must_stop() or (self.unconfirmed_commit and StopReason.MAX_DURATION):
            raise StopRun(reason)  # only the run's time limit cancels a commit without a stop request

    @contextmanager
    def running(self) -> Iterator[JobSession]:
        """The run: the watcher thread, the job's way to connect (`_open`), the server's bounds reset after it on a
        connection that outlives it."""
        database = connections[self.using]
        database.get_new_connection = self._open(database.get_new_connection)  # this run's, on this thread's
        try:
            with self.stop.watching():
                yield self
        finally:
            del database.get_new_connection
            if not self.lost and self._timed[0] is not None and self._timed[0] is database.connection:
                try:
                    with database.cursor() as cursor:
                        cursor.execute(STATEMENTS["reset bounds"], {"names": list(BOUNDS)})
                except DatabaseError as error:
                    logger.warning("could not reset the session's bounds: %s", error)

    def _open(self, open_connection):
        """Django's connect, the job's way (retention.bounds), refusing a second connection: one Django opens after
        dropping a broken one holds no lock, and would wait for a partition."""
        def open_job_connection(params: dict):
            if self.connected:
                raise OperationalError(NO_NEW_CONNECTION)
            return open_connection(params | client_options(self.limits))
        return open_job_connection

    @contextmanager
    def connecting(self) -> Iterator:
        """The block opens the connection and runs its first statements, which a pooler's queue may hold: the run's
        end ends that wait (StopRun)."""
        connection = connections[self.using]
        with self.stop.flying(connection):
            try:
                yield connection
            except DatabaseError as error:
                if reason := self.must_stop():
                    raise StopRun(reason) from error
                raise

    @contextmanager
    def transaction(self, *, writes: bool = False) -> Iterator:
        """Statements under the run's bounds: a writing transaction (BEGIN ... COMMIT), which sends no statement once
        the run must stop; without `writes`, each statement commits on its own, two round trips fewer for a read.
        Ended by the run's end: StopRun, after a rollback. A lost connection sets `lost`."""
        if writes:
            self.check()
        connection = connections[self.using]
        if connection.connection is None:  # the first: a server that never answers, a pooler's queue, may wait
            with self.connecting():
                connection.ensure_connection()
        session, self.connected, sync_wait_cancels = connection.connection, True, []

        def notice(diagnostic) -> None:
            if SYNC_WAIT_CANCEL_NOTICE in (diagnostic.message_primary or ""):
                sync_wait_cancels.append(diagnostic)

        def stop_before(execute, sql, params, many, context):
            if (reason := self.must_stop()) and not sql.startswith(("ROLLBACK", "RELEASE")):  # undoing is no work
                raise StopRun(reason)
            return execute(sql, params, many, context)

        session.add_notice_handler(notice)
        try:
            with self.stop.flying(connection), connection.execute_wrapper(stop_before) if writes else nullcontext():
                try:
                    begun = transaction.atomic(using=self.using) if writes else nullcontext()
                    with begun, connection.cursor() as cursor:
                        self._bound(cursor, session)
                        yield cursor
                except BaseException as error:
                    self._timed = (None, timedelta.max)  # a SET in a transaction rolled back is undone
                    if isinstance(error, DatabaseError) and (session.closed or session.broken):
                        self.lost = True
                        if str(error) == NO_NEW_CONNECTION and isinstance(error.__context__, DatabaseError):
                            raise error.__context__  # the loss, not Django's try to connect again after it
                    elif isinstance(error, DatabaseError) and (reason := self.must_stop()):
                        raise StopRun(reason) from error
                    raise
        finally:
            session.remove_notice_handler(notice)
        if sync_wait_cancels:  # committed here, not confirmed by the standby: the caller counts it, the run stops
            self.unconfirmed_commit = True
            self.log.warning(SYNC_WAIT_CANCELLED_MESSAGE)

    def _bound(self, cursor, session) -> None:
        """The server's bounds: settings of the session, set by its first transaction, so that a batch pays no
        statement for them; again only when the run's end needs a shorter statement_timeout."""
        until_cut = max(self.stop.end_by() + GRACE - time.monotonic(), STEP)
        if self._timed[0] is session and self._timed[1] <= timedelta(seconds=until_cut):
            return
        statement_timeout = min(self.limits.statement_timeout, timedelta(seconds=max(until_cut - STEP, STEP)))
        bounds = server_bounds(self.limits, statement_timeout, f"purge_delisted {self.run_id}")
        cursor.execute(STATEMENTS["set bounds"], bounds)
        self._timed = (session, statement_timeout)
