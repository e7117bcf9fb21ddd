"""Production settings (APP_ENV=production) come from the environment and are safe by default: Django's deploy
checks pass, DEBUG is off unless asked for, cookies are secure, hosts are the ones given, and a missing secret key
stops every command at start-up with one clear line. Each case is a real `manage.py` process."""

import json
import secrets
import shlex
import subprocess

import pytest
from django.conf import settings

from tests.support import PROJECT_ROOT, manage_command
from tests.reliability.support import WAIT_SECONDS, job_environment

pytestmark = pytest.mark.slow

SETTINGS_AS_JSON = (
    "import json; from django.conf import settings as s; print(json.dumps({name: getattr(s, name) for name in ["
    "'DEBUG', 'SECRET_KEY', 'ALLOWED_HOSTS', 'SESSION_COOKIE_SECURE', 'CSRF_COOKIE_SECURE', 'SECURE_SSL_REDIRECT',"
    "'SECURE_HSTS_SECONDS']}))"
)


def production_environment(**overrides: str) -> dict[str, str]:
    """Production with a real secret key and two hosts; nothing else of the caller's DJANGO_* environment."""
    environment = {name: value for name, value in job_environment().items() if not name.startswith("DJANGO_")}
    environment.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        APP_ENV="production",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(64),
        DJANGO_ALLOWED_HOSTS="catalog.example.com,www.catalog.example.com",
    )
    environment.update(overrides)
    return environment


def run_manage_py(*arguments: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        manage_command(*arguments), cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=WAIT_SECONDS
    )


def effective_settings(environment: dict[str, str]) -> dict:
    run = run_manage_py("shell", "--verbosity", "0", "-c", SETTINGS_AS_JSON, env=environment)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_django_deploy_checks_pass_with_production_settings():
    run = run_manage_py("check", "--deploy", "--fail-level", "WARNING", env=production_environment())

    assert run.returncode == 0, run.stdout + run.stderr
    assert "no issues" in run.stdout


def test_production_settings_are_taken_from_the_environment_and_secure_by_default():
    environment = production_environment()

    effective = effective_settings(environment)

    assert effective == {
        "DEBUG": False,
        "SECRET_KEY": environment["DJANGO_SECRET_KEY"],
        "ALLOWED_HOSTS": ["catalog.example.com", "www.catalog.example.com"],
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
        "SECURE_SSL_REDIRECT": True,
        "SECURE_HSTS_SECONDS": 31536000,
    }


def test_debug_is_on_in_production_only_when_asked_for():
    assert effective_settings(production_environment(DJANGO_DEBUG="true"))["DEBUG"] is True


@pytest.mark.parametrize("secret_key", ["", "too-short"], ids=["missing", "too short"])
@pytest.mark.parametrize("command", [["check"], ["purge_delisted"]], ids=["check", "purge_delisted"])
def test_production_without_a_real_secret_key_stops_at_start_up_in_one_line(command, secret_key):
    run = run_manage_py(*command, env=production_environment(DJANGO_SECRET_KEY=secret_key))

    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr.strip().splitlines() == [
        "configuration error: DJANGO_SECRET_KEY must be set to a random string of at least 50 characters in production"
    ]


PUBLISHED_EXAMPLE_KEY = "change-me-to-at-least-fifty-random-characters-0123456789"  # docs/production.md once showed it


@pytest.mark.parametrize(
    "secret_key",
    [PUBLISHED_EXAMPLE_KEY, "CHANGE-ME-" + secrets.token_urlsafe(50), "django-insecure-" + secrets.token_urlsafe(50)],
    ids=["the published example", "a change-me text", "a startproject key"],
)
def test_production_refuses_a_published_or_placeholder_secret_key_in_one_line(secret_key):
    run = run_manage_py("check", env=production_environment(DJANGO_SECRET_KEY=secret_key))

    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "configuration error: DJANGO_SECRET_KEY is a published example or placeholder, not a secret: generate one "
        f"with {settings.GENERATE_SECRET_KEY}"
    ]


def test_a_key_generated_as_the_refusal_says_is_accepted():
    generated = subprocess.run(
        shlex.split(settings.GENERATE_SECRET_KEY), capture_output=True, text=True, check=True, timeout=WAIT_SECONDS
    ).stdout.strip()

    assert effective_settings(production_environment(DJANGO_SECRET_KEY=generated))["SECRET_KEY"] == generated
