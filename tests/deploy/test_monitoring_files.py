"""The committed monitoring files: generated ones current, every query on exported metrics,
alert conditions evaluable, Grafana provisioning consistent, and promtool's verdicts.

promtool is the real one (Debian's prometheus package, installed by `make tools`); these tests
fail, never skip, when it is missing.
"""

from __future__ import annotations

import json
import re
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
from sidecar.proxy.fetch_metrics import FetchMetrics
from sidecar.proxy.metrics import ForwardMetrics
from sidecar.serde.metrics import ProducerMetrics
from tests.deploy.promql import (
    CLUSTER_METRICS,
    dashboard_queries,
    dashboard_variables,
    exported_names,
    load_rule_groups,
    metric_names,
    recorded_names,
    rule_expressions,
    strip_conditions,
    substitute,
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
    assert names[:6] == ["datasource", "cluster", "namespace", "job", "instance", "topic"]
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
        "Saved against the producer's codec",
        "Value compression ratio",
        "Bytes saved per second",
        "Saved in the time range",
        "Estimated saving per month",
        "Records per second by outcome",
        "Encode time per record, by topic",
        "Relay latency: record timestamp to acknowledged (p50, p99)",
        "Active dictionary over time",
        "Training runs by result",
        "Consumer lag per partition",
        "Trainer of each topic",
        "Trainers per topic",
        "Drift: the trainer's live ratio vs the held-out ratio",
        "Training triggers by kind",
        "Training reservoir: bytes",
        "Training reservoir: values",
        "Training CPU share (last hour)",
        "Registry publications by result",
        "Stored: producer's own / sidecar",
        "Stored per record",
        "Estimated cost saved per month",
        "Bytes per record: raw value, value out, as stored",
        "Records per batch",
        "Stored bytes per second: sidecar vs producer's own",
        "Output mode per partition",
        "Cost saved per month, per topic",
        "Relay input: kept beside its output",
        "Relay: bytes held less than the input alone",
        "Latest training run (registry)",
        "Memory: share of the container's limit",
    ):
        assert wanted in titles
    annotation_names = {a["name"] for a in _dashboard()["annotations"]["list"]}
    assert {"Dictionary activated", "Training promoted", "Drift"} <= annotation_names


def _defined_names() -> set[str]:
    """Every metric name the code defines: the relay's and proxy's `Metrics`, the forwarding
    proxy's own, the in-process producer's."""
    registry, application = CollectorRegistry(), CollectorRegistry()
    metrics = Metrics(registry)
    ForwardMetrics(registry, metrics.stored)
    FetchMetrics(registry)
    ProducerMetrics(application)
    return exported_names(generate_latest(registry).decode()) | exported_names(
        generate_latest(application).decode()
    )


def _known_names() -> set[str]:
    return _defined_names() | recorded_names(_groups()) | {"up"} | CLUSTER_METRICS


def test_every_dashboard_and_rule_query_uses_only_metrics_the_sidecar_exports() -> None:
    queries = dashboard_queries(_dashboard()) + rule_expressions(_groups())
    assert len(queries) > 30
    assert unknown_metrics(queries, _known_names()) == {}
    for variable in dashboard_variables(_dashboard()):
        assert variable.metric and metric_names(variable.metric) <= _known_names(), variable


def test_every_alert_and_annotation_condition_can_be_evaluated_without_its_comparison() -> None:
    conditions = [
        q for q in dashboard_queries(_dashboard()) + rule_expressions(_groups()) if q.condition
    ]
    assert len(conditions) >= 20
    for query in conditions:
        stripped = strip_conditions(query.expr)
        if query.source.startswith("alert"):
            assert stripped != query.expr, f"{query.source} compares nothing"
        assert metric_names(stripped) == metric_names(query.expr), query.source


