"""TCP keepalives that give up on a peer silent for a while: both ends of a database connection keep the same ones,
libpq's (config.settings, from DELISTED_RETENTION_DEAD_PEER_TIMEOUT_SECONDS) and, on the job's session, the
server's (retention.session). So a network partition fails a statement instead of holding it."""

import math


def keepalives(dead_peer_seconds: float) -> tuple[int, int, int, int]:
    """Idle (s), interval (s), probes, and the user timeout (ms) that also bounds a send left unanswered: together
    they give up after `dead_peer_seconds`."""
    return math.ceil(dead_peer_seconds / 3), math.ceil(dead_peer_seconds / 6), 3, round(dead_peer_seconds * 1000)
