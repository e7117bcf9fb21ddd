"""The delivery of spans to the collector, as config.tracing needs to judge it at the end: how many batches failed,
and whether the collector refused a connection. Imported only with tracing on (requests with it)."""

import requests
from opentelemetry.sdk.trace.export import SpanExportResult


def refusal(error: BaseException | None) -> ConnectionRefusedError | None:
    """The refused connection under an HTTP client's error (requests' around urllib3's), if that is what it is."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, ConnectionRefusedError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__ or getattr(error, "reason", None)
    return None


class RefusalWatch(requests.Session):
    """The exporter's HTTP session, remembering a connection the collector refused: the exporter retries one for
    seconds, and the flush needs to know that it waits for nothing."""

    refused: ConnectionRefusedError | None = None

    def request(self, *args, **kwargs):
        try:
            return super().request(*args, **kwargs)
        except requests.ConnectionError as error:
            self.refused = refusal(error) or self.refused
            raise


class DeliveryRecord:
    """The exporter, counting the span batches it failed to deliver: at the end, one warning line instead of the
    SDK's line per retry and per batch (its loggers are quiet, config/settings.py LOGGING)."""

    def __init__(self, exporter, session: RefusalWatch, *, endpoint: str):
        self.exporter = exporter
        self.session = session
        self.endpoint = endpoint
        self.failed = 0
        self.shut = False

    @property
    def refused(self) -> ConnectionRefusedError | None:
        return self.session.refused

    def export(self, spans):
        result = self.exporter.export(spans)
        if result is not SpanExportResult.SUCCESS:
            self.failed += 1
        return result

    def shutdown(self):
        """Also how the flush gives up on a collector that refused: the exporter's wait between retries ends."""
        if not self.shut:
            self.shut = True
            self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)