def test_every_alert_has_a_severity_a_summary_and_a_description() -> None:
    alerts = [rule for group in _groups() for rule in group["rules"] if "alert" in rule]
    assert {rule["alert"] for rule in alerts} >= {
        "ZdictSidecarDown",
        "ZdictSidecarAbsent",
        "ZdictProduceErrors",
        "ZdictCompressionRatioDropped",
        "ZdictTrainingFailing",
        "ZdictLastTrainingFailed",
        "ZdictTrainingOverdue",
        "ZdictDictionaryStale",
        "ZdictNoPartitionAssigned",
        "ZdictRelayStalled",
        "ZdictConsumerLagGrowing",
        "ZdictRelayLatencyHigh",
        "ZdictCommitsFailing",
        "ZdictTransactionsAborting",
        "ZdictMemoryNearLimit",
        "ZdictRegistryPublishFailing",
        "ZdictTrainerNotUnique",
    }
    for rule in alerts:
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]


# -- labels, filters and the encode side --------------------------------------------------------

#: A selector of a metric the sidecar exports (or `up`), or of a series recorded from them
#: (`level:metric:operations`), with its matchers if it has any.
_SELECTOR = re.compile(
    r"(?<![\w:])((?:\w+:)?(?:zdict_\w+|process_\w+|up)(?::\w+)?)(?![\w:])(?!\s*\()(\{[^}]*\})?"
)


#: The variables that narrow every series of the dashboard, in the order each narrows the next.
_SCOPE = ("cluster", "namespace", "job", "instance")


def test_every_dashboard_query_is_filtered_by_the_cluster_namespace_job_and_instance() -> None:
    """was: no `namespace` or `cluster` variable: on a Prometheus shared by several, the same
    topic name in two namespaces was summed into one (issue 28, point 9). A recorded series is
    per topic (its rule sums the instances away): filtered by the topic instead."""
    recorded = 0
    for query in dashboard_queries(_dashboard()):
        for match in _SELECTOR.finditer(query.expr):
            matchers = match.group(2) or ""
            scope: tuple[str, ...] = _SCOPE
            if ":" in match.group(1):
                scope = (*_SCOPE[:3], "topic")
                recorded += 1
            for name in scope:
                assert f'{name}=~"${name}"' in matchers, (query.source, match.group())
    assert recorded >= 20


def test_each_scope_variable_lists_values_within_the_ones_before_it() -> None:
    variables = {v.name: v for v in dashboard_variables(_dashboard())}
    for i, name in enumerate((*_SCOPE, "topic")):
        selector = variables[name].metric or ""
        for before in _SCOPE[:i]:
            assert f'{before}=~"${before}"' in selector, (name, before)


def test_the_dashboard_never_reads_the_topic_from_a_label_the_operator_overwrites() -> None:
    """`namespace` is the Kubernetes namespace under the Prometheus Operator, not a topic: it
    is only ever matched against its own variable."""
    for query in dashboard_queries(_dashboard()):
        # A recorded series' level names the labels it keeps, `namespace` among them.
        expr = re.sub(r"\bnamespace_\w*:", "", query.expr)
        assert "namespace" not in expr.replace('namespace=~"$namespace"', ""), query.source
    for variable in dashboard_variables(_dashboard()):
        assert variable.label in {*_SCOPE, "topic"}, variable


def test_the_produce_errors_panel_plots_a_rate_not_a_raw_counter() -> None:
    (panel,) = [p for p in _dashboard()["panels"] if p["title"].startswith("Produce errors")]
    (target,) = panel["targets"]
    assert "rate(zdict_produce_errors_total{" in target["expr"]


def test_every_query_of_bytes_and_records_takes_the_encode_side_where_it_sums_savings() -> None:
    """A decoding relay's bytes go the other way: summed with an encoder's they read 1.0."""
    queries = [
        q
        for q in dashboard_queries(_dashboard()) + rule_expressions(_groups())
        if q.source.startswith(("panel", "record"))
    ]
    checked = 0
    for query in queries:
        for match in _SELECTOR.finditer(query.expr):
            if match.group(1) in {
                "zdict_input_bytes_total",
                "zdict_output_bytes_total",
                "zdict_records_total",
                "zdict_codec_batch_duration_seconds_sum",
                "zdict_codec_records_total",
            }:
                assert 'op="encode"' in (match.group(2) or ""), (query.source, match.group())
                checked += 1
    # The savings read the stored bytes (zdict_stored_*), which have no op: no relay decodes them.
    assert checked >= 7


