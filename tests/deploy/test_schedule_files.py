"""The schedule units under deploy/: 03:30 Europe/Moscow, one run at a time, a graceful stop longer than a batch;
the systemd unit's metrics and JSON logs not undone by an environment file made from .env.example; hardened: the
systemd sandbox by `systemd-analyze security`, the CronJob by the restricted Pod Security Standard and the Kubernetes
schemas, the cron line's exit status is the job's."""

import configparser
import re
import secrets
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from django.conf import settings

from tests.support import PROJECT_ROOT, installed_tool, manage_env

DEPLOY = PROJECT_ROOT / "deploy"
# A batch is two statements, each bounded by the statement timeout: a graceful stop must outlast both.
LONGEST_BATCH_SECONDS = 2 * settings.DELISTED_RETENTION_STATEMENT_TIMEOUT_MS / 1000
MAX_RUN_DURATION_SECONDS = settings.DELISTED_RETENTION_MAX_RUN_DURATION_SECONDS
SERVICE = DEPLOY / "systemd" / "catalog-delisted-retention.service"
CRONTAB = DEPLOY / "cron" / "catalog-delisted-retention"
CRONJOB = DEPLOY / "k8s" / "catalog-delisted-retention-cronjob.yaml"
# Where the units and the crontab expect the checkout.
INSTALL_DIR = "/srv/catalog"
MAX_SYSTEMD_EXPOSURE = 4.0
# The Kubernetes releases still supported upstream when kubernetes-validate (requirements.txt) was pinned.
KUBERNETES_VERSIONS = ("1.35.0", "1.36.0", "1.37.0")


def systemd_unit(name: str) -> configparser.ConfigParser:
    unit = configparser.ConfigParser(interpolation=None, strict=False)  # systemd repeats keys (Environment=)
    unit.optionxform = str  # systemd keys are case-sensitive
    unit.read_string((DEPLOY / "systemd" / name).read_text())
    return unit


def test_systemd_timer_fires_at_0330_moscow_and_catches_up_missed_nights():
    timer = systemd_unit("catalog-delisted-retention.timer")["Timer"]

    assert timer["OnCalendar"] == "*-*-* 03:30:00 Europe/Moscow"
    assert timer["Persistent"] == "true"
    assert timer["Unit"] == "catalog-delisted-retention.service"


def test_systemd_analyze_accepts_the_timer_expression():
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not on this machine (it comes with systemd)")
    expression = systemd_unit("catalog-delisted-retention.timer")["Timer"]["OnCalendar"]

    checked = subprocess.run(
        ["systemd-analyze", "calendar", expression], capture_output=True, text=True, timeout=30
    )

    assert checked.returncode == 0, checked.stderr
    assert "Normalized form: *-*-* 03:30:00 Europe/Moscow" in checked.stdout


def test_systemd_service_stops_gracefully_with_a_timeout_longer_than_a_batch():
    service = systemd_unit("catalog-delisted-retention.service")["Service"]

    assert service["Type"] == "oneshot"
    assert service["ExecStart"].endswith("manage.py purge_delisted")
    assert service["KillSignal"] == "SIGTERM"
    assert int(service["TimeoutStopSec"]) > LONGEST_BATCH_SECONDS
    assert service["TimeoutStartSec"] == "30min" and 30 * 60 > MAX_RUN_DURATION_SECONDS


def installed_checkout(tmp_path):
    """INSTALL_DIR stand-in: `.venv/bin/python` runs this interpreter, `manage.py` is the project's."""
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    python = tmp_path / ".venv" / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    (tmp_path / "manage.py").symlink_to(PROJECT_ROOT / "manage.py")
    return tmp_path


def test_systemd_service_sandbox_exposure_is_at_most_4():
    analyze = installed_tool("systemd-analyze", "systemd")

    checked = subprocess.run(
        [analyze, "security", "--offline=yes", str(SERVICE)], capture_output=True, text=True, timeout=30
    )

    (exposure,) = re.findall(r"Overall exposure level for \S+: (\d+\.\d+)", checked.stdout)
    assert float(exposure) <= MAX_SYSTEMD_EXPOSURE, checked.stdout


def test_systemd_analyze_verify_finds_nothing_in_the_units(tmp_path):
    analyze = installed_tool("systemd-analyze", "systemd")
    # verify checks that ExecStart exists: point the units at a stand-in of the installed checkout.
    checkout = installed_checkout(tmp_path / "srv")
    units = tmp_path / "units"
    units.mkdir()
    for unit in (DEPLOY / "systemd").iterdir():
        (units / unit.name).write_text(unit.read_text().replace(INSTALL_DIR, str(checkout)))

    checked = subprocess.run(
        [analyze, "verify", *sorted(str(unit) for unit in units.iterdir())], capture_output=True, text=True,
        timeout=30,
    )

    assert (checked.returncode, checked.stdout + checked.stderr) == (0, "")


