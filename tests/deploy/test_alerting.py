"""Alert rules and the Grafana dashboard: valid for promtool, unit-tested, and naming only metrics we export."""

import json
import re
import subprocess

import pytest
import yaml

from retention.metrics import HELP, RUN_DURATION
from tests.support import PROJECT_ROOT, installed_tool

PROMETHEUS = PROJECT_ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS / "catalog-delisted-retention.rules.yml"
RUNBOOKS = PROJECT_ROOT / "docs" / "runbooks"
# The one configurable base of the runbook links: an external label of the Prometheus evaluating the rules.
RUNBOOK_BASE = "{{ $externalLabels.runbook_base_url }}/"
DASHBOARD = PROJECT_ROOT / "deploy" / "grafana" / "catalog-delisted-retention.dashboard.json"
EXPORTED = set(HELP) | {f"{RUN_DURATION}_{suffix}" for suffix in ("bucket", "sum", "count")}


def promtool(*args: str, cwd=PROMETHEUS) -> subprocess.CompletedProcess:
    binary = installed_tool("promtool", "prometheus")
    return subprocess.run([binary, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def dashboard_expressions() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel["targets"]]


def rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def rule_expressions() -> list[str]:
    return [rule["expr"] for rule in rules()]


def test_promtool_check_rules_passes():
    checked = promtool("check", "rules", RULES.name)

    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 7 rules found" in checked.stdout


def test_promtool_unit_tests_fire_each_alert_when_due_and_not_before():
    tested = promtool("test", "rules", "catalog-delisted-retention.rules.test.yml")

    assert tested.returncode == 0, tested.stdout + tested.stderr
    test_file = (PROMETHEUS / "catalog-delisted-retention.rules.test.yml").read_text()
    for rule in rules():
        tested_as = f"alertname: {rule['alert']}" if "alert" in rule else f"expr: {rule['record']}"
        assert tested_as in test_file


@pytest.mark.parametrize("rule", [rule for rule in rules() if "alert" in rule], ids=lambda rule: rule["alert"])
def test_each_alert_links_its_runbook_on_the_configured_base(rule):
    runbook_url = rule["annotations"]["runbook_url"]

    assert runbook_url.startswith(RUNBOOK_BASE)
    assert (RUNBOOKS / runbook_url.removeprefix(RUNBOOK_BASE)).is_file()


def test_dashboard_has_the_delisted_size_panel():
    panels = {panel["title"]: panel for panel in json.loads(DASHBOARD.read_text())["panels"]}

    assert "catalog_delisted_backlog" in panels["Delisted size"]["targets"][0]["expr"]


def test_dashboard_queries_are_valid_promql(tmp_path):
    records = [{"record": f"dashboard:query_{i}", "expr": expr} for i, expr in enumerate(dashboard_expressions())]
    as_recording_rules = {"groups": [{"name": "dashboard", "rules": records}]}
    (tmp_path / "dashboard.rules.yml").write_text(yaml.safe_dump(as_recording_rules))

    checked = promtool("check", "rules", "dashboard.rules.yml", cwd=tmp_path)

    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("source", ["rules", "dashboard"])
def test_rules_and_dashboard_name_only_metrics_the_job_exports(source):
    expressions = rule_expressions() if source == "rules" else dashboard_expressions()

    named = {name for expr in expressions for name in re.findall(r"\bcatalog_delisted_[\w:]+", expr)}

    recorded = {rule["record"] for rule in rules() if "record" in rule}
    assert named and named <= EXPORTED | recorded
