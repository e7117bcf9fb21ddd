"""Without any OTEL_* variable a process pays nothing for tracing: the SDK is not imported and no thread is started,
so nothing can be sent. With the variables set, the threads started are the SDK's own, its batch processor's and its
resource detectors' pool: none of retention/ or config/ (issue #46). The probe records every thread started in the
process and the code that asked for it, so a thread that ended before the run did is seen too; the run has stderr at
a terminal, so its progress bar (tqdm, whose monitor thread the command turns off) is shown."""

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import opentelemetry.sdk.trace
import pytest

from tests.factories import PropertyObjectCardFactory
from tests.support import PROJECT_ROOT, manage_env
from tests.tracing.conftest import run_traced

# Runs the job as manage.py does; every Thread.start recorded with the code that asked for it, the innermost caller
# outside the standard library (threading, concurrent.futures). Then what the process holds, after the run's last
# line and its flush, as the last line of stdout.
PROBE = """
import json, sys, sysconfig, threading
STDLIB = sysconfig.get_paths()["stdlib"]
started = []
start = threading.Thread.start
def recorded_start(thread):
    caller = sys._getframe(1)
    while caller.f_code.co_filename.startswith(STDLIB):
        caller = caller.f_back
    started.append([thread.name, caller.f_code.co_filename])
    start(thread)
threading.Thread.start = recorded_start
import manage
from opentelemetry import trace
sys.argv = ["manage.py", "purge_delisted"]
try:
    manage.main()
finally:
    print(json.dumps({
        "started": started,
        "sdk_imported": "opentelemetry.sdk" in sys.modules,
        "tracer_provider": type(trace.get_tracer_provider()).__name__,
    }))
"""
SDK = Path(opentelemetry.sdk.trace.__file__).resolve().parents[1]  # the SDK's package, opentelemetry/sdk


def probe(receiver) -> tuple[str, dict]:
    """The run's summary line and what the process reported, stderr a pseudo-terminal."""
    terminal, stderr = pty.openpty()
    fcntl.ioctl(stderr, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a size: tqdm draws a bar in it
    try:
        completed = subprocess.run(
            [sys.executable, "-c", PROBE], env=manage_env(**(receiver.env() if receiver else {})), cwd=PROJECT_ROOT,
            stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=60,
        )
        os.set_blocking(terminal, False)
        written = b""
        while chunk := read_available(terminal):
            written += chunk
    finally:
        os.close(stderr)
        os.close(terminal)
    shown = written.decode(errors="replace")
    assert completed.returncode == 0, shown
    assert "purge_delisted" in shown and "cards/s" in shown  # the progress bar, on the terminal
    summary, report = completed.stdout.splitlines()[-2:]
    assert summary.startswith("purge completed: deleted 1 property object cards")
    return summary, json.loads(report)


def in_the_sdk(path: str) -> str:
    """A file of the SDK's as a path in its package; any other as it is."""
    path = Path(path).resolve()
    return path.relative_to(SDK).as_posix() if path.is_relative_to(SDK) else str(path)


def read_available(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except BlockingIOError:
        return b""


@pytest.mark.django_db(transaction=True)
def test_without_otel_variables_a_run_imports_starts_and_sends_nothing(receiver):
    PropertyObjectCardFactory(long_delisted=True)

    _, off = probe(None)

    assert off == {"started": [], "sdk_imported": False, "tracer_provider": "ProxyTracerProvider"}
    assert receiver.requests == 0


@pytest.mark.django_db(transaction=True)
def test_with_otel_variables_the_only_threads_started_are_the_sdks_own(receiver):
    PropertyObjectCardFactory(long_delisted=True)

    summary, on = probe(receiver)

    assert on["sdk_imported"] and on["tracer_provider"] == "TracerProvider"
    # The SDK's own threads only: its batch processor's, and, while config.tracing builds the resource before the
    # command runs, the pool its resource detectors run in (one or two threads, joined before it returns).
    started = {(name.split("-")[0], in_the_sdk(starter)) for name, starter in on["started"]}
    assert started == {("OtelBatchSpanRecordProcessor", "_shared_internal/__init__.py"),
                       ("ThreadPoolExecutor", "resources/__init__.py")}
    assert [name for name, _ in on["started"]].count("OtelBatchSpanRecordProcessor") == 1
    # The probe sees what the run did: its trace arrived.
    run_id = re.search(r"run_id (\S+)$", summary).group(1)
    assert [span.attributes["retention.run_id"] for span in receiver.spans if span.name == "purge_delisted"] == [run_id]


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
