"""Every statement the job and its readers send, read from retention/sql/statements.sql, where a review reads each one
whole, as it reaches the server, and sees any change as a diff. A line `-- name: <name>` starts a statement; a line
that starts with `--` is a comment for the reader and is not sent."""

import re
from pathlib import Path

FILE = Path(__file__).parent / "sql" / "statements.sql"


def read_statements(text: str) -> dict[str, str]:
    statements = {}
    for block in re.split(r"^-- name: ", text, flags=re.MULTILINE)[1:]:
        name, body = block.split("\n", 1)
        sql = "\n".join(line for line in body.splitlines() if not line.startswith("--"))
        statements[name] = sql.strip().removesuffix(";").rstrip()
    return statements


STATEMENTS = read_statements(FILE.read_text())
