"""Stopping a run, on the client's side: the stop request, its one watcher thread, and the exception a stop raises.
The server keeps the run's bounds (retention.bounds); the watcher does only what it cannot: one cancel of the work
begun before the run's end and, GRACE later, shutting the socket of work that still has not ended. When and why:
docs/how-it-works.md, "Stopping a run".
"""

import logging
import math
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from retention.results import StopReason

logger = logging.getLogger("retention.session")

WATCH_EVERY = 0.05  # seconds between the watcher's looks
GRACE = 2.0  # what work begun at the run's end (the end count, the unlock) may take; then the client cuts
STEP = 0.5  # what a transaction begun past the grace may take; a shortened statement_timeout holds this long
EXIT_BOUND = 4.0  # the process's last waits (metrics, trace flush) end this long after the run's end


class StopRun(Exception):
    """The run must stop (a stop request, the run's time, a limit, a failure that ends it): raised between batches
    or from an interrupted statement, caught once by the run."""

    def __init__(self, reason: StopReason):
        super().__init__(reason)
        self.reason = reason


class StopRequest:
    """A graceful stop, asked by SIGTERM/SIGINT (the command) or by a caller, and the run's deadline (its session
    sets it). `request` only notes the moment, which is safe in a signal handler; the watcher wakes the run's sleeps."""

    def __init__(self):
        self.requested_at, self.deadline = math.inf, math.inf
        self._awake, self._guard = threading.Event(), threading.Lock()
        self._flight = None  # Django's connection, as the run's thread has it, while the session runs work on it
        self._began, self._cancelled, self._cut = 0.0, False, False

    def request(self) -> None:
        self.requested_at = min(self.requested_at, time.monotonic())  # a second signal does not put the end off

    @property
    def requested(self) -> bool:
        return self.requested_at < math.inf

    def end_by(self) -> float:
        """When the run must end (monotonic seconds): at the stop request or the deadline, whichever comes first."""
        return min(self.requested_at, self.deadline)

    def exit_wait(self, bound: float) -> float:
        """How long a wait on the way out may take: `bound`, cut to end EXIT_BOUND after the run's end."""
        return max(0.0, min(bound, self.end_by() + EXIT_BOUND - time.monotonic()))

    def wait(self, seconds: float) -> None:
        self._awake.wait(seconds)

    @contextmanager
    def watching(self) -> Iterator[None]:
        done = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(done,), name="purge_delisted stop", daemon=True)
        watcher.start()
        try:
            yield
        finally:
            done.set()
            watcher.join()

    @contextmanager
    def flying(self, connection) -> Iterator[None]:
        """The session runs work on `connection` (a transaction, a connection's first statements) in the block."""
        with self._guard:
            self._flight, self._began, self._cancelled, self._cut = connection, time.monotonic(), False, False
        try:
            yield
        finally:
            with self._guard:  # a cancel is sent under the guard: it never reaches the next flight
                self._flight = None

    def _watch(self, done: threading.Event) -> None:
        while not done.wait(WATCH_EVERY):
            if self.requested:
                self._awake.set()
            with self._guard:
                end_by, now = self.end_by(), time.monotonic()
                if self._flight is None or now < end_by or self._cut or self._flight.connection is None:
                    continue  # a connect in progress ends within its own timeout
                try:
                    if self._began < end_by and not self._cancelled:
                        self._cancelled = True
                        self._flight.connection.cancel_safe(timeout=1)
                    elif now >= max(end_by + GRACE, self._began + STEP) + STEP:  # past the server's timeout
                        self._cut = True
                        with socket.socket(fileno=os.dup(self._flight.connection.pgconn.socket)) as cut:
                            cut.shutdown(socket.SHUT_RDWR)  # the statement fails at once, as a lost connection
                except Exception as error:  # gone already: the statement fails on its own
                    logger.warning("could not %s the statement in flight: %s", "end" if self._cut else "cancel", error)
