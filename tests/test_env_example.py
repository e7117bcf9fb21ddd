""".env.example against config/settings.py: the file lists every variable the settings read, each active line holds
the real default, a variable whose default depends on another is shown commented out, and copying the file to .env
changes no setting, in development, in production and with a separate database for the job.

The settings are imported in a fresh interpreter per case, with an environment holding only that case's variables,
and django-environ's reads recorded (`Env.get_value`, through which every typed read goes)."""

import json
import os
import re
import subprocess
import sys

import pytest

from tests.support import PROJECT_ROOT

ENV_EXAMPLE = PROJECT_ROOT / ".env.example"
CASES = {
    "development": {},
    "production": {"APP_ENV": "production", "DJANGO_SECRET_KEY": "k" * 50},
    "a separate database for the job": {"DELISTED_RETENTION_DATABASE_URL": "postgres://job@db-host:5432/catalog"},
}

IMPORT_SETTINGS = """
import json, sys
import environ

dotenv = sys.argv[1]
reads = {}
get_value = environ.Env.get_value


def recorded(self, var, cast=None, default=environ.Env.NOTSET, parse_default=False):
    reads.setdefault(var, ",".join(default) if isinstance(default, list) else str(default))
    return get_value(self, var, cast=cast, default=default, parse_default=parse_default)


environ.Env.get_value = recorded
read_env = environ.Env.read_env
environ.Env.read_env = classmethod(lambda cls, *args, **kwargs: read_env(dotenv) if dotenv else None)
import config.settings as settings

values = {name: repr(getattr(settings, name)) for name in dir(settings) if name.isupper()}
print(json.dumps({"reads": reads, "settings": values}))
"""


def imported_settings(case: dict[str, str], *, dotenv: str = "") -> dict:
    completed = subprocess.run(
        [sys.executable, "-c", IMPORT_SETTINGS, dotenv], cwd=PROJECT_ROOT, capture_output=True, text=True,
        env={"PATH": os.environ["PATH"], **case}, timeout=60, check=True,
    )
    return json.loads(completed.stdout)


def listed() -> tuple[dict[str, str], set[str]]:
    """The active lines' values by name, and the names shown commented out (`# NAME=`)."""
    text = ENV_EXAMPLE.read_text()
    active = dict(re.findall(r"^([A-Z][A-Z0-9_]*)=(.*)$", text, re.MULTILINE))
    commented = set(re.findall(r"^# ([A-Z][A-Z0-9_]*)=", text, re.MULTILINE))
    return active, commented


@pytest.fixture(scope="module")
def without_dotenv() -> dict[str, dict]:
    return {name: imported_settings(case) for name, case in CASES.items()}


def test_every_variable_the_settings_read_is_listed_and_nothing_else(without_dotenv):
    read = set().union(*(imported["reads"] for imported in without_dotenv.values()))
    active, commented = listed()

    assert set(active) | commented == read


def test_every_value_shown_is_the_default_and_a_default_that_depends_on_another_is_commented_out(without_dotenv):
    read = set().union(*(imported["reads"] for imported in without_dotenv.values()))
    defaults = {
        name: {imported["reads"][name] for imported in without_dotenv.values() if name in imported["reads"]}
        for name in read
    }
    varying = {name for name, values in defaults.items() if len(values) > 1}
    active, commented = listed()

    assert varying <= commented and not varying & set(active)
    assert active == {name: defaults[name].pop() for name in active}


@pytest.mark.parametrize("case", CASES)
def test_copying_the_file_to_dotenv_changes_no_setting(case, without_dotenv):
    with_dotenv = imported_settings(CASES[case], dotenv=str(ENV_EXAMPLE))

    assert with_dotenv["settings"] == without_dotenv[case]["settings"]
