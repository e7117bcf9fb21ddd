"""A real OTLP/HTTP trace receiver for the tests: an http.server thread on a free loopback port that decodes each
`ExportTraceServiceRequest` (protobuf, opentelemetry-proto) into plain ReceivedSpan values. It can also answer with
an error status, or accept a request and never answer, the collectors a night must survive."""

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest, ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

TRACES_PATH = "/v1/traces"
KINDS = {Span.SPAN_KIND_INTERNAL: "internal", Span.SPAN_KIND_SERVER: "server", Span.SPAN_KIND_CLIENT: "client"}
STATUSES = {Status.STATUS_CODE_UNSET: "unset", Status.STATUS_CODE_OK: "ok", Status.STATUS_CODE_ERROR: "error"}


@dataclass(frozen=True)
class ReceivedSpan:
    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: str
    status: str
    attributes: dict
    events: tuple  # (name, attributes) pairs
    resource: dict
    start_ns: int
    end_ns: int


def plain(value):
    """An OTLP AnyValue as the Python value it carries."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [plain(item) for item in value.array_value.values]
    return getattr(value, kind) if kind else None


def attributes_of(key_values) -> dict:
    return {item.key: plain(item.value) for item in key_values}


def decoded(body: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest.FromString(body)
    return [
        ReceivedSpan(
            trace_id=span.trace_id.hex(), span_id=span.span_id.hex(), parent_span_id=span.parent_span_id.hex() or None,
            name=span.name, kind=KINDS.get(span.kind, "other"), status=STATUSES[span.status.code],
            attributes=attributes_of(span.attributes),
            events=tuple((event.name, attributes_of(event.attributes)) for event in span.events),
            resource=attributes_of(resource_spans.resource.attributes),
            start_ns=span.start_time_unix_nano, end_ns=span.end_time_unix_nano,
        )
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
    ]


class Receiver(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, *, answer: int | None):
        super().__init__(("127.0.0.1", 0), ReceiverHandler)
        self.answer = answer  # the HTTP status to answer with; None: accept and never answer
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self.released = threading.Event()  # ends the requests left unanswered
        self.lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def env(self, **extra: str) -> dict[str, str]:
        """The standard variables that point a process at this receiver; the batch processor's delay shortened. No
        service name: the process's own default."""
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_BSP_SCHEDULE_DELAY": "200", **extra,
        }

    def traces(self) -> dict[str, list[ReceivedSpan]]:
        by_trace = {}
        for span in self.spans:
            by_trace.setdefault(span.trace_id, []).append(span)
        return by_trace


class ReceiverHandler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with self.server.lock:
            self.server.requests += 1
        if self.server.answer is None:
            self.server.released.wait(timeout=60)
            return
        if self.path == TRACES_PATH and self.server.answer == 200:
            spans = decoded(body)
            with self.server.lock:
                self.server.spans.extend(spans)
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(self.server.answer)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format, *args):
        pass  # the test's output stays the test's


@contextmanager
def running_receiver(*, answer: int | None = 200) -> Iterator[Receiver]:
    receiver = Receiver(answer=answer)
    thread = threading.Thread(target=receiver.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.released.set()
        receiver.shutdown()
        receiver.server_close()
        thread.join(timeout=10)


def span_tree(spans: list[ReceivedSpan], *, show=lambda span: "") -> str:
    """The spans of one trace as an indented text tree, children in start order; `show(span)` adds to each line."""
    children = {}
    ids = {span.span_id for span in spans}
    for span in sorted(spans, key=lambda span: span.start_ns):
        parent = span.parent_span_id if span.parent_span_id in ids else None
        children.setdefault(parent, []).append(span)
    lines = []

    def walk(parent, depth):
        for span in children.get(parent, []):
            milliseconds = (span.end_ns - span.start_ns) / 1e6
            error = " ERROR" if span.status == "error" else ""
            lines.append(f"{'  ' * depth}{span.name} ({milliseconds:.1f} ms){error}{show(span)}")
            walk(span.span_id, depth + 1)

    walk(None, 0)
    return "\n".join(lines)
