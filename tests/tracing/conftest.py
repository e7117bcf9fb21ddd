import os
from collections.abc import Iterator

import pytest

from tests.support import run_manage
from tests.tracing.receiver import Receiver, running_receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A real OTLP/HTTP receiver on a free loopback port that answers every export with 200."""
    with running_receiver() as started:
        yield started


def run_traced(*args: str, receiver: Receiver | None, **extra_env: str):
    """manage.py as a process, with no OTEL_* variable but those pointing it at `receiver` (None: tracing off)."""
    leaked = [name for name in os.environ if name.startswith("OTEL_") or name in ("TRACEPARENT", "TRACESTATE")]
    assert not leaked, f"the environment running the tests sets {leaked}: unset them"
    return run_manage(*args, **(receiver.env() if receiver else {}), **extra_env)
