"""Every statement the job builds, rendered as it reaches the server (named parameters left as `%(name)s`), is
pinned in retention/sql/statements.sql, so that a review reads each one whole and sees any change as a diff.
After changing a statement: UPDATE_STATEMENTS=1 pytest tests/retention/test_statements.py, and review the diff."""

import os
import textwrap
from pathlib import Path

from retention import backlog, bounds, locks, pacing, phases

PINNED = Path(backlog.__file__).parent / "sql" / "statements.sql"


def statements() -> dict[str, str]:
    rendered = {
        "session: its bounds": bounds.SET_BOUNDS,
        "session: its bounds reset": bounds.RESET_BOUNDS,
        "pooler probe": locks.BACKEND_PID,
        "advisory lock": locks.TAKE_LOCK,
        "advisory unlock": locks.UNLOCK,
        "cutoff": backlog.CUTOFF,
    }
    for phase in phases.PHASES:
        for kind in ("scan_sql", "batch_sql", "lock_sql", "delete_sql"):
            if statement := getattr(phase, kind):
                rendered[f"{phase.name}.{kind}"] = statement
    for cards in backlog.KINDS:
        rendered[f"backlog: {cards}, in chunks"] = backlog.delisted_statement(cards, in_chunks=True)
        rendered[f"backlog: {cards}, whole"] = backlog.delisted_statement(cards, in_chunks=False)
    rendered["backlog: held back, in chunks"] = backlog.held_back_statement(in_chunks=True)
    rendered["backlog: held back, whole"] = backlog.held_back_statement(in_chunks=False)
    rendered["dry run: first object kept"] = phases.FIRST_OBJECT_KEPT
    rendered["dry run: held back after"] = phases.HELD_BACK_AFTER
    rendered["dry run: overrides of taken"] = phases.OVERRIDES_OF_TAKEN
    rendered["admin page: held back now and after"] = phases.HELD_BACK_NOW_AND_AFTER
    rendered["culprit search: a refused batch's rows"] = phases.BATCH_ROWS
    rendered["layout refused: a foreign partition"] = phases.FOREIGN_PARTITION
    rendered["replica lag"] = pacing.REPLICA_LAG
    return rendered


def rendered_file() -> str:
    return "\n".join(
        f"-- {name}\n{textwrap.dedent(statement).strip()};\n" for name, statement in statements().items()
    )


def test_the_pinned_statements_are_the_ones_the_job_runs():
    if os.environ.get("UPDATE_STATEMENTS"):
        PINNED.write_text(rendered_file())
    assert PINNED.read_text() == rendered_file(), (
        "a statement changed: UPDATE_STATEMENTS=1 pytest tests/retention/test_statements.py, then review the diff"
    )
