"""Alert rules and the Grafana dashboard: valid for promtool, unit-tested, per instance, and naming only metrics we
export."""

import json
import re
import subprocess

import pytest
import yaml

from retention.metrics import HELP, LAST_RUN_DELETED_CARDS, LAST_RUN_INFO, OLDEST_OVERDUE_AGE
from tests.support import PROJECT_ROOT, installed_tool

PROMETHEUS = PROJECT_ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS / "catalog-delisted-retention.rules.yml"
RUNBOOKS = PROJECT_ROOT / "docs" / "runbooks"
# The one configurable base of the runbook links: an external label of the Prometheus evaluating the rules.
RUNBOOK_BASE = "{{ $externalLabels.runbook_base_url }}/"
DASHBOARD = PROJECT_ROOT / "deploy" / "grafana" / "catalog-delisted-retention.dashboard.json"
RULES_TESTS = PROMETHEUS / "catalog-delisted-retention.rules.test.yml"
EXPORTED = set(HELP)
# Grafana's own variables in a query, replaced by what promtool can parse.
GRAFANA_RANGE = "$__range"


def promtool(*args: str, cwd=PROMETHEUS) -> subprocess.CompletedProcess:
    binary = installed_tool("promtool", "prometheus")
    return subprocess.run([binary, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def dashboard_expressions() -> list[str]:
    return [target["expr"] for panel in dashboard()["panels"] for target in panel["targets"]]


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
    test_file = RULES_TESTS.read_text()
    for rule in rules():
        tested_as = f"alertname: {rule['alert']}" if "alert" in rule else f"expr: {rule['record']}"
        assert tested_as in test_file


@pytest.mark.parametrize("rule", [rule for rule in rules() if "alert" in rule], ids=lambda rule: rule["alert"])
def test_each_alert_links_its_runbook_on_the_configured_base(rule):
    runbook_url = rule["annotations"]["runbook_url"]

    assert runbook_url.startswith(RUNBOOK_BASE)
    assert (RUNBOOKS / runbook_url.removeprefix(RUNBOOK_BASE)).is_file()


def test_every_alert_fires_for_its_instance_in_the_unit_tests():
    """An environment's alert must say which environment: each alert's firing cases name an instance (bar the one
    case of no metrics at all, where absent() has none to name)."""
    tests = yaml.safe_load(RULES_TESTS.read_text())["tests"]
    cases = [case for test in tests for case in test.get("alert_rule_test", [])]
    with_instance = {
        case["alertname"] for case in cases for alert in case["exp_alerts"] if "instance" in alert["exp_labels"]
    }

    assert with_instance == {rule["alert"] for rule in rules() if "alert" in rule}


def test_dashboard_has_the_delisted_size_and_the_slo_panels():
    panels = {panel["title"]: panel for panel in dashboard()["panels"]}

    assert "catalog_delisted_backlog" in panels["Delisted size"]["targets"][0]["expr"]
    slo = panels["Oldest overdue card, days past its cutoff (retention SLO)"]
    assert [OLDEST_OVERDUE_AGE in target["expr"] for target in slo["targets"]] == [True, False]
    assert "catalog_delisted_retention:overdue_age_slo_days" in slo["targets"][1]["expr"]


def test_dashboard_shows_the_cards_deleted_per_night_as_a_bar_a_day():
    panel = next(panel for panel in dashboard()["panels"] if panel["title"] == "Cards deleted per night")

    assert LAST_RUN_DELETED_CARDS in panel["targets"][0]["expr"] and panel["interval"] == "1d"
    assert panel["fieldConfig"]["defaults"]["custom"]["drawStyle"] == "bars"


def test_every_dashboard_query_is_for_the_chosen_instances():
    variables = {variable["name"]: variable for variable in dashboard()["templating"]["list"]}
    selected = [
        (name, selector) for expr in dashboard_expressions()
        for name, selector in re.findall(r"\b(catalog_delisted_[\w:]+)(\{[^}]*\})?", expr)
    ]
    selectors = [selector for name, selector in selected if name in EXPORTED]  # the recorded SLO has no instance

    assert variables["instance"]["includeAll"] and variables["instance"]["multi"]
    assert selectors and all('instance=~"$instance"' in selector for selector in selectors)


def test_the_dashboard_links_each_run_to_its_trace_in_the_tracing_datasource():
    variables = {variable["name"]: variable for variable in dashboard()["templating"]["list"]}
    runs = next(panel for panel in dashboard()["panels"] if LAST_RUN_INFO in panel["targets"][0]["expr"])
    links = [
        link for override in runs["fieldConfig"]["overrides"] if override["matcher"]["options"] == "trace_id"
        for prop in override["properties"] if prop["id"] == "links" for link in prop["value"]
    ]

    assert variables["tracing"]["type"] == "datasource"
    assert "trace_id" in runs["targets"][0]["expr"] and len(links) == 1
    assert '"datasource":"${tracing}"' in links[0]["url"] and "${__value.raw}" in links[0]["url"]


def test_dashboard_queries_are_valid_promql(tmp_path):
    records = [
        {"record": f"dashboard:query_{i}", "expr": expr.replace(GRAFANA_RANGE, "1d")}
        for i, expr in enumerate(dashboard_expressions())
    ]
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
