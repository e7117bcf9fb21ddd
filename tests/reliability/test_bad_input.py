"""Bad input never deletes anything: every option and every setting of the job, given a malformed, zero, negative,
huge or non-numeric value, stops the job with exit 2 and one line on stderr naming what to fix — no traceback.

Options and out-of-range settings go through the command's own `run_from_argv` in this process (what `manage.py`
calls after start-up; the command reads a setting exactly where it reads the option). A setting that is not a
whole number stops the settings module at start-up: its reader is tested here for every setting and value, and
real `manage.py` processes, side by side, show each kind of value stopping start-up in one line."""

import subprocess

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.logging import TextFormatter
from config.settings import env_int
from retention.management.commands.purge_delisted import Command
from tests.support import PROJECT_ROOT, manage_command
from tests.factories import ProjectCardFactory, PropertyObjectCardFactory
from tests.reliability.support import WAIT_SECONDS, CatalogState, job_environment

# The job runs in this process and in others: its rows must be committed.
pytestmark = pytest.mark.django_db(transaction=True)

OUT_OF_RANGE_NUMBERS = {"zero": 0, "negative": -5, "huge": 10**30}
# Full-width digits and digit separators are numbers to Python's int(), typos to an operator: refused.
NOT_WHOLE_NUMBERS = {
    "malformed": "12abc", "non-numeric": "ten", "empty": "", "fractional": "1.5", "full-width": "３０",
    "separated": "3_0",
}
OPTIONS = ("--retention-days", "--batch-size", "--max-batches", "--max-duration-seconds", "--batch-pause-ms")
NUMERIC_SETTINGS = (
    "DELISTED_RETENTION_PERIOD_DAYS",
    "DELISTED_RETENTION_BATCH_SIZE",
    "DELISTED_RETENTION_MAX_BATCHES_PER_RUN",
    "DELISTED_RETENTION_MAX_RUN_DURATION_SECONDS",
    "DELISTED_RETENTION_BATCH_PAUSE_MS",
    "DELISTED_RETENTION_STATEMENT_TIMEOUT_MS",
    "DELISTED_RETENTION_LOCK_TIMEOUT_MS",
)
PRODUCTION = {"APP_ENV": "production", "DJANGO_SECRET_KEY": "x" * 50}
# Settings that are not numbers: (name, bad value, other settings the case needs).
OTHER_BAD_SETTINGS = [
    ("APP_ENV", "staging", {}),
    ("DJANGO_DEBUG", "maybe", {}),
    ("DATABASE_URL", "mysql://catalog@127.0.0.1/catalog", {}),
    ("DATABASE_URL", "not a url", {}),
    ("DATABASE_URL", "postgres://postgres@127.0.0.1:5432", {}),
    ("LOG_LEVEL", "loud", {}),
    ("DELISTED_RETENTION_LOCK_DATABASE", "replica", {}),
    ("DJANGO_SECURE_HSTS_SECONDS", "-1", PRODUCTION),
    ("DJANGO_SECURE_HSTS_SECONDS", "a year", PRODUCTION),
]


def out_of_range_values(name: str) -> dict:
    # A zero pause is valid: no pause between batches.
    pause = name.endswith("PAUSE_MS")
    return {kind: value for kind, value in OUT_OF_RANGE_NUMBERS.items() if not (pause and value == 0)}


def assert_rejected_in_one_line(run: subprocess.CompletedProcess, *, naming: str) -> None:
    assert run.returncode == 2, run.stderr
    assert run.stdout == ""
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert naming in lines[0]
    assert "Traceback" not in run.stderr


@pytest.fixture
def run_in_process(capsys, caplog):
    """The command as `manage.py` runs it, in this process; its stderr is what it printed plus what it logged."""

    def run(*options: str) -> subprocess.CompletedProcess:
        caplog.clear()
        with pytest.raises(SystemExit) as exit_info:
            Command().run_from_argv(["manage.py", "purge_delisted", *options])
        captured = capsys.readouterr()
        logged = "".join(f"{TextFormatter().format(record)}\n" for record in caplog.records)
        return subprocess.CompletedProcess(options, exit_info.value.code, captured.out, captured.err + logged)

    return run


