"""Every statement the job sends, read from retention/sql/statements.sql (config.statements says how)."""

from pathlib import Path

from config.statements import read_statements

STATEMENTS = read_statements(Path(__file__).parent / "sql" / "statements.sql")
