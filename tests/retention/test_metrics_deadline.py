"""One deadline bounds a run's whole metrics export, whatever the Pushgateway does with its socket."""

import logging
import socket
import threading
import time
import uuid
from datetime import timedelta

from config.logging import RunLog
from retention.metrics import RunMetrics

DRIP_INTERVAL_SECONDS = 0.5
DRIP_FOR_SECONDS = 30  # far past the export's bound, so a per-read bound is held for all of it
OUTER_TIMEOUT_SECONDS = 8  # the test ends by then even when the export is unbounded


def drip_one_byte_at_a_time(server: socket.socket, stop: threading.Event) -> None:
    """A gateway that answers every request one byte every DRIP_INTERVAL_SECONDS: no socket read ever times out."""
    server.settimeout(0.2)
    ended = time.monotonic() + DRIP_FOR_SECONDS
    while not stop.is_set() and time.monotonic() < ended:
        try:
            client, _ = server.accept()
        except TimeoutError:
            continue
        with client:
            for byte in b"HTTP/1.1 200 OK\r\n" * 100:
                if stop.wait(DRIP_INTERVAL_SECONDS) or time.monotonic() >= ended:
                    break
                try:
                    client.sendall(bytes([byte]))
                except OSError:
                    break


def test_a_pushgateway_that_drips_bytes_costs_one_bounded_export(settings, monkeypatch, caplog):
    monkeypatch.setattr("retention.metrics.EXPORT_TIMEOUT_SECONDS", 2)
    stop = threading.Event()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        settings.PROMETHEUS_PUSHGATEWAY_URL = f"http://127.0.0.1:{server.getsockname()[1]}"
        gateway = threading.Thread(target=drip_one_byte_at_a_time, args=(server, stop), daemon=True)
        gateway.start()
        metrics = RunMetrics(log=RunLog(logging.getLogger("retention.metrics"), {"run_id": str(uuid.uuid4())}),
                             max_duration=timedelta(minutes=20))
        export = threading.Thread(target=metrics.export, args=({},), daemon=True)
        try:
            export.start()
            export.join(timeout=OUTER_TIMEOUT_SECONDS)
            exported_in_time = not export.is_alive()
        finally:
            stop.set()
            gateway.join()

    assert exported_in_time, f"the export outlived {OUTER_TIMEOUT_SECONDS} s against a 2 s bound"
    assert any("took its whole 2 s" in r.getMessage() for r in caplog.records if r.name == "retention.metrics")
