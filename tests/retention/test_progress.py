"""A progress bar for a person at a terminal; nothing extra for cron, pipes or --json."""

import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import termios
import time

import pytest

from tests.support import PROJECT_ROOT, manage_command, manage_env, run_manage
from tests.factories import PropertyObjectCardFactory

pytestmark = pytest.mark.django_db(transaction=True)

BAR_SIGNS = ("cards/s", "%|")


def run_with_stderr_on_a_terminal(*args: str, timeout: float = 60) -> tuple[int, str, str]:
    """manage.py with stderr on a pseudo-terminal (stdout stays a pipe); returns (exit status, stdout, stderr)."""
    terminal, child_side = pty.openpty()
    fcntl.ioctl(child_side, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # 40 rows, 120 columns
    process = subprocess.Popen(
        manage_command(*args), env=manage_env(), cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=child_side,
    )
    os.close(child_side)
    stderr = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            readable, _, _ = select.select([terminal], [], [], 0.1)
            if readable:
                try:
                    chunk = os.read(terminal, 65536)
                except OSError:  # EIO: the child closed its end
                    break
                if not chunk:
                    break
                stderr += chunk
            elif process.poll() is not None:
                break
        stdout = process.communicate(timeout=max(1, deadline - time.monotonic()))[0]
    finally:
        os.close(terminal)
        if process.poll() is None:
            process.kill()
    return process.returncode, stdout.decode(), stderr.decode(errors="replace")


def test_a_terminal_gets_a_progress_bar_over_the_overdue_cards():
    PropertyObjectCardFactory.create_batch(5, long_delisted=True)

    status, stdout, stderr = run_with_stderr_on_a_terminal("purge_delisted", "--batch-size", "2")

    assert status == 0, stderr
    assert "purge_delisted: 100%" in stderr and "5/5" in stderr  # 5 objects; their 5 Published projects stay
    assert "purge started" in stderr  # log lines still reach the terminal, printed above the bar
    assert stdout.startswith("purge completed") and not any(sign in stdout for sign in BAR_SIGNS)


def test_json_output_gets_no_progress_bar_even_on_a_terminal():
    PropertyObjectCardFactory.create_batch(2, long_delisted=True)

    status, stdout, stderr = run_with_stderr_on_a_terminal("purge_delisted", "--json")

    assert status == 0, stderr
    assert json.loads(stdout)["deleted_property_object_cards"] == 2
    assert not any(sign in stderr for sign in BAR_SIGNS)


def test_cron_without_a_terminal_gets_no_progress_bar():
    PropertyObjectCardFactory.create_batch(2, long_delisted=True)

    completed = run_manage("purge_delisted")

    assert completed.returncode == 0, completed.stderr
    assert not any(sign in completed.stderr + completed.stdout for sign in BAR_SIGNS)
