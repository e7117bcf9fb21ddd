"""docs/production.md followed on a throwaway database, as far as it runs here: the catalog migrated as the web app's
deploy does, the role created from deploy/sql/catalog_retention_role.sql with psql, then with the variables of the
page's step 3 (its URLs pointed at the throwaway database) `manage.py check`, a dry run and the nightly run, all
with the runtime requirements alone: whatever only requirements-dev.txt brings cannot be imported. The files the
page tells the operator to copy exist. The schedule files themselves are checked by test_schedule_files.py
(`systemd-analyze verify` included), the alert rules by test_alerting.py."""

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import urllib.parse

import psycopg
import pytest
from django.db import connection
from packaging.requirements import Requirement
from psycopg import sql

from tests.servers import POSTGRES_BINDIR, POSTGRES_MAJOR, migrate
from tests.support import PROJECT_ROOT, database_url_of_tests, installed_tool

PAGE = PROJECT_ROOT / "docs" / "production.md"
ROLE_SCRIPT = PROJECT_ROOT / "deploy" / "sql" / "catalog_retention_role.sql"
TIMEOUT_SECONDS = 120

# manage.py under an import hook that refuses every module only the development requirements bring.
WITH_RUNTIME_REQUIREMENTS_ONLY = """
import runpy, sys

development_only = set(sys.argv[1].split(","))


class RuntimeRequirementsOnly:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in development_only:
            raise ModuleNotFoundError(f"No module named {name!r} in a production install", name=name)
        return None


sys.meta_path.insert(0, RuntimeRequirementsOnly())
sys.argv = ["manage.py", *sys.argv[2:]]
runpy.run_path("manage.py", run_name="__main__")
"""


def distributions(requirements_file) -> set[str]:
    """The installed distributions a requirements file brings, their dependencies included."""
    found: set[str] = set()

    def add(requirement: Requirement) -> None:
        name = requirement.name.lower().replace("_", "-")
        if name in found:
            return
        found.add(name)
        for dependency in importlib.metadata.distribution(name).requires or []:
            needed = Requirement(dependency)
            extras = requirement.extras or {""}
            if needed.marker is None or any(needed.marker.evaluate({"extra": extra}) for extra in extras):
                add(needed)

    for line in requirements_file.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            found |= distributions(requirements_file.parent / line[3:].strip())
        elif line:
            add(Requirement(line))
    return found


def top_level_modules(distribution_names: set[str]) -> set[str]:
    modules = set()
    for name in distribution_names:
        for file in importlib.metadata.distribution(name).files or []:
            top = file.parts[0]
            if top != ".." and not top.endswith((".dist-info", ".data", ".pth")) and top != "__pycache__":
                modules.add(top.removesuffix(".py"))
    return modules


def development_only_modules() -> set[str]:
    runtime = distributions(PROJECT_ROOT / "requirements.txt")
    development = distributions(PROJECT_ROOT / "requirements-dev.txt")
    return top_level_modules(development - runtime) - top_level_modules(runtime)


def variables_of_step_3() -> dict[str, str]:
    """The environment file the page shows in step 3."""
    step = PAGE.read_text().split("## 3. Set the variables", 1)[1]
    block = re.search(r"```sh\n(.*?)```", step, re.DOTALL).group(1)
    return dict(line.split("=", 1) for line in block.splitlines() if line and not line.startswith("#"))


@pytest.fixture
def throwaway_catalog(django_db_setup):
    """A database next to the test database, migrated by the project's own `manage.py migrate` as the tables'
    owner, and dropped afterwards."""
    name = f"{connection.settings_dict['NAME']}_production"
    server = database_url_of_tests().rsplit("/", 1)[0]
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        migrate(f"{server}/{name}")
        yield f"{server}/{name}"
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def as_user(url: str, user: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}@{parts.netloc.rpartition('@')[2]}"))


