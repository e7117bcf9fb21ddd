"""One version names what is deployed: pyproject.toml holds it, and the job's --version, the CHANGELOG's latest
release and the CronJob's image tag say the same."""

import re
import tomllib

import yaml

from config.version import VERSION
from tests.support import PROJECT_ROOT, run_manage

PYPROJECT_VERSION = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_purge_delisted_version_prints_the_projects_version_not_djangos():
    run = run_manage("purge_delisted", "--version")

    assert (run.returncode, run.stdout) == (0, f"{PYPROJECT_VERSION}\n"), run.stderr
    assert VERSION == PYPROJECT_VERSION


def test_the_changelogs_latest_release_is_the_projects_version():
    releases = re.findall(r"^## \[([^\]]+)\]", (PROJECT_ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)

    assert releases[:2] == ["Unreleased", PYPROJECT_VERSION]


def test_the_cronjob_runs_the_image_of_the_projects_version():
    cronjob_file = PROJECT_ROOT / "deploy" / "k8s" / "catalog-delisted-retention-cronjob.yaml"
    (cronjob,) = yaml.safe_load_all(cronjob_file.read_text())
    (container,) = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]

    assert container["image"].rpartition(":")[2] == PYPROJECT_VERSION
