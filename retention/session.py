"""The job's database session: one object owning the alias, the timeouts, the run's deadline and its stop request.

A `Session` reads on an alias, a transaction at a time (the admin page, the web metrics). A `JobSession` is the
run's. The server keeps its bounds, which hold whatever happens to the client or the network: each transaction's
statement_timeout ends by the run's end plus GRACE, idle timeouts end a session the client left, and TCP keepalives
on both ends notice a dead peer. The client keeps only what the server cannot do: a stop flag, one cancel of the work
in flight when the run must end, and, GRACE later, shutting its own socket. A connection lost or cut is never
replaced: the server ends the orphaned session, and the advisory lock with it. Figures and reasons:
docs/how-it-works.md, "Stopping a run".
"""

from __future__ import annotations

import logging
import math
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

from django.db import DatabaseError, OperationalError, connections, transaction

from config.logging import RunLog
from retention.limits import PurgeLimits
from retention.results import StopReason

logger = logging.getLogger(__name__)

WATCH_EVERY = 0.05  # seconds between the watcher's looks
GRACE = 2.0  # what work begun at the run's end (the end count, the unlock) may take; then the client cuts
LAST_WORD = 0.5  # what a transaction begun past the grace (the unlock) may still take
TIMEOUT_STEP = 0.25  # a statement_timeout shortened for the run's end is set again after this long at most
EXIT_BOUND = 4.0  # the process's last waits (metrics, trace flush) end this long after the run's end
CONNECT_TIMEOUT = 3  # seconds: a connect ends within EXIT_BOUND of SIGTERM, with no interrupt
SERVER_BOUNDS = """
SELECT set_config('statement_timeout', %(statement_timeout)s, false),
       set_config('lock_timeout', %(lock_timeout)s, false),
       set_config('idle_session_timeout', %(idle_session_timeout)s, false),
       set_config('idle_in_transaction_session_timeout', %(idle_in_transaction_session_timeout)s, false),
       set_config('client_connection_check_interval', '1s', false),
       set_config('tcp_keepalives_idle', %(keepalives_idle)s, false),
       set_config('tcp_keepalives_interval', %(keepalives_interval)s, false),
       set_config('tcp_keepalives_count', %(keepalives_count)s, false),
       set_config('tcp_user_timeout', %(tcp_user_timeout)s, false),
       set_config('application_name', %(application_name)s, false)
"""
RESET_BOUNDS = """
SELECT set_config(name, reset_val, false) FROM pg_settings
 WHERE name IN ('statement_timeout', 'lock_timeout', 'idle_session_timeout', 'idle_in_transaction_session_timeout',
                'client_connection_check_interval', 'tcp_keepalives_idle', 'tcp_keepalives_interval',
                'tcp_keepalives_count', 'tcp_user_timeout')
"""
NO_NEW_CONNECTION = "the run's database connection is lost; a new one would hold no lock, so the run opens none"
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
    acts on it and wakes the run's sleeps. It also knows the run's deadline, which its session sets."""

    def __init__(self):
        self._requested = False
        self.requested_at = math.inf
        self.deadline = math.inf
        self._awake = threading.Event()

    def request(self) -> None:
        self.requested_at = time.monotonic()
        self._requested = True

    @property
    def requested(self) -> bool:
        return self._requested

    def end_by(self) -> float:
        """When the run must end (monotonic seconds): the stop request or the deadline, whichever came first."""
        return min(self.requested_at if self._requested else math.inf, self.deadline)

    def exit_wait(self, bound: float) -> float:
        """How long a wait on the way out of the process may take: `bound`, cut to end EXIT_BOUND after the run's
        end, so that the process exits within 5 s of it."""
        return max(0.0, min(bound, self.end_by() + EXIT_BOUND - time.monotonic()))

    def wait(self, seconds: float) -> None:
        self._awake.wait(seconds)

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
    """What the session is running now: a transaction, or the connection's first statements."""

    connection: object  # Django's connection, as the run's thread has it (connections[] is per thread)
    began: float = field(default_factory=time.monotonic)
    cancelled: bool = False
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
    connected: bool = False  # a connection was used: no other is opened
    lost: bool = False  # the connection was lost or cut: nothing more is sent
    _flight: Flight | None = field(default=None, repr=False)
    _guard: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _timed: object = field(default=None, repr=False)  # the database connection that has the run's bounds
    _statement_timeout: float = field(default=math.inf, repr=False)  # seconds, as set there

    def __post_init__(self):
        self.stop.deadline = self.started + self.limits.max_duration.total_seconds()
        self.stop.requested_at = max(self.stop.requested_at, self.started)  # asked before the run: from its start

    @cached_property
    def log(self) -> RunLog:
        """The run's log, the service's logger: every line carries the run id."""
        return RunLog(logging.getLogger("retention.service"), {"run_id": str(self.run_id)})

    def left(self) -> timedelta:
        return timedelta(seconds=self.stop.deadline - time.monotonic())

    def connection(self):
        """The database connection the session runs on now (Django drops one that broke)."""
        return connections[self.using].connection

    def sleep(self, seconds: float) -> bool:
        """Sleep, waking at once on a stop request; whether the run may go on (no stop was requested)."""
        self.stop.wait(min(seconds, max(0.0, self.left().total_seconds())))
        return not self.stop.requested

    def must_stop(self) -> StopReason | None:
        """Why the run must stop (a stop request, the deadline), or None."""
        if self.stop.requested:
            return StopReason.STOPPED
        return StopReason.MAX_DURATION if self.left() <= timedelta(0) else None

    def check(self) -> None:
        """Before work: StopRun when the run must not start it."""
        if reason := self.must_stop():
            raise StopRun(reason)
        if self.unconfirmed_commit:  # only the run's time limit cancels a commit without a stop request
            raise StopRun(StopReason.MAX_DURATION)

    @contextmanager
    def running(self) -> Iterator[JobSession]:
        """The run on this session: the watcher thread while it lasts, and its connections opened the job's way
        (`_open`); the server's bounds reset after it on a connection that outlives it."""
        database = connections[self.using]
        database.get_new_connection = self._open(database.get_new_connection)  # this run's, on this thread's
        done = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(done,), name="purge_delisted stop", daemon=True)
        watcher.start()
        try:
            yield self
        finally:
            done.set()
            watcher.join()
            del database.get_new_connection
            self._reset_bounds()

    def _open(self, open_connection):
        """Django's connect, with libpq's connect timeout and keepalives, which refuses a second connection: Django
        opens one after it dropped a broken one, which would hold no lock, and waits for a partition."""
        def open_job_connection(params: dict):
            if self.connected:
                raise OperationalError(NO_NEW_CONNECTION)
            idle, interval, count, user_timeout = self._keepalives()
            return open_connection(params | {
                "connect_timeout": CONNECT_TIMEOUT, "keepalives": 1, "keepalives_idle": idle,
                "keepalives_interval": interval, "keepalives_count": count, "tcp_user_timeout": user_timeout,
            })
        return open_job_connection

    @contextmanager
    def connecting(self) -> Iterator:
        """The block opens the connection and runs its first statements, which a pooler's queue may keep waiting:
        the run's end ends that wait (StopRun)."""
        connection = connections[self.using]
        with self._flying(Flight(connection)):
            try:
                yield connection
            except DatabaseError as error:
                if reason := self.must_stop():
                    raise StopRun(reason) from error
                raise

    @contextmanager
    def transaction(self, *, writes: bool = False) -> Iterator:
        """A transaction under the run's bounds. A writing one sends no statement once the run must stop. Ended by
        the run's end: StopRun, after a rollback; a lost connection marks the session `lost`."""
        if writes:
            self.check()
        connection = connections[self.using]
        if connection.connection is None:  # the first: a server that never answers, or a pooler's queue, may wait
            with self.connecting():
                connection.ensure_connection()
        session, self.connected = connection.connection, True
        sync_wait_cancels = []

        def notice(diagnostic) -> None:
            if SYNC_WAIT_CANCEL_NOTICE in (diagnostic.message_primary or ""):
                sync_wait_cancels.append(diagnostic)

        def stop_before(execute, sql, params, many, context):
            if (reason := self.must_stop()) and not sql.startswith(("ROLLBACK", "RELEASE")):  # undoing is no work
                raise StopRun(reason)
            return execute(sql, params, many, context)

        session.add_notice_handler(notice)
        try:
            with self._flying(Flight(connection)), connection.execute_wrapper(stop_before) if writes else nullcontext():
                try:
                    with transaction.atomic(using=self.using), connection.cursor() as cursor:
                        self._bound(cursor, session)
                        yield cursor
                except DatabaseError as error:
                    self._timed = None  # rolled back: a SET in the transaction is undone
                    if session.closed or session.broken:
                        self.lost = True
                        if str(error) == NO_NEW_CONNECTION and isinstance(error.__context__, DatabaseError):
                            raise error.__context__  # the loss, not Django's try to connect again after it
                        raise
                    if reason := self.must_stop():
                        raise StopRun(reason) from error
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
        """The server's bounds, settings of the session set by its first transaction, so that a batch pays no
        statement for them; set again only when the run's end needs a shorter statement_timeout."""
        until_cut = max(self.stop.end_by() + GRACE - time.monotonic(), LAST_WORD)
        if self._timed is session and self._statement_timeout <= until_cut:
            return
        limits = self.limits
        statement_timeout = min(limits.statement_timeout.total_seconds(), max(until_cut - TIMEOUT_STEP, LAST_WORD))
        cursor.execute(SERVER_BOUNDS, {
            "statement_timeout": milliseconds(statement_timeout),
            "lock_timeout": milliseconds(limits.lock_timeout.total_seconds()),
            "idle_session_timeout": milliseconds(limits.idle_session_timeout.total_seconds()),
            "idle_in_transaction_session_timeout": milliseconds(limits.dead_peer_timeout.total_seconds()),
            **dict(zip(("keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout"),
                       map(str, self._keepalives()))),
            "application_name": f"purge_delisted {self.run_id}",
        })
        self._timed, self._statement_timeout = session, statement_timeout

    def _keepalives(self) -> tuple[int, int, int, int]:
        """TCP keepalives giving up on a dead peer after dead_peer_timeout, on either end: the idle time and the
        interval (s), the probes, the user timeout (ms)."""
        dead_peer = self.limits.dead_peer_timeout.total_seconds()
        return math.ceil(dead_peer / 3), math.ceil(dead_peer / 6), 3, round(dead_peer * 1000)

    def _reset_bounds(self) -> None:
        if self._timed is None or self.lost or self.connection() is not self._timed:
            return  # nothing set, or set on a session that is gone
        try:
            with connections[self.using].cursor() as cursor:
                cursor.execute(RESET_BOUNDS)
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
                if self._flight is not None:
                    self._end_if_due(self._flight)

    def _end_if_due(self, flight: Flight) -> None:
        """At the run's end, cancel the work begun before it, once; GRACE later (the server's statement_timeout
        has passed by then), shut the socket of work that still has not ended: the network or a pooler holds it."""
        end_by, now, database_connection = self.stop.end_by(), time.monotonic(), flight.connection.connection
        if now < end_by or database_connection is None or flight.cut:
            return  # a connect in progress is bounded by its own timeout
        if flight.began < end_by and not flight.cancelled:
            flight.cancelled = True
            try:
                database_connection.cancel_safe(timeout=1)
            except Exception as error:  # unreachable: the socket is shut next
                logger.warning("could not cancel the statement in flight: %s", error)
        elif now >= max(end_by + GRACE, flight.began + LAST_WORD) + TIMEOUT_STEP:
            flight.cut = True
            shut_down(database_connection)


def shut_down(database_connection) -> None:
    """End a connection whose statement neither the server nor a cancel ended (a partition, a pooler's queue): the
    statement then fails as a lost connection, at once."""
    try:
        with socket.socket(fileno=os.dup(database_connection.pgconn.socket)) as connection_socket:
            connection_socket.shutdown(socket.SHUT_RDWR)
    except OSError as error:  # already gone: the statement fails on its own
        logger.warning("could not end the connection in flight: %s", error)


def sqlstate(error: BaseException | None) -> str | None:
    """The SQLSTATE of a database error, which Django keeps on the psycopg error it wraps."""
    for candidate in (error, error.__cause__):
        if code := getattr(candidate, "sqlstate", None):
            return code
    return None


def milliseconds(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"
