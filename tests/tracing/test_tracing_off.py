"""Without any OTEL_* variable a process pays nothing for tracing: the SDK is not imported and no exporter thread
runs, so nothing can be sent. The same probe with the variables set sees the SDK's provider and the spans arrive,
so the probe itself is proven to see them."""

import json
import subprocess
import sys

import pytest

from tests.factories import PropertyObjectCardFactory
from tests.support import PROJECT_ROOT, manage_env
from tests.tracing.conftest import run_traced

# Runs the job as manage.py does, then reports what the process holds.
PROBE = """
import json, sys, threading
import manage
from opentelemetry import trace
sys.argv = ["manage.py", "purge_delisted", "--json"]
manage.main()
print(json.dumps({
    "threads": sorted(thread.name for thread in threading.enumerate()),
    "sdk_imported": "opentelemetry.sdk" in sys.modules,
    "tracer_provider": type(trace.get_tracer_provider()).__name__,
}))
"""


def probe(receiver) -> dict:
    completed = subprocess.run(
        [sys.executable, "-c", PROBE], env=manage_env(**(receiver.env() if receiver else {})), cwd=PROJECT_ROOT,
        capture_output=True, text=True, timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    result, report = completed.stdout.splitlines()[-2:]
    assert json.loads(result)["deleted_property_object_cards"] == 1
    return json.loads(report) | {"trace_id": json.loads(result)["trace_id"]}


@pytest.mark.django_db(transaction=True)
def test_without_otel_variables_nothing_is_imported_started_or_sent(receiver):
    PropertyObjectCardFactory(long_delisted=True)

    off = probe(None)

    assert off == {"threads": ["MainThread"], "sdk_imported": False, "tracer_provider": "ProxyTracerProvider",
                   "trace_id": None}
    assert receiver.requests == 0

    PropertyObjectCardFactory(long_delisted=True)
    on = probe(receiver)

    assert on["sdk_imported"] and on["tracer_provider"] == "TracerProvider"
    assert on["trace_id"] in receiver.traces()


def test_otel_sdk_disabled_or_exporter_none_turn_tracing_off():
    from config.tracing import tracing_wanted

    assert not tracing_wanted({})
    assert tracing_wanted({"OTEL_SERVICE_NAME": "catalog"})
    assert not tracing_wanted({"OTEL_SERVICE_NAME": "catalog", "OTEL_SDK_DISABLED": "true"})
    assert not tracing_wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "none"})


@pytest.mark.django_db(transaction=True)
def test_an_unsupported_protocol_leaves_tracing_off_with_one_warning_in_the_log_format():
    PropertyObjectCardFactory(long_delisted=True)

    completed = run_traced(
        "purge_delisted", "--json", receiver=None, LOG_FORMAT="json", OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
    )

    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["trace_id"] is None  # tracing stayed off
    lines = [json.loads(line) for line in completed.stderr.splitlines()]  # every stderr line is JSON
    warnings = [line for line in lines if line["message"].startswith("tracing off")]
    assert len(warnings) == 1 and "OTEL_EXPORTER_OTLP_PROTOCOL='grpc'" in warnings[0]["message"]
    assert warnings[0]["level"] == "WARNING"
