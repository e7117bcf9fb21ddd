"""Print the DATABASE_URL that `make demo` / `make test` should use, creating the database if missing;
with --stop, stop the embedded PostgreSQL and delete its data (`make demo-stop`); with --embedded, use the embedded
one even when 127.0.0.1:5432 answers (CI runs the suite on both: .ci/run).

Order: $DATABASE_URL if set; else PostgreSQL on 127.0.0.1:5432 if it answers; else an embedded PostgreSQL from the
`pgserver` package (in requirements-dev.txt), its data directory `.pgserver/` in the checkout, listening on a Unix
socket in that directory only (no TCP port). It keeps running after the command, so that later commands and
`make test` reuse it, until `make demo-stop`. Run as root, pgserver runs PostgreSQL as a system user `pgserver`
that it creates, and opens read and traverse permissions (g+rx, o+rx) on every directory above `.pgserver/`.
Progress goes to stderr; stdout carries only the URL.
"""

import argparse
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/catalog"
PGSERVER_DIR = Path(__file__).resolve().parent.parent / ".pgserver"
# pgserver's own choice: as root, PostgreSQL (which refuses to run as root) runs as this system user.
PGSERVER_SYSTEM_USER = "pgserver"


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


def import_pgserver():
    """pgserver, imported only when needed: importing it looks up the user's runtime directory for its lock file.
    Without a login session (root in CI, cron, sudo) XDG_RUNTIME_DIR is unset, and platformdirs warns, as a two-line
    warning with its source line, before it falls back to /tmp/runtime-<uid>: a fine place for that lock, nothing
    to act on."""
    import platformdirs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", platformdirs.RuntimeDirWarning)
        import pgserver
        import pgserver._commands
    return pgserver


def pgserver_url(*, why: str) -> str:
    pgserver = import_pgserver()
    print(f"{why}; using an embedded one (pgserver) in {PGSERVER_DIR}", file=sys.stderr)
    # cleanup_mode=None: it outlives this process, for the make steps after this one; `make demo-stop` ends it.
    url = pgserver.get_server(PGSERVER_DIR, cleanup_mode=None).get_uri("catalog")
    print(f"embedded PostgreSQL: DATABASE_URL={url} (stop it and delete its data: make demo-stop)", file=sys.stderr)
    return url


def stop_pgserver() -> None:
    if not PGSERVER_DIR.exists():
        print(f"no embedded PostgreSQL in {PGSERVER_DIR}", file=sys.stderr)
        return
    pg_ctl = [str(import_pgserver()._commands.POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(PGSERVER_DIR)]
    user = PGSERVER_SYSTEM_USER if os.geteuid() == 0 else None
    # Status 0: running (a data directory left by a reboot is not, and is only deleted).
    if subprocess.run([*pg_ctl, "status"], user=user, capture_output=True).returncode == 0:
        subprocess.run([*pg_ctl, "-w", "-m", "fast", "stop"], user=user, check=True, capture_output=True, timeout=60)
        print("stopped the embedded PostgreSQL", file=sys.stderr)
    shutil.rmtree(PGSERVER_DIR)
    print(f"deleted {PGSERVER_DIR}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stop", action="store_true", help="stop the embedded PostgreSQL and delete its data")
    parser.add_argument("--embedded", action="store_true", help="the embedded PostgreSQL, whatever else answers")
    arguments = parser.parse_args()
    if arguments.stop:
        stop_pgserver()
        return
    url = os.environ.get("DATABASE_URL") or DEFAULT_URL
    if arguments.embedded:
        url = pgserver_url(why="asked for the embedded PostgreSQL")
    elif not os.environ.get("DATABASE_URL") and not answers(url):
        url = pgserver_url(why="no PostgreSQL on 127.0.0.1:5432")
    ensure_database(url)
    print(url)


if __name__ == "__main__":
    main()
