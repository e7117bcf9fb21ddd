"""Pacing by the streaming standbys: how far behind the slowest one is, read on the primary from
`pg_stat_replication`, which the run waits on (retention.service.wait_for_replicas). A role that cannot see the WAL
senders' details is refused (ReplicaLagHidden) rather than told there is no lag. The estimate, and its limits:
docs/how-it-works.md, "Replica lag".
"""

from datetime import timedelta

from retention.session import Session
from retention.statements import STATEMENTS

LAG_HIDDEN_MESSAGE = (
    "the database role cannot read the standbys' replication lag (pg_stat_replication shows it only to members "
    "of pg_read_all_stats): grant pg_read_all_stats to the role (deploy/sql/catalog_retention_role.sql)"
)


class ReplicaLagHidden(PermissionError):
    def __init__(self):
        super().__init__(LAG_HIDDEN_MESSAGE)


def replica_lag(session: Session) -> timedelta | None:
    """How far behind in time the slowest standby is, as the primary sees it (see the module docstring); None
    when no standby is connected. A transaction of its own: call it outside any transaction."""
    with session.transaction() as cursor:
        cursor.execute(STATEMENTS["replica lag"])
        standbys, hidden, worst_lag = cursor.fetchone()
    if hidden:
        raise ReplicaLagHidden()
    if not standbys:
        return None
    return worst_lag

