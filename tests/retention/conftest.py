import subprocess
import time
import urllib.request
from collections.abc import Iterator

import pytest

from tests.support import free_loopback_port, installed_tool


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