def service_lines(text: str) -> list[tuple[str, str]]:
    """The [Service] section's (key, value) pairs in order, as systemd.syntax(7) reads them: a line ending in a
    backslash goes on with the next, whose comment lines are skipped; `#` and `;` lines are comments."""
    pairs, section, pending = [], None, ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(("#", ";")) or not (stripped or pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical, pending = pending + stripped, ""
        if logical.startswith("["):
            section = logical.strip("[]")
        elif section == "Service" and "=" in logical:
            key, value = logical.split("=", 1)
            pairs.append((key.strip(), value.strip()))
    return pairs


def environment_file_variables(path) -> dict[str, str]:
    """An EnvironmentFile= as systemd.exec(5) reads it: VAR=VALUE lines, `#` and `;` comments, quotes removed."""
    variables = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";")):
            name, value = line.split("=", 1)
            variables[name.strip()] = " ".join(shlex.split(value)) if value.strip() else ""
    return variables


def service_process(text: str) -> tuple[dict[str, str], list[str], str]:
    """The environment, command line and working directory the unit's ExecStart= runs with. systemd.exec(5): the
    Environment= assignments in order, then the EnvironmentFile= files in order, whose variables override those of
    Environment= wherever each line stands."""
    pairs = service_lines(text)
    environment = {}
    for key, value in pairs:
        if key == "Environment":
            environment |= dict(assignment.split("=", 1) for assignment in shlex.split(value))
    for key, value in pairs:
        if key == "EnvironmentFile":
            environment |= environment_file_variables(Path(value.removeprefix("-")))
    (command,) = [value for key, value in pairs if key == "ExecStart"]
    (directory,) = [value for key, value in pairs if key == "WorkingDirectory"]
    return environment, shlex.split(command), directory


def test_an_environment_file_overrides_environment_lines_as_systemd_documents(tmp_path):
    shared = tmp_path / "shared.env"
    shared.write_text("# made from .env.example\nLOG_FORMAT=text\nDELISTED_RETENTION_METRICS_TEXTFILE=\n")
    unit = (
        f"[Service]\nEnvironment=LOG_FORMAT=json\nEnvironmentFile={shared}\nWorkingDirectory=/srv\n"
        "Environment=DELISTED_RETENTION_METRICS_TEXTFILE=/var/lib/metrics.prom\nExecStart=/usr/bin/true\n"
    )

    environment, _, _ = service_process(unit)

    assert environment == {"LOG_FORMAT": "text", "DELISTED_RETENTION_METRICS_TEXTFILE": ""}


SETTINGS_OF_THE_RUN = (
    "from django.conf import settings; from retention.metrics import configured_sinks; "
    "print(settings.LOG_FORMAT); print(*configured_sinks(), sep=', ')"
)


def test_an_environment_file_made_from_env_example_leaves_the_units_metrics_and_json_logs_on(tmp_path):
    # The operator's file: .env.example with production, a key and the real database; the rest as it comes.
    production = {"APP_ENV": "production", "DJANGO_SECRET_KEY": secrets.token_urlsafe(50)}
    shared = tmp_path / "catalog.env"
    shared.write_text("".join(
        f"{line.split('=', 1)[0]}={production[line.split('=', 1)[0]]}\n" if line.split("=", 1)[0] in production
        else f"{line}\n" for line in (PROJECT_ROOT / ".env.example").read_text().splitlines()
    ))
    assert environment_file_variables(shared)["LOG_FORMAT"] == "text"  # which the unit's own settings must win over
    checkout = installed_checkout(tmp_path / "srv")
    unit = SERVICE.read_text().replace(INSTALL_DIR, str(checkout)).replace("/etc/catalog/catalog.env", str(shared))
    environment, command, directory = service_process(unit)
    assert command[-2:] == ["manage.py", "purge_delisted"]

    # The unit's command line as systemd would exec it, with the job's settings printed instead of a run.
    run = subprocess.run(
        [*command[:-1], "shell", "--verbosity", "0", "-c", SETTINGS_OF_THE_RUN], cwd=directory,
        env=environment | {"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60,
    )

    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "json", "textfile /var/lib/prometheus/node-exporter/catalog_delisted_retention.prom"
    ]


def crontab() -> tuple[dict[str, str], str, str]:
    """The crontab's variables, and its job line's user and command."""
    lines = [line for line in CRONTAB.read_text().splitlines() if line and not line.startswith("#")]
    variables = dict(line.split("=", 1) for line in lines if not line[0].isdigit())
    (job,) = [line for line in lines if line[0].isdigit()]
    fields = job.split(maxsplit=6)
    assert fields[:5] == ["30", "3", "*", "*", "*"]
    return variables, fields[5], fields[6]


def test_crontab_runs_at_0330_moscow_time_under_a_timeout_longer_than_a_run():
    variables, user, command = crontab()

    assert variables["CRON_TZ"] == "Europe/Moscow"
    assert user == "catalog"
    assert "manage.py purge_delisted" in command
    kill_after, minutes = re.search(r"\btimeout --kill-after=(\d+) (\d+)m ", command).groups()
    assert int(minutes) * 60 > MAX_RUN_DURATION_SECONDS + LONGEST_BATCH_SECONDS
    assert int(kill_after) > LONGEST_BATCH_SECONDS


