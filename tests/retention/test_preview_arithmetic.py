"""The dry run's loop is arithmetic (retention.preview.take_in_batches): checked against the job's loop written out
(retention.service.run_phases on counts), for any counts and limits."""

from hypothesis import given
from hypothesis import strategies as st

from retention.preview import take_in_batches


def batch_loop(count: int, batch_size: int, batches_left: int) -> tuple[int, int, bool]:
    """run_phases on one phase's count: max_batches is checked before every batch, a batch that selects nothing is
    not counted, and a short batch ends the phase."""
    taken = batches = 0
    while True:
        if batches >= batches_left:
            return taken, batches, False
        take = min(batch_size, count - taken)
        if take:
            batches += 1
            taken += take
        if take < batch_size:
            return taken, batches, True


@given(count=st.integers(0, 5000), batch_size=st.integers(1, 300), batches_left=st.integers(0, 60))
def test_take_in_batches_is_the_batch_loop(count, batch_size, batches_left):
    assert take_in_batches(count, batch_size, batches_left) == batch_loop(count, batch_size, batches_left)
