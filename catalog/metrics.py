"""The retention job's backlog on the web app's `/metrics` (django-prometheus serves the default registry, where the
app config registers BacklogCollector): `catalog_delisted_backlog` and `catalog_delisted_oldest_overdue_age_seconds`,
live, in the families the job's own metrics use (retention.metrics)."""

import logging
import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from retention.backlog import Backlog, compute_cutoff, measure_backlog
from retention.limits import PurgeLimits
from retention.metrics import backlog_group
from retention.session import Session

logger = logging.getLogger(__name__)

BACKLOG_CACHE_SECONDS = 30


class BacklogCollector(Collector):
    """The backlog at the retention the settings give, measured at most once per `max_age_seconds` whatever the
    scrape rate, so that scrapes cannot hammer the database."""

    def __init__(self, *, max_age_seconds: float = BACKLOG_CACHE_SECONDS, clock: Callable[[], float] = time.monotonic):
        self.max_age_seconds = max_age_seconds
        self.clock = clock
        self.lock = threading.Lock()
        self.backlog: Backlog | None = None
        self.measured_at: float | None = None

    def describe(self) -> Iterator[Metric]:
        # Registering calls describe() instead of collect(): no database query at start-up.
        return iter(backlog_group(None))

    def collect(self) -> Iterator[Metric]:
        with self.lock:
            if self.measured_at is None or self.clock() - self.measured_at >= self.max_age_seconds:
                self.measured_at = self.clock()
                self.backlog = self.measure_now()
            backlog = self.backlog
        if backlog is not None:
            yield from backlog_group(backlog)

    def measure_now(self) -> Backlog | None:
        try:
            retention = PurgeLimits.from_settings().retention
            session = Session()
            return measure_backlog(session, cutoff=compute_cutoff(session, retention))
        except Exception as error:
            # A scrape must not fail: the series are absent until the next measurement works.
            logger.warning("catalog_delisted_backlog not measured: %s", error)
            return None
