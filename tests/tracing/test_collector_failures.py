"""A collector that is down, answers with an error, or accepts and never answers: the run does what it does without
tracing, exits with the same code, waits at most the flush bound (config.tracing.FLUSH_BOUND_SECONDS) at its end, and
says so in one warning line."""

import json
import time
from datetime import datetime

import pytest

from config.tracing import FLUSH_BOUND_SECONDS
from tests.factories import PropertyObjectCardFactory
from tests.support import deletes_refused, free_loopback_port
from tests.tracing.conftest import run_traced
from tests.tracing.receiver import running_receiver

# Beyond the flush bound, on the process's own clock: from the run's last line to the flush's warning line.
FLUSH_SLACK_SECONDS = 0.5
# From the warning line to the process's exit: the interpreter's own exit (0.2-1 s on a busy test machine), which
# joins no thread of the exporter's.
EXIT_SLACK_SECONDS = 3.0


def stamp(line: str) -> float:
    return datetime.fromisoformat(line.split(" ", 1)[0]).timestamp()


def flush_and_exit(completed, ended: float) -> tuple[float, float]:
    """Seconds from the run's last line before the flush (`purge completed`, or the final error line) to the flush's
    warning line, and from that line to the process's exit."""
    last = [line for line in completed.stderr.splitlines()
            if " purge completed " in line or " purge_delisted: error: " in line][-1]
    (warning,) = tracing_lines(completed)
    return stamp(warning) - stamp(last), ended - stamp(warning)


def run_against(endpoint: str):
    completed = run_traced("purge_delisted", "--json", receiver=None, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    return completed, time.time()


def tracing_lines(completed) -> list[str]:
    return [line for line in completed.stderr.splitlines() if "tracing:" in line]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("answer", [None, 400, 503], ids=["accepts-and-never-answers", "refuses", "unavailable"])
def test_a_collector_that_hangs_or_answers_with_an_error_costs_at_most_the_flush_bound_and_one_warning_line(answer):
    PropertyObjectCardFactory.create_batch(2, long_delisted=True)

    with running_receiver(answer=answer) as receiver:
        completed, ended = run_against(receiver.endpoint)

    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["deleted_property_object_cards"] == 2
    assert receiver.requests >= 1  # the exporter did try
    warnings = [line for line in completed.stderr.splitlines() if " WARNING " in line]
    assert warnings == tracing_lines(completed), completed.stderr
    assert len(warnings) == 1 and f"tracing: spans not delivered to {receiver.endpoint}" in warnings[0]
    assert "Traceback" not in completed.stderr
    flush, exiting = flush_and_exit(completed, ended)
    assert flush <= FLUSH_BOUND_SECONDS + FLUSH_SLACK_SECONDS and exiting <= EXIT_SLACK_SECONDS


@pytest.mark.django_db(transaction=True)
def test_a_collector_that_is_down_costs_at_most_the_flush_bound_and_leaves_a_failed_runs_exit_code_as_it_is():
    poison = PropertyObjectCardFactory(long_delisted=True)
    nobody = f"http://127.0.0.1:{free_loopback_port()}"  # nothing listens: each connection is refused

    with deletes_refused(when=f"OLD.id = '{poison.id}'"):
        completed, ended = run_against(nobody)

    assert completed.returncode == 1
    assert json.loads(completed.stdout)["culprit_count"] == 1
    (warning,) = tracing_lines(completed)
    assert f"tracing: spans not delivered to {nobody}" in warning and " WARNING " in warning
    assert "Traceback" not in completed.stderr
    flush, exiting = flush_and_exit(completed, ended)
    assert flush <= FLUSH_BOUND_SECONDS + FLUSH_SLACK_SECONDS and exiting <= EXIT_SLACK_SECONDS