def test_the_cron_line_exits_with_the_jobs_status_and_logs_its_output(tmp_path):
    variables, _, command = crontab()
    checkout = installed_checkout(tmp_path / "srv")
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    logger = fake_bin / "logger"
    logger.write_text(f"#!/bin/sh\ncat >> {tmp_path / 'syslog'}\n")
    logger.chmod(0o755)

    # As cron runs it: the crontab's SHELL -c the command. A batch size of 0 makes the job exit 2 at once.
    run = subprocess.run(
        [variables["SHELL"], "-c", command.replace(INSTALL_DIR, str(checkout))],
        env=manage_env(PATH=f"{fake_bin}:/usr/bin:/bin", DELISTED_RETENTION_BATCH_SIZE="0"),
        capture_output=True, text=True, timeout=60,
    )

    assert run.returncode == 2, run.stderr
    assert "DELISTED_RETENTION_BATCH_SIZE" in (tmp_path / "syslog").read_text()


def test_kubernetes_cronjob_runs_one_at_a_time_at_0330_moscow_and_stops_gracefully():
    (cronjob,) = yaml.safe_load_all((DEPLOY / "k8s" / "catalog-delisted-retention-cronjob.yaml").read_text())

    assert (cronjob["apiVersion"], cronjob["kind"]) == ("batch/v1", "CronJob")
    spec = cronjob["spec"]
    assert spec["schedule"] == "30 3 * * *" and spec["timeZone"] == "Europe/Moscow"
    assert spec["concurrencyPolicy"] == "Forbid"
    assert spec["startingDeadlineSeconds"] > 0
    job = spec["jobTemplate"]["spec"]
    assert job["activeDeadlineSeconds"] > MAX_RUN_DURATION_SECONDS + LONGEST_BATCH_SECONDS
    pod = job["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > LONGEST_BATCH_SECONDS
    (container,) = pod["containers"]
    assert container["command"][-2:] == ["manage.py", "purge_delisted"]


def test_kubernetes_cronjob_pod_mounts_no_service_account_token():
    (cronjob,) = yaml.safe_load_all(CRONJOB.read_text())

    assert cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_kubernetes_cronjob_is_valid_for_current_kubernetes_versions(version):
    (cronjob,) = yaml.safe_load_all(CRONJOB.read_text())

    kubernetes_validate.validate(cronjob, version, strict=True)  # raises on an unknown or malformed field


RESTRICTED_VOLUME_TYPES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
}


def restricted_violations(pod: dict) -> list[str]:
    """What keeps a pod spec from admission under `pod-security.kubernetes.io/enforce: restricted`: the baseline
    and restricted controls of kubernetes.io/docs/concepts/security/pod-security-standards/. Stricter where that
    is simpler: sysctls, SELinux and AppArmor options, which the standard allows in part, must be absent."""
    containers = [*pod.get("initContainers", []), *pod["containers"], *pod.get("ephemeralContainers", [])]
    violations = [f"host namespace {key}" for key in ("hostNetwork", "hostPID", "hostIPC") if pod.get(key)]
    violations += [
        f"volume {volume['name']} of a restricted type" for volume in pod.get("volumes", [])
        if not set(volume) - {"name"} <= RESTRICTED_VOLUME_TYPES
    ]
    for container in containers:
        # A container's field overrides the pod's.
        context = pod.get("securityContext", {}) | container.get("securityContext", {})
        name = container["name"]
        capabilities = context.get("capabilities", {})
        checks = {
            "privileged": not context.get("privileged"),
            "allowPrivilegeEscalation is not false": context.get("allowPrivilegeEscalation") is False,
            "runAsNonRoot is not true": context.get("runAsNonRoot") is True,
            "runAsUser 0": context.get("runAsUser") != 0,
            "seccompProfile is not RuntimeDefault or Localhost":
                context.get("seccompProfile", {}).get("type") in ("RuntimeDefault", "Localhost"),
            "capabilities do not drop ALL": "ALL" in capabilities.get("drop", []),
            "capabilities add more than NET_BIND_SERVICE": set(capabilities.get("add", [])) <= {"NET_BIND_SERVICE"},
            "procMount is not Default": context.get("procMount", "Default") == "Default",
            "sysctls, SELinux or AppArmor options": not {"sysctls", "seLinuxOptions", "appArmorProfile"} & set(context),
            "a host port": not any(port.get("hostPort") for port in container.get("ports", [])),
        }
        violations += [f"{name}: {violation}" for violation, passed in checks.items() if not passed]
    return violations


def test_kubernetes_cronjob_pod_is_admissible_under_the_restricted_pod_security_standard():
    (cronjob,) = yaml.safe_load_all(CRONJOB.read_text())

    assert restricted_violations(cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]) == []


def test_the_restricted_check_refuses_a_pod_with_kubernetes_defaults():
    default_pod = {"containers": [{"name": "job", "image": "catalog"}], "volumes": [{"name": "h", "hostPath": {}}]}

    assert restricted_violations(default_pod) == [
        "volume h of a restricted type",
        "job: allowPrivilegeEscalation is not false",
        "job: runAsNonRoot is not true",
        "job: seccompProfile is not RuntimeDefault or Localhost",
        "job: capabilities do not drop ALL",
    ]