def run_side_by_side(environments: list[dict[str, str]]) -> list[subprocess.CompletedProcess]:
    jobs = [
        subprocess.Popen(
            manage_command("purge_delisted"), cwd=PROJECT_ROOT, env=environment,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for environment in environments
    ]
    finished = []
    for job in jobs:
        stdout, stderr = job.communicate(timeout=WAIT_SECONDS)
        finished.append(subprocess.CompletedProcess(job.args, job.returncode, stdout, stderr))
    return finished


@pytest.fixture
def overdue_catalog():
    project = ProjectCardFactory(long_delisted=True)
    PropertyObjectCardFactory.create_batch(2, long_delisted=True, project_id=project.id)
    before = CatalogState.read()
    yield
    assert CatalogState.read() == before, "a rejected run deleted something"


@pytest.mark.parametrize("option", OPTIONS)
def test_a_bad_option_value_is_rejected_in_one_line_naming_the_option(
    overdue_catalog, run_in_process, subtests, option
):
    bad_values = {**out_of_range_values(option.replace("-", "_").upper()), **NOT_WHOLE_NUMBERS}
    for kind, value in bad_values.items():
        with subtests.test(kind, value=value):
            assert_rejected_in_one_line(run_in_process(f"{option}={value}"), naming=option)


def test_an_unknown_or_abbreviated_option_is_rejected_in_one_line(overdue_catalog, run_in_process):
    assert_rejected_in_one_line(run_in_process("--retention=7"), naming="--retention=7")


@pytest.mark.parametrize("setting", NUMERIC_SETTINGS)
def test_an_out_of_range_setting_is_rejected_in_one_line_naming_it(
    overdue_catalog, run_in_process, settings, subtests, setting
):
    for kind, value in out_of_range_values(setting).items():
        with subtests.test(kind, value=value):
            setattr(settings, setting, value)
            assert_rejected_in_one_line(run_in_process(), naming=setting)


@pytest.mark.parametrize("setting", NUMERIC_SETTINGS)
def test_a_setting_that_is_not_a_whole_number_is_refused_naming_it(monkeypatch, subtests, setting):
    for kind, value in NOT_WHOLE_NUMBERS.items():
        with subtests.test(kind, value=value):
            monkeypatch.setenv(setting, value)
            with pytest.raises(ImproperlyConfigured, match=f"^{setting} must be a whole number"):
                env_int(setting, 1)


@pytest.mark.slow
def test_a_setting_that_is_not_a_whole_number_stops_manage_py_in_one_line_naming_it(overdue_catalog, subtests):
    # Each kind of value once, each on another setting: the settings module reads them all with env_int (above).
    cases = list(zip(NUMERIC_SETTINGS, NOT_WHOLE_NUMBERS.values(), strict=False))
    runs = run_side_by_side([job_environment(**{setting: value}) for setting, value in cases])

    for (setting, value), run in zip(cases, runs):
        with subtests.test(setting, value=value):
            assert_rejected_in_one_line(run, naming=setting)


@pytest.mark.slow
def test_manage_py_reports_an_out_of_range_setting_in_one_line(overdue_catalog):
    [run] = run_side_by_side([job_environment(DELISTED_RETENTION_PERIOD_DAYS=str(OUT_OF_RANGE_NUMBERS["huge"]))])

    assert_rejected_in_one_line(run, naming="DELISTED_RETENTION_PERIOD_DAYS")


@pytest.mark.slow
def test_other_bad_settings_stop_manage_py_in_one_line_naming_the_setting(overdue_catalog, subtests):
    runs = run_side_by_side(
        [job_environment(**others, **{setting: value}) for setting, value, others in OTHER_BAD_SETTINGS]
    )

    for (setting, value, _), run in zip(OTHER_BAD_SETTINGS, runs):
        with subtests.test(setting, value=value):
            assert_rejected_in_one_line(run, naming=setting)
