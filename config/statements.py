"""Statements kept in .sql files, where a review reads each one whole, as it reaches the server, and sees any change as
a diff: the job's (retention/sql/statements.sql) and the admin page's (catalog/sql/statements.sql). A line
`-- name: <name>` starts a statement; a line that starts with `--` is a comment for the reader and is not sent. A
statement's name is also its database span's name and `db.query.summary` (config.database)."""

import re
from pathlib import Path

# The name of each statement read, by its text: how config.database names the span of a statement it sees.
NAME_OF_STATEMENT: dict[str, str] = {}


def parse_statements(text: str) -> dict[str, str]:
    statements = {}
    for block in re.split(r"^-- name: ", text, flags=re.MULTILINE)[1:]:
        name, body = block.split("\n", 1)
        sql = "\n".join(line for line in body.splitlines() if not line.startswith("--"))
        statements[name] = sql.strip().removesuffix(";").rstrip()
    return statements


def read_statements(path: Path) -> dict[str, str]:
    statements = parse_statements(path.read_text())
    NAME_OF_STATEMENT.update({sql: name for name, sql in statements.items()})
    return statements
