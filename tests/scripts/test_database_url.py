"""scripts/database_url.py without a PostgreSQL on 127.0.0.1:5432: it starts the embedded one (pgserver, from
requirements-dev.txt) inside the checkout, shows its URL, leaves it running for the next make step, and --stop (make
demo-stop) ends it and deletes its data. The script runs in a network namespace of its own (`unshare --net`,
loopback down), where 127.0.0.1:5432 is unreachable; the embedded server listens on a Unix socket only, which is
reachable from outside the namespace. A copy of the script in a temporary checkout keeps the real checkout's
`.pgserver/` out of it."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import psutil
import psycopg
import pytest

from tests.support import PROJECT_ROOT

pytestmark = pytest.mark.slow

# initdb and a start on 2 busy cores; a bound, so that a hang fails instead of blocking the suite.
TIMEOUT_SECONDS = 120


def run_script(checkout, *arguments: str, isolated: bool = False) -> subprocess.CompletedProcess:
    command = [sys.executable, str(checkout / "scripts" / "database_url.py"), *arguments]
    if isolated:
        command = ["unshare", "--net", "--", *command]
    environment = {name: value for name, value in os.environ.items() if name != "DATABASE_URL"}
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=TIMEOUT_SECONDS)


@pytest.fixture
def checkout() -> Iterator[Path]:
    """A checkout holding only the script; whatever server the test leaves behind is killed afterwards. Not in
    tmp_path: as root the server runs as another user, who must enter the checkout's folders, and pytest closes its
    own temporary root to everyone but its owner again whenever a session starts, another developer's run too."""
    with tempfile.TemporaryDirectory(prefix="checkout-", ignore_cleanup_errors=True) as directory:
        checkout = Path(directory)
        (checkout / "scripts").mkdir()
        shutil.copy(PROJECT_ROOT / "scripts" / "database_url.py", checkout / "scripts")
        yield checkout
        pid_file = checkout / ".pgserver" / "postmaster.pid"
        if pid_file.exists():
            postmaster = int(pid_file.read_text().split()[0])
            if psutil.pid_exists(postmaster):
                os.kill(postmaster, signal.SIGQUIT)


def test_without_a_local_postgresql_the_embedded_one_runs_in_the_checkout_until_demo_stop(checkout):
    if shutil.which("unshare") is None or subprocess.run(["unshare", "--net", "true"]).returncode != 0:
        pytest.skip("needs unshare --net (util-linux, as root) to make 127.0.0.1:5432 unreachable")
    data_directory = checkout / ".pgserver"

    started = run_script(checkout, isolated=True)

    assert started.returncode == 0, started.stderr
    (url,) = started.stdout.splitlines()
    assert f"DATABASE_URL={url}" in started.stderr and "make demo-stop" in started.stderr
    assert "Warning" not in started.stderr  # e.g. platformdirs' RuntimeDirWarning, without XDG_RUNTIME_DIR
    assert parse_qs(urlsplit(url).query)["host"] == [str(data_directory)]  # a socket in the checkout, no TCP
    with psycopg.connect(url, connect_timeout=10) as connection:  # still running after the script ended
        assert connection.execute("SELECT current_database()").fetchone() == ("catalog",)
    postmaster = psutil.Process(int((data_directory / "postmaster.pid").read_text().split()[0]))

    stopped = run_script(checkout, "--stop")

    assert stopped.returncode == 0, stopped.stderr
    assert "stopped the embedded PostgreSQL" in stopped.stderr
    postmaster.wait(timeout=30)  # pg_ctl returns when the pid file is gone, a moment before the process
    assert not data_directory.exists()
    assert "no embedded PostgreSQL" in run_script(checkout, "--stop").stderr
