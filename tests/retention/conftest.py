import subprocess
import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import installed_tool
from tests.servers import free_loopback_port


@pytest.fixture
def pushgateway() -> Iterator[str]:
    """A real Pushgateway of its own on a free loopback port, in memory only (the Debian build would otherwise
    persist to /var/lib/prometheus). Yields its URL."""
    binary = installed_tool("prometheus-pushgateway", "prometheus-pushgateway")
    url = f"http://127.0.0.1:{free_loopback_port()}"
    process = subprocess.Popen(
        [binary, f"--web.listen-address={url.removeprefix('http://')}", "--persistence.file="],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                urllib.request.urlopen(f"{url}/-/ready", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError(f"the Pushgateway at {url} did not become ready") from None
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


class Exposition:
    """Samples of a Prometheus text exposition, looked up by name and labels (job and instance ignored)."""

    def __init__(self, text: str):
        self.values = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = {k: v for k, v in sample.labels.items() if k not in ("job", "instance")}
                self.values[sample.name, frozenset(labels.items())] = sample.value

    @classmethod
    def scrape(cls, url: str) -> "Exposition":
        with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
            return cls(response.read().decode())

    def value(self, name: str, **labels: str) -> float | None:
        return self.values.get((name, frozenset(labels.items())))

    def names(self) -> set[str]:
        return {name for name, _ in self.values}
