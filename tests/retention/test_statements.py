"""retention/sql/statements.sql holds every statement the job sends, and the code reads them from there
(retention.statements): no statement in it is dead, a refused batch is locked again by the batch's own SELECT, word
for word, and the statements written out once per kind of card are the same but for its names."""

import re
from pathlib import Path

import pytest

from config.statements import parse_statements
from retention import backlog, phases
from retention.statements import STATEMENTS

RETENTION = Path(backlog.__file__).parent


def words(sql: str) -> str:
    return " ".join(sql.split())


def between(sql: str, start: str, end: str) -> str:
    """The text of `sql` after the first `start` and before the next `end`, its whitespace as words."""
    after = sql.split(start, 1)[1]
    return words(after.split(end, 1)[0])


def test_every_statement_in_the_file_is_one_the_code_sends():
    named_in_code = {
        name for source in RETENTION.rglob("*.py")
        for name in re.findall(r'STATEMENTS\["([^"]+)"\]', source.read_text())
    }
    of_phases = {
        statement for phase in phases.PHASES
        for statement in (phase.batch_sql, phase.lock_sql, phase.scan_sql) if statement
    }
    of_backlog = {  # named as retention.backlog.measure_backlog names them
        STATEMENTS[f"backlog: {counted}, {way}"] for counted in (*backlog.KINDS, "held back")
        for way in ("in chunks", "whole")
    }
    sent = {STATEMENTS[name] for name in named_in_code} | of_phases | of_backlog
    assert {name for name, sql in STATEMENTS.items() if sql not in sent} == set()


@pytest.mark.parametrize("phase", phases.PHASES, ids=lambda phase: phase.name)
def test_a_refused_batch_is_locked_again_as_the_batch_locked_it(phase):
    selected = between(phase.batch_sql, "WITH batch AS (", "FOR UPDATE SKIP LOCKED")
    assert between(phase.lock_sql, "FROM (", "FOR UPDATE SKIP LOCKED") == selected
    assert "%(only_ids)s" in selected  # the parts of a refused batch are the batch statement on some of its ids


def test_a_comment_line_is_for_the_reader_and_not_sent():
    statements = parse_statements("-- the file's header\n\n-- name: one\n-- why it is so\nSELECT 1\n  -- sent\n;\n")
    assert statements == {"one": "SELECT 1\n  -- sent"}


# Written once per kind of card: the project cards' (and building overrides') statement is the property objects'
# with these names in place of theirs.
PROPERTY_OBJECT_NAMES_TO_PROJECT = {
    "property_object_display_overrides": "building_display_overrides",
    "property_object_cards": "project_cards",
    "property_object_id": "project_id",
}
TWINS = [
    (f"backlog: property_object_cards, {size}", f"backlog: project_cards, {size}") for size in ("in chunks", "whole")
] + [
    (f"orphan_property_object_overrides: {kind}", f"orphan_building_overrides: {kind}")
    for kind in ("scan", "batch", "lock")
]


@pytest.mark.parametrize(("property_objects", "projects"), TWINS, ids=[twin for _, twin in TWINS])
def test_a_statement_written_for_each_kind_is_the_same_but_for_its_names(property_objects, projects):
    renamed = STATEMENTS[property_objects]
    for name, project_name in PROPERTY_OBJECT_NAMES_TO_PROJECT.items():
        renamed = renamed.replace(name, project_name)
    assert renamed == STATEMENTS[projects]
