"""The bounds the server and the kernel keep on the job's session, from its limits: they hold whatever the client or
the network does (docs/how-it-works.md, "Stopping a run"). Settings of the session, which any role may set: its
statement and lock timeouts; idle timeouts ending a session its client left (idle: dead_peer_timeout past the job's
longest pause); TCP keepalives and a user timeout, on the server's end and libpq's, giving up on a dead peer."""

import math
from datetime import timedelta

from retention.limits import PurgeLimits

CONNECT_TIMEOUT = 3  # seconds: a connect ends within 5 s of SIGTERM, with no interrupt
BOUNDS = ("statement_timeout", "lock_timeout", "idle_session_timeout", "idle_in_transaction_session_timeout",
          "client_connection_check_interval", "tcp_keepalives_idle", "tcp_keepalives_interval",
          "tcp_keepalives_count", "tcp_user_timeout")


def keepalives(limits: PurgeLimits) -> tuple[int, int, int, int]:
    """TCP keepalives giving up on a dead peer after dead_peer_timeout: idle (s), interval (s), probes, and the user
    timeout (ms) that also bounds a send left unanswered."""
    dead_peer = limits.dead_peer_timeout.total_seconds()
    return math.ceil(dead_peer / 3), math.ceil(dead_peer / 6), 3, round(dead_peer * 1000)


def server_bounds(limits: PurgeLimits, statement_timeout: timedelta, application_name: str) -> dict[str, str]:
    """The parameters of the statement "set bounds". The server also checks every second, during a statement, that
    its client is there."""
    idle, interval, count, user_timeout = keepalives(limits)
    return {
        "statement_timeout": milliseconds(statement_timeout), "lock_timeout": milliseconds(limits.lock_timeout),
        "idle_session_timeout": milliseconds(limits.idle_session_timeout),
        "idle_in_transaction_session_timeout": milliseconds(limits.dead_peer_timeout),  # the job never waits there
        "client_connection_check_interval": "1s", "tcp_keepalives_idle": str(idle),
        "tcp_keepalives_interval": str(interval), "tcp_keepalives_count": str(count),
        "tcp_user_timeout": str(user_timeout), "application_name": application_name,
    }


def orphan_ended_within(limits: PurgeLimits) -> timedelta:
    """How soon after the client's last word the server ends a session the network cut off, its locks with it: the
    user timeout (dead_peer_timeout), one keepalive interval more, and the second of the connection check
    (docs/how-it-works.md, "The server keeps the run's bounds")."""
    return limits.dead_peer_timeout * 7 / 6 + timedelta(seconds=1)


def client_options(limits: PurgeLimits) -> dict[str, int]:
    """libpq's options for the job's connection: the connect timeout and the keepalives."""
    idle, interval, count, user_timeout = keepalives(limits)
    return {"connect_timeout": CONNECT_TIMEOUT, "keepalives": 1, "keepalives_idle": idle,
            "keepalives_interval": interval, "keepalives_count": count, "tcp_user_timeout": user_timeout}


def milliseconds(duration: timedelta) -> str:
    return f"{max(1, round(duration.total_seconds() * 1000))}ms"
