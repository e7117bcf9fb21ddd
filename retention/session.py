"""The job's database session: one object owning the alias, the timeouts, the run's deadline, the stop request, and
the interruption of whatever the session is running when a stop or the deadline comes.

A `Session` reads on an alias, a transaction at a time (the admin page, the web metrics). A `JobSession` is the
run's: its transactions run under its lock_timeout and statement_timeout, and one watcher thread interrupts the work
in flight when a stop is requested or the deadline passes: a cancel, again every CANCEL_EVERY, then the socket shut
after GIVE_UP_AFTER. The interrupted transaction rolls back and raises StopRun with the reason.
What is interrupted when, and why: docs/how-it-works.md, "Stopping a run".
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property

from django.db import DatabaseError, connections, transaction

from config.logging import RunLog
from retention.limits import PurgeLimits
from retention.results import StopReason

logger = logging.getLogger(__name__)

WATCH_EVERY = 0.05  # seconds between the watcher's looks
CANCEL_EVERY = 0.5
GIVE_UP_AFTER = 2.0
STOP_GRACE = 2.0  # what a read begun after a stop or the deadline (the end count, the unlock) may take
# Seconds from a stop request by which the process's last wait (the trace flush at exit) ends, so that it exits
# within 5 s of SIGTERM, its interpreter's own exit included.
STOP_BOUND = 4.0
SET_TIMEOUTS = """
SELECT set_config('statement_timeout', %(statement_timeout)s, false),
       set_config('lock_timeout', %(lock_timeout)s, false),
       set_config('application_name', %(application_name)s, false)
