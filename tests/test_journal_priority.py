"""Under systemd (JOURNAL_STREAM names the stream a line goes to) every line the job writes, text or JSON, stdout
or stderr, starts with its syslog priority, which journald files it under and strips (SyslogLevelPrefix=, set in
the unit); anywhere else the lines are unchanged."""

import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.factories import PropertyObjectCardFactory
from tests.support import PROJECT_ROOT, deletes_refused, manage_command, manage_env

PRIORITY = re.compile(r"<(\d)>")
UNIT = Path(PROJECT_ROOT, "deploy", "systemd", "catalog-delisted-retention.service")


def run_to_one_stream(*options: str, journal: str | None, **env: str) -> list[str]:
    """The job with stdout and stderr on one file, as systemd connects both to one journal stream; JOURNAL_STREAM
    naming it (`journal="this"`), naming another stream, or unset."""
    with tempfile.TemporaryFile("w+") as stream:
        status = os.fstat(stream.fileno())
        names = {"this": f"{status.st_dev}:{status.st_ino}", "other": f"{status.st_dev}:{status.st_ino + 1}"}
        environment = manage_env(**env)
        environment.pop("JOURNAL_STREAM", None)  # the tests' own, if they run under systemd
        if journal:
            environment["JOURNAL_STREAM"] = names[journal]
        completed = subprocess.run(
            manage_command("purge_delisted", *options), env=environment, stdout=stream, stderr=stream, cwd=PROJECT_ROOT,
            timeout=60,
        )
        stream.seek(0)
        lines = stream.read().splitlines()
    assert completed.returncode == 1, lines  # the culprit
    return lines


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("log_format", ["text", "json"])
def test_under_systemd_every_line_starts_with_its_syslog_priority_and_is_plain_after_it(log_format):
    poison, _ = PropertyObjectCardFactory.create_batch(2, long_delisted=True)

    with deletes_refused(when=f"OLD.id = '{poison.id}'"):
        lines = run_to_one_stream("--json", "-v", "1", journal="this", LOG_FORMAT=log_format)

    assert lines and all(PRIORITY.match(line) for line in lines), lines
    priorities = {line[3:]: int(line[1]) for line in lines}
    result = next(message for message in priorities if message.startswith('{"run_id"'))
    assert priorities[result] == 3 and json.loads(result)["outcome"] == "failed"  # the result: failed, an error
    final = next(message for message in priorities if "purge_delisted: error: " in message)
    assert priorities[final] == 3
    culprit = next(message for message in priorities if "card cannot be deleted" in message)
    assert priorities[culprit] == 3
    started = next(message for message in priorities if "purge started" in message)
    assert priorities[started] == 6
    if log_format == "json":  # what journald stores once it strips the prefix: pure JSON
        assert all(json.loads(message) for message in priorities if message != result)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("journal", [None, "other"], ids=["no-journal-stream", "another-stream"])
def test_off_systemd_the_lines_are_unchanged(journal):
    poison = PropertyObjectCardFactory(long_delisted=True)

    with deletes_refused(when=f"OLD.id = '{poison.id}'"):
        lines = run_to_one_stream("--json", "-v", "1", journal=journal)

    assert lines and not [line for line in lines if PRIORITY.match(line)]


def test_the_unit_states_syslog_level_prefix_and_the_journalctl_line_is_documented():
    assert "\nSyslogLevelPrefix=true\n" in UNIT.read_text()
    operations = Path(PROJECT_ROOT, "docs", "operations.md").read_text()
    assert "journalctl -p err -u catalog-delisted-retention" in operations
