"""Print the DATABASE_URL that `make demo` / `make test` should use, creating the database if missing.

Order: $DATABASE_URL if set; else PostgreSQL on 127.0.0.1:5432 if it answers; else a throwaway PostgreSQL
from the `pgserver` package (installed on demand into the venv; as root it creates a `pgserver` system user).
Progress goes to stderr; stdout carries only the URL.
"""

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/catalog"
PGSERVER_DIR = Path(__file__).resolve().parent.parent / ".pgserver"


def answers(url: str) -> bool:
    try:
        psycopg.connect(server_url(url), connect_timeout=3).close()
    except psycopg.OperationalError:
        return False
    return True


def server_url(url: str) -> str:
    """The same server, its maintenance database `postgres`."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/postgres"))


def ensure_database(url: str) -> None:
    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(server_url(url), autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            print(f"created database {name}", file=sys.stderr)


def pgserver_url() -> str:
    print("no PostgreSQL on 127.0.0.1:5432; starting a throwaway one with pgserver", file=sys.stderr)
    try:
        import pgserver
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "pgserver==0.1.4"], check=True)
        import pgserver
    server = pgserver.get_server(PGSERVER_DIR, cleanup_mode=None)
    return server.get_uri("catalog")


def main() -> None:
    url = os.environ.get("DATABASE_URL") or DEFAULT_URL
    if not os.environ.get("DATABASE_URL") and not answers(url):
        url = pgserver_url()
    ensure_database(url)
    print(url)


if __name__ == "__main__":
    main()