def test_the_cost_estimate_is_priced_by_the_dashboards_constants() -> None:
    dashboard = _dashboard()
    constants = {v["name"]: v for v in dashboard["templating"]["list"] if v["type"] == "textbox"}
    assert set(constants) == {
        "storage_price",
        "transfer_price",
        "retention_days",
        "replicas",
        "transfers",
        "input_retention_days",
    }
    for variable in constants.values():
        assert float(variable["query"]) > 0, variable["name"]
    for title in ("Estimated cost saved per month", "Cost saved per month, per topic"):
        (panel,) = [p for p in dashboard["panels"] if p["title"] == title]
        (target,) = panel["targets"]
        assert all(f"${name}" in target["expr"] for name in constants if "input" not in name)
    (held,) = [p for p in dashboard["panels"] if p["title"].startswith("Relay: bytes held")]
    assert "$input_retention_days" in held["targets"][0]["expr"]
    # 1,000,000 B/s saved, 7 days on 3 replicas at $0.10, moved twice at $0.02 per GB:
    values = {name: v["query"] for name, v in constants.items()}
    priced = 1e6 / 1e9 * (7 * 86400 * 3 * 0.10 + 30 * 86400 * 2 * 0.02)
    assert priced == pytest.approx(181.44 + 103.68)
    assert values == {
        "storage_price": "0.10",
        "transfer_price": "0.02",
        "retention_days": "7",
        "replicas": "3",
        "transfers": "2",
        "input_retention_days": "1",
    }


# -- runbooks -------------------------------------------------------------------------------------


def _github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_every_alert_links_its_runbook_a_section_of_deploy_runbooks() -> None:
    readme = (ROOT / "deploy" / "RUNBOOKS.md").read_text()
    anchors = {
        _github_anchor(line.lstrip("#"))
        for line in readme.splitlines()
        if re.match(r"^#{1,6} ", line)
    }
    bases = set()
    for group in _groups():
        for rule in group["rules"]:
            if "alert" not in rule:
                continue
            base, _, anchor = rule["annotations"]["runbook_url"].partition("#")
            bases.add(base)
            assert anchor == rule["alert"].lower(), rule["alert"]
            assert anchor in anchors, f"deploy/RUNBOOKS.md has no section {rule['alert']}"
    (base,) = bases
    assert base.startswith("https://") and base.endswith("/deploy/RUNBOOKS.md")


# -- the dictionary activation annotation, evaluated by promtool -----------------------------------

#: The annotation's expression before issue 14: `changes()` of a series that is new for the first
#: dictionary of a topic, so the first activation was never shown.
_OLD_ACTIVATION = (
    "max by (namespace, dict_id, version) ("
    "(changes(zdict_dictionary_created_timestamp_seconds[2m]) > 0)"
    " * on (instance, namespace) group_left (dict_id, version) zdict_dictionary_info)"
)


