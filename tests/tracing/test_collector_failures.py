"""A collector that is down, refuses, or accepts and never answers: the run does what it does without tracing, exits
with the same code, waits at most the flush bound (config.tracing.FLUSH_BOUND_SECONDS) at its end, at most
REFUSED_BOUND_SECONDS when the connection is refused, and says so in one warning line."""

import json
import time
from datetime import datetime

import pytest

from config.tracing import FLUSH_BOUND_SECONDS, REFUSED_BOUND_SECONDS
from tests.factories import PropertyObjectCardFactory
from tests.support import deletes_refused, free_loopback_port
from tests.tracing.conftest import run_traced
from tests.tracing.receiver import running_receiver

# From the run's last line to the process's exit, beyond the flush bound: the result printed, the interpreter gone.
EXIT_SLACK_SECONDS = 1.5


def exit_delay(completed, ended: float) -> float:
    """Seconds from the `purge completed` line's timestamp to the process's exit."""
    line = next(line for line in completed.stderr.splitlines() if " purge completed " in line)
    return ended - datetime.fromisoformat(line.split(" ", 1)[0]).timestamp()


def run_against(receiver, **env):
    completed = run_traced("purge_delisted", "--json", receiver=receiver, **env)
    return completed, time.time()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("answer", [None, 400], ids=["accepts-and-never-answers", "refuses"])
def test_a_collector_that_hangs_or_refuses_costs_at_most_the_flush_bound_and_one_warning_line(answer):
    PropertyObjectCardFactory.create_batch(2, long_delisted=True)

    with running_receiver(answer=answer) as receiver:
        completed, ended = run_against(receiver)

    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["deleted_property_object_cards"] == 2
    assert receiver.requests >= 1  # the exporter did try
    assert exit_delay(completed, ended) <= FLUSH_BOUND_SECONDS + EXIT_SLACK_SECONDS
    warnings = [line for line in completed.stderr.splitlines() if " WARNING " in line]
    assert len(warnings) == 1 and "tracing: spans not delivered to http://127.0.0.1:" in warnings[0], completed.stderr
    assert "Traceback" not in completed.stderr


@pytest.mark.django_db(transaction=True)
def test_a_refused_connection_costs_at_most_half_a_second_and_leaves_a_failed_runs_exit_code_as_it_is():
    poison = PropertyObjectCardFactory(long_delisted=True)
    nobody = f"http://127.0.0.1:{free_loopback_port()}"

    with deletes_refused(when=f"OLD.id = '{poison.id}'"):
        completed, ended = run_against(None, OTEL_EXPORTER_OTLP_ENDPOINT=nobody)

    assert completed.returncode == 1
    assert json.loads(completed.stdout)["culprit_count"] == 1
    # Less than the flush bound: the refusal ends the wait.
    assert exit_delay(completed, ended) <= REFUSED_BOUND_SECONDS + EXIT_SLACK_SECONDS < FLUSH_BOUND_SECONDS
    tracing_lines = [line for line in completed.stderr.splitlines() if "tracing:" in line]
    assert len(tracing_lines) == 1 and nobody in tracing_lines[0], completed.stderr
    assert "the collector refused the connection" in tracing_lines[0]