"""
RESET_TIMEOUTS = """
SELECT set_config(name, reset_val, false) FROM pg_settings WHERE name IN ('statement_timeout', 'lock_timeout')
"""
# PostgreSQL's WARNING when a COMMIT's wait for a synchronous standby is cancelled (syncrep.c): the COMMIT then
# returns success, the transaction is committed locally.
SYNC_WAIT_CANCEL_NOTICE = "wait for synchronous replication"
SYNC_WAIT_CANCELLED_MESSAGE = (
    "a batch committed on the primary but its synchronous standby did not confirm it (the wait was cancelled by "
    "the run's stop or time limit): the run stops; check the standby named in synchronous_standby_names"
)


class StopRun(Exception):
    """The run must stop (a stop request, the run's time, a limit, a failure that ends it): raised between batches
    or from an interrupted statement, caught once by the run."""

    def __init__(self, reason: StopReason):
        super().__init__(reason)
        self.reason = reason


class StopRequest:
    """A graceful stop, asked by SIGTERM/SIGINT (the command) or by a caller. Safe in a signal handler: it only sets
    a flag (Event.set() there can deadlock on the lock of the Event.wait() it interrupted); the session's watcher
    acts on it and wakes the run's sleeps."""

    def __init__(self):
        self._requested = False
        self.requested_at = 0.0
        self._awake = threading.Event()
        self.connecting = False  # set by the session while a connection opens

    def request(self) -> None:
        self.requested_at = time.monotonic()
        self._requested = True
        if self.connecting and threading.current_thread() is threading.main_thread():
            # A signal during a connect: no socket to cancel or shut yet; raised from the handler, this ends the wait.
            raise StopRun(StopReason.STOPPED)

    @property
    def requested(self) -> bool:
        return self._requested

    def wait(self, seconds: float) -> None:
        self._awake.wait(seconds)

    def exit_wait(self, bound: float) -> float:
        """How long a wait on the way out of the process may take: `bound`, or, once a stop is requested, no more
        than what is left of STOP_BOUND since the request."""
        if not self._requested:
            return bound
        return max(0.0, min(bound, self.requested_at + STOP_BOUND - time.monotonic()))

    def wake(self) -> None:
        self._awake.set()


class Session:
    """Reads on the database `using`, each transaction on its own."""

    def __init__(self, using: str = "default"):
        self.using = using

    @contextmanager
    def transaction(self, *, writes: bool = False) -> Iterator:
        with transaction.atomic(using=self.using), connections[self.using].cursor() as cursor:
            yield cursor


@dataclass
class Flight:
    """What the session is running now: a transaction, or the wait for a connection."""

    connection: object  # Django's connection, as the run's thread has it (connections[] is per thread)
    after_stop: bool  # begun after the stop request or the deadline (the end count): given STOP_GRACE
    reason: StopReason | None = None  # why the watcher interrupts it
    interrupted: float = 0.0
    cancelled: float = 0.0
    cut: bool = False


@dataclass
class JobSession(Session):
    """A run's session on `using`: the run's id, log and limits, their timeouts and deadline, its stop request."""

    using: str
    limits: PurgeLimits
    stop: StopRequest = field(default_factory=StopRequest)
    run_id: uuid.UUID = field(default_factory=uuid.uuid4)
    started: float = field(default_factory=time.monotonic)
    # The advisory lock's holder (backend pid, marker), once taken: every batch proves it ran there.
    holder: tuple[int, str] | None = None
    unconfirmed_commit: bool = False  # a COMMIT's wait for the synchronous standby was cancelled
    _flight: Flight | None = field(default=None, repr=False)
    _guard: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _timed: object = field(default=None, repr=False)  # the database connection that has the run's timeouts

    @cached_property
    def log(self) -> RunLog:
        """The run's log, the service's logger: every line carries the run id."""
        return RunLog(logging.getLogger("retention.service"), {"run_id": str(self.run_id)})

    def left(self) -> timedelta:
        return self.limits.max_duration - timedelta(seconds=time.monotonic() - self.started)

    def connection(self):
        """The database connection the session runs on now (Django replaces one that broke)."""
        return connections[self.using].connection

    def sleep(self, seconds: float) -> bool:
        """Sleep, waking at once on a stop request; whether the run may go on (no stop was requested)."""
        self.stop.wait(min(seconds, max(0.0, self.left().total_seconds())))
        return not self.stop.requested

    def must_stop(self) -> tuple[StopReason, float] | None:
        """Why the run must stop and since when (a stop request, the deadline), or None."""
        if self.stop.requested:
            return StopReason.STOPPED, self.stop.requested_at
        if self.left() <= timedelta(0):
            return StopReason.MAX_DURATION, self.started + self.limits.max_duration.total_seconds()
        return None

    def check(self) -> None:
        """Before work: StopRun when the run must not start it."""
        if stop := self.must_stop():
            raise StopRun(stop[0])
        if self.unconfirmed_commit:  # only the run's time limit cancels a commit without a stop request
            raise StopRun(StopReason.MAX_DURATION)

    @contextmanager
    def running(self) -> Iterator[JobSession]:
        """The run on this session: the watcher thread while it lasts; the session's timeouts reset after it."""
        done = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(done,), name="purge_delisted stop", daemon=True)
        watcher.start()
        try:
            yield self
        finally:
            done.set()
            watcher.join()
            self._reset_timeouts()

    @contextmanager
    def connecting(self) -> Iterator:
        """The block opens the connection and runs its first statements, which a server that never answers, or a
        pooler's queue, may keep waiting: the deadline and a stop end that wait (StopRun)."""
        connection = connections[self.using]
        with self._flying(Flight(connection, after_stop=False)) as flight:
            try:
                self.stop.connecting = connection.connection is None
                if self.stop.connecting and self.stop.requested:
                    raise StopRun(StopReason.STOPPED)
                yield connection
            except DatabaseError as error:
                if flight.reason:
                    raise StopRun(flight.reason) from error
                raise
            finally:
                self.stop.connecting = False

    @contextmanager
    def transaction(self, *, writes: bool = False) -> Iterator:
        """A transaction under the run's timeouts, interrupted on a stop request or at the deadline: StopRun, after
        a rollback. A writing transaction sends no statement once a stop is requested."""
        if writes:
            self.check()
        connection = connections[self.using]
        if connection.connection is None:  # the first, or Django dropped one that broke: a new one may wait
            with self.connecting():
                connection.ensure_connection()
        session = connection.connection
        sync_wait_cancels = []

        def notice(diagnostic) -> None:
            if SYNC_WAIT_CANCEL_NOTICE in (diagnostic.message_primary or ""):
                sync_wait_cancels.append(diagnostic)

        def stop_before(execute, sql, params, many, context):
            if self.stop.requested and not sql.startswith(("ROLLBACK", "RELEASE")):  # undoing is no new work
                raise StopRun(StopReason.STOPPED)
            return execute(sql, params, many, context)

        session.add_notice_handler(notice)
        flight = Flight(connection, after_stop=self.must_stop() is not None)
        try:
            with self._flying(flight), connection.execute_wrapper(stop_before) if writes else nullcontext():
                try:
                    with transaction.atomic(using=self.using), connection.cursor() as cursor:
                        self._bound(cursor, session)
                        yield cursor
                except DatabaseError as error:
                    self._timed = None  # rolled back: a SET in the transaction is undone
                    if flight.reason:
                        raise StopRun(flight.reason) from error
                    raise
                except BaseException:
                    self._timed = None
                    raise
        finally:
            session.remove_notice_handler(notice)
        if sync_wait_cancels:
            # Committed here, not confirmed by the standby: the caller counts the batch, the run stops.
            self.unconfirmed_commit = True
            self.log.warning(SYNC_WAIT_CANCELLED_MESSAGE)

    def _bound(self, cursor, session) -> None:
        """The timeouts: settings of the session, set with its application name by its first transaction, so that a
        batch pays no statement for them."""
        if self._timed is not session:
            cursor.execute(SET_TIMEOUTS, {
                "statement_timeout": f"{milliseconds(self.limits.statement_timeout)}ms",
                "lock_timeout": f"{milliseconds(self.limits.lock_timeout)}ms",
                "application_name": f"purge_delisted {self.run_id}",
            })
            self._timed = session

    def _reset_timeouts(self) -> None:
        if self._timed is None or self.connection() is not self._timed:
            return  # nothing set, or set on a session that is gone
        try:
            with connections[self.using].cursor() as cursor:
                cursor.execute(RESET_TIMEOUTS)
        except DatabaseError as error:
            logger.warning("could not reset the session's timeouts: %s", error)
        self._timed = None

    @contextmanager
    def _flying(self, flight: Flight) -> Iterator[Flight]:
        with self._guard:
            self._flight = flight
        try:
            yield flight
        finally:
            with self._guard:  # a cancel is sent under the guard: it never reaches the next flight
                self._flight = None

    def _watch(self, done: threading.Event) -> None:
        while not done.wait(WATCH_EVERY):
            if self.stop.requested:
                self.stop.wake()
            with self._guard:
                if (flight := self._flight) is not None:
                    self._interrupt_if_due(flight)

    def _interrupt_if_due(self, flight: Flight) -> None:
        if flight.reason is None:
            stop = self.must_stop()
            if stop is None or (flight.after_stop and time.monotonic() - stop[1] < STOP_GRACE):
                return
            flight.reason = stop[0]
            flight.interrupted = time.monotonic()
        database_connection = flight.connection.connection
        if database_connection is None or flight.cut:
            return  # not connected yet: the next look
        now = time.monotonic()
        if now - flight.interrupted >= GIVE_UP_AFTER:
            flight.cut = True
            shut_down(database_connection)
        elif now - flight.cancelled >= CANCEL_EVERY:
            flight.cancelled = now
            try:
                database_connection.cancel_safe(timeout=1)
            except Exception as error:  # the connection may be gone; the socket is shut next
                logger.warning("could not cancel the statement in flight: %s", error)


def shut_down(database_connection) -> None:
    """End a connection whose statement a cancel did not end (a pooler's queue ignores cancels): the statement then
    fails as a lost connection."""
    try:
        with socket.socket(fileno=os.dup(database_connection.pgconn.socket)) as connection_socket:
            connection_socket.shutdown(socket.SHUT_RDWR)
    except OSError as error:  # already gone: the statement fails on its own
        logger.warning("could not end the connection in flight: %s", error)


def sqlstate(error: BaseException) -> str | None:
    """The SQLSTATE of a database error, which Django keeps on the psycopg error it wraps."""
    for candidate in (error, error.__cause__):
        if code := getattr(candidate, "sqlstate", None):
            return code
    return None


def milliseconds(duration: timedelta) -> int:
    return max(1, round(duration.total_seconds() * 1000))
