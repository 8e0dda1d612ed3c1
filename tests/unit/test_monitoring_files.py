"""The committed monitoring files: generated ones current, every query on exported metrics,
alert conditions evaluable, Grafana provisioning consistent, and promtool's verdicts.

promtool is the real one (Debian's prometheus package, installed by `make tools`); these tests
fail, never skip, when it is missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from deploy.monitoring import PROMETHEUS_RULE_PATH
from deploy.monitoring.dashboard import dashboard_json
from deploy.monitoring.prometheus_rule import prometheus_rule_yaml
from sidecar.metrics import Metrics
from tests.promql import (
    dashboard_queries,
    dashboard_variables,
    exported_names,
    load_rule_groups,
    metric_names,
    recorded_names,
    rule_expressions,
    strip_conditions,
    unknown_metrics,
)

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PROMETHEUS = DEPLOY / "prometheus"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "zdict-sidecar.json"
RULE_FILES = (PROMETHEUS / "rules.yml", PROMETHEUS / "alerts.yml")


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def _groups() -> list[Any]:
    return [group for path in RULE_FILES for group in load_rule_groups(path.read_text())]


def _promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool is not installed: run `make tools` (Debian package prometheus)"
    return path


# -- generated files -----------------------------------------------------------------------------


def test_the_committed_dashboard_is_what_the_generator_writes() -> None:
    assert DASHBOARD.read_text() == dashboard_json(), "run `make dashboard`"


def test_the_committed_prometheus_rule_is_what_the_generator_writes() -> None:
    assert PROMETHEUS_RULE_PATH.read_text() == prometheus_rule_yaml(), "run `make dashboard`"


def test_the_prometheus_rule_carries_exactly_the_groups_of_the_rule_files() -> None:
    resource = yaml.safe_load((DEPLOY / "k8s" / "prometheusrule.yaml").read_text())
    assert resource["kind"] == "PrometheusRule"
    assert resource["spec"]["groups"] == _groups()


# -- the dashboard -------------------------------------------------------------------------------


def test_the_dashboard_uid_is_pinned_and_every_query_uses_the_datasource_variable() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] == "zdict-sidecar"
    names = [v["name"] for v in dashboard["templating"]["list"]]
    assert names[0] == "datasource" and "namespace" in names
    datasource_var = dashboard["templating"]["list"][0]
    assert datasource_var["type"] == "datasource" and datasource_var["query"] == "prometheus"
    prometheus_ds = {"type": "prometheus", "uid": "${datasource}"}
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == prometheus_ds, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == prometheus_ds, panel["title"]
    annotations = [a for a in dashboard["annotations"]["list"] if "expr" in a]
    assert annotations and all(a["datasource"] == prometheus_ds for a in annotations)


def test_panels_do_not_overlap_and_fit_the_24_column_grid() -> None:
    taken: set[tuple[int, int]] = set()
    for panel in _dashboard()["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells


def test_the_dashboard_shows_the_numbers_the_issue_asks_for() -> None:
    titles = {panel["title"] for panel in _dashboard()["panels"]}
    for wanted in (
        "Compression ratio",
        "Bytes saved per second",
        "Saved in the time range",
        "Estimated saving per month",
        "Records per second by outcome",
        "Compress time per message (p50, p99)",
        "Relay latency: record timestamp to acknowledged (p50, p99)",
        "Active dictionary over time",
        "Training runs by result",
        "Consumer lag per partition",
        "Trainer of each namespace",
        "Trainers per namespace",
        "Drift: the trainer's live ratio vs the held-out ratio",
        "Training triggers by kind",
        "Training reservoir: bytes",
        "Training reservoir: values",
        "Training CPU share (last hour)",
        "Registry publications by result",
    ):
        assert wanted in titles
    annotation_names = {a["name"] for a in _dashboard()["annotations"]["list"]}
    assert {"Dictionary activated", "Training promoted", "Drift"} <= annotation_names


def _known_names() -> set[str]:
    exposition = generate_latest(Metrics(CollectorRegistry()).registry).decode()
    return exported_names(exposition) | recorded_names(_groups()) | {"up"}


def test_every_dashboard_and_rule_query_uses_only_metrics_the_sidecar_exports() -> None:
    queries = dashboard_queries(_dashboard()) + rule_expressions(_groups())
    assert len(queries) > 30
    assert unknown_metrics(queries, _known_names()) == {}
    for variable in dashboard_variables(_dashboard()):
        assert variable.metric in _known_names(), variable


def test_every_alert_and_annotation_condition_can_be_evaluated_without_its_comparison() -> None:
    conditions = [
        q for q in dashboard_queries(_dashboard()) + rule_expressions(_groups()) if q.condition
    ]
    assert len(conditions) >= 10
    for query in conditions:
        stripped = strip_conditions(query.expr)
        assert stripped != query.expr, f"{query.source} compares nothing"
        assert metric_names(stripped) == metric_names(query.expr), query.source


def test_every_alert_has_a_severity_a_summary_and_a_description() -> None:
    alerts = [rule for group in _groups() for rule in group["rules"] if "alert" in rule]
    assert {rule["alert"] for rule in alerts} >= {
        "ZdictSidecarDown",
        "ZdictProduceErrors",
        "ZdictCompressionRatioDropped",
        "ZdictTrainingFailing",
        "ZdictDictionaryStale",
        "ZdictConsumerLagGrowing",
        "ZdictRegistryPublishFailing",
        "ZdictTrainerNotUnique",
    }
    for rule in alerts:
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]


# -- Grafana provisioning -----------------------------------------------------------------------


def test_grafana_provisioning_loads_the_dashboard_folder_from_a_prometheus_datasource() -> None:
    provisioning = DEPLOY / "grafana" / "provisioning"
    sources = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())
    assert sources["apiVersion"] == 1
    (source,) = sources["datasources"]
    assert source["type"] == "prometheus" and source["uid"] and source["url"].startswith("http")
    providers = yaml.safe_load((provisioning / "dashboards" / "zdict-sidecar.yml").read_text())
    (provider,) = providers["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"


# -- promtool ------------------------------------------------------------------------------------


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_promtool_check_config_accepts_the_scrape_config_and_its_rule_files() -> None:
    result = _run("check", "config", str(PROMETHEUS / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 rule files found" in result.stdout


def test_promtool_check_rules_accepts_every_rule_file() -> None:
    result = _run("check", "rules", *map(str, RULE_FILES))
    assert result.returncode == 0, result.stdout + result.stderr
    rules = sum(len(group["rules"]) for group in _groups())
    assert result.stdout.count("SUCCESS") == len(RULE_FILES)
    assert rules >= 14


def test_every_alert_fires_on_its_condition_in_promtool_unit_tests() -> None:
    tests = sorted((PROMETHEUS / "tests").glob("*.test.yml"))
    result = _run("test", "rules", *map(str, tests))
    assert result.returncode == 0, result.stdout + result.stderr
    fired = {
        case["alertname"]
        for path in tests
        for group in yaml.safe_load(path.read_text())["tests"]
        for case in group.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    alerts = {rule["alert"] for group in _groups() for rule in group["rules"] if "alert" in rule}
    assert fired == alerts, f"alerts without a firing test: {alerts - fired}"


@pytest.mark.parametrize("broken", ["up{job=", "sum(rate(x[5m]) by"])
def test_promtool_rejects_a_rule_file_with_a_broken_expression(tmp_path: Path, broken: str) -> None:
    path = tmp_path / "broken.yml"
    path.write_text(
        yaml.safe_dump({"groups": [{"name": "g", "rules": [{"record": "r", "expr": broken}]}]})
    )
    result = _run("check", "rules", str(path))
    assert result.returncode != 0