def test_the_first_dictionary_activation_is_annotated_and_a_pod_joining_is_not(
    tmp_path: Path,
) -> None:
    (annotation,) = [
        a for a in _dashboard()["annotations"]["list"] if a.get("name") == "Dictionary activated"
    ]
    variables = {"cluster": ".*", "namespace": ".*", "job": "zdict-sidecar", "instance": ".*"}
    expr = substitute(annotation["expr"], {**variables, "topic": ".*"})
    a = 'job="zdict-sidecar", namespace="shop", instance="10.1.0.11:9400", topic="orders"'
    b = 'job="zdict-sidecar", namespace="shop", instance="10.1.0.12:9400", topic="orders"'
    active = 'dict_id="32768", version="1"'
    created = 'job="zdict-sidecar", instance="10.1.0.11:9400"'
    test = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    # a compresses orders without a dictionary, then with its first (10m);
                    # b joins at 20m with the topic's current dictionary.
                    {
                        "series": f'zdict_dictionary_info{{{a}, dict_id="0", version="0"}}',
                        "values": "1x9",
                    },
                    {"series": f"zdict_dictionary_info{{{a}, {active}}}", "values": "_x10 1x20"},
                    {"series": f"zdict_dictionary_info{{{b}, {active}}}", "values": "_x20 1x10"},
                    {
                        "series": "zdict_dictionary_created_timestamp_seconds"
                        f'{{{created}, namespace="orders"}}',
                        "values": "_x10 1700000000x20",
                    },
                ],
                "promql_expr_test": [
                    {
                        "expr": expr,
                        "eval_time": "11m",
                        "exp_samples": [{"labels": f'{{topic="orders", {active}}}', "value": 1}],
                    },
                    {"expr": expr, "eval_time": "21m", "exp_samples": []},
                    {"expr": expr, "eval_time": "15m", "exp_samples": []},
                    # was: nothing at the first activation
                    {"expr": _OLD_ACTIVATION, "eval_time": "11m", "exp_samples": []},
                ],
            }
        ],
    }
    path = tmp_path / "activation.test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    result = _run("test", "rules", str(path), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


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
    assert rules >= 27


@pytest.mark.slow
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


# -- recording rules, configurations, names ----------------------------------------------------


def test_every_recording_rule_is_used_by_a_panel_or_an_alert() -> None:
    """was: six of seven recording rules were used by nothing, the dashboard computing the
    same heavy expressions at every refresh (issue 28, point 3)."""
    users = dashboard_queries(_dashboard()) + [
        q for q in rule_expressions(_groups()) if q.source.startswith("alert")
    ]
    used = set().union(*(metric_names(q.expr) for q in users))
    recorded = recorded_names(_groups())
    assert len(recorded) >= 5
    assert recorded - used == set()


def _test_files() -> list[Path]:
    return sorted((PROMETHEUS / "tests").glob("*.test.yml"))


def test_every_series_the_promtool_tests_feed_is_one_the_code_defines() -> None:
    """A renamed metric cannot leave a test feeding the old name to rules that no longer read
    it (a silent test proves nothing then)."""
    known = _known_names() | {"process_start_time_seconds"}
    fed = {
        re.match(r"[\w:]+", series["series"]).group()  # type: ignore[union-attr]
        for path in _test_files()
        for group in yaml.safe_load(path.read_text())["tests"]
        for series in group["input_series"]
    }
    assert len(fed) > 20
    assert fed - known == set()


#: The configurations deploy/README.md and the README document, as silent.test.yml names them.
_CONFIGURATIONS = (
    "the relay",
    "decode mode",
    "the proxy (",
    "the proxy without training",
    "pass-through (`proxy",
    "pass-through (`run",
)


def test_every_alert_stays_silent_in_every_documented_configuration() -> None:
    """Each configuration's healthy series, every alert evaluated after its `for`: none fires
    (issue 28, point 4)."""
    path = PROMETHEUS / "tests" / "silent.test.yml"
    groups = yaml.safe_load(path.read_text())["tests"]
    alerts = {rule["alert"] for group in _groups() for rule in group["rules"] if "alert" in rule}
    for prefix in _CONFIGURATIONS:
        (group,) = [g for g in groups if g["name"].startswith(prefix)]
        cases = group["alert_rule_test"]
        assert {case["alertname"] for case in cases} == alerts, group["name"]
        assert all(case["exp_alerts"] == [] for case in cases), group["name"]
    result = _run("test", "rules", path.name, cwd=path.parent)
    assert result.returncode == 0, result.stdout + result.stderr