@pytest.mark.usefixtures("roles_to_itself")
def test_the_production_page_followed_on_a_throwaway_database(throwaway_catalog, tmp_path):
    psql = installed_tool("psql", f"postgresql-client-{POSTGRES_MAJOR}", path=POSTGRES_BINDIR)
    # Step 2, as the page says it.
    created = subprocess.run(
        [psql, "-d", throwaway_catalog, "-v", "ON_ERROR_STOP=1", "-f", str(ROLE_SCRIPT)], capture_output=True,
        text=True, timeout=TIMEOUT_SECONDS,
    )
    assert created.returncode == 0, created.stderr
    # Step 3: the page's variables, its URLs pointed here with the page's users (this server trusts its users: no
    # passwords). The web app's role does not exist here: the job runs only on its own connection, as its role.
    variables = variables_of_step_3()
    assert {"APP_ENV", "DJANGO_SECRET_KEY", "DATABASE_URL", "DELISTED_RETENTION_DATABASE_URL"} <= set(variables)
    assert urllib.parse.urlsplit(variables["DELISTED_RETENTION_DATABASE_URL"]).username == "catalog_retention"
    metrics_file = tmp_path / "catalog_delisted_retention.prom"
    environment = {
        "PATH": os.environ["PATH"],
        **variables,
        "DATABASE_URL": as_user(throwaway_catalog, urllib.parse.urlsplit(variables["DATABASE_URL"]).username),
        "DELISTED_RETENTION_DATABASE_URL": as_user(throwaway_catalog, "catalog_retention"),
        "PROMETHEUS_PUSHGATEWAY_URL": "",  # no gateway here: the systemd unit's textfile instead
        "DELISTED_RETENTION_METRICS_TEXTFILE": str(metrics_file),
    }
    blocked = ",".join(sorted(development_only_modules()))
    assert {"pytest", "pgserver", "playwright"} <= set(blocked.split(","))

    def manage(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", WITH_RUNTIME_REQUIREMENTS_ONLY, blocked, *args], cwd=PROJECT_ROOT, env=environment,
            capture_output=True, text=True, timeout=TIMEOUT_SECONDS,
        )

    demo = subprocess.run(  # something to delete, written as the web app's role (the superuser here)
        [sys.executable, "manage.py", "seed_demo_data", "--projects", "20", "--objects-per-project", "5"],
        cwd=PROJECT_ROOT, env={"PATH": os.environ["PATH"], "DATABASE_URL": throwaway_catalog}, capture_output=True,
        text=True, timeout=TIMEOUT_SECONDS,
    )
    assert demo.returncode == 0, demo.stderr

    checked = manage("check")  # step 4
    dry_run = manage("purge_delisted", "--dry-run", "--json")  # step 5
    nightly = manage("purge_delisted", "--json")  # step 6: what the schedule runs

    assert (checked.returncode, checked.stdout.strip()) == (0, "System check identified no issues (0 silenced)."), (
        checked.stderr
    )
    assert dry_run.returncode == 0, dry_run.stderr
    predicted = json.loads(dry_run.stdout)
    assert predicted["dry_run"] and predicted["would_delete_property_object_cards"] > 0
    assert nightly.returncode == 0, nightly.stderr
    done = json.loads(nightly.stdout)
    assert done["deleted_property_object_cards"] == predicted["would_delete_property_object_cards"]
    assert done["deleted_project_cards"] == predicted["would_delete_project_cards"]
    # Step 7: the last run in the file the variable names, the last success in its sibling.
    assert "catalog_delisted_retention_last_run_outcome" in metrics_file.read_text()
    last_success = metrics_file.with_name("catalog_delisted_retention_last_success.prom")
    assert "catalog_delisted_retention_last_success_timestamp_seconds" in last_success.read_text()


def test_the_files_the_production_page_names_exist():
    named = set(re.findall(r"(?<![\w/])deploy/[\w./-]+\w", PAGE.read_text()))
    assert named, "the page names no file of deploy/"
    assert {path for path in named if not (PROJECT_ROOT / path).exists()} == set()
