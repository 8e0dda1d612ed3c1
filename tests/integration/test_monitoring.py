"""The monitoring, proven end to end: a real Prometheus scraping real sidecars on the real broker.

One set-up for the module (about a minute), with a registry topic of the module's own:

* three input topics: `dict` has a dictionary trained offline, `fresh` has none until the
  sidecar trains one itself, `plain` never gets one (it is compressed without a dictionary,
  small values and tombstones passed through);
* generated events flow into all three for the whole module;
* sidecar A (`python -m sidecar run`) relays `dict` and `fresh` and trains in-process: its
  first training of `fresh` is promoted, published to the registry and activated, so the
  training metrics (runs, triggers, CPU, the live ratio, the reservoir, registry publications)
  have data. While Prometheus watches, `zdict-sidecar train --publish` promotes a better
  dictionary for `dict` through the registry and A switches to it, as in production;
* sidecar B relays `plain` with `--no-training` (as a deployment that retrains elsewhere):
  nobody trains `plain`, and `zdict-sidecar train --publish` (what the retraining CronJob runs)
  fails on it, so ZdictNoDictionary and ZdictLastTrainingFailed are pending for it (not
  ZdictTrainerNotUnique: a process that never trains exports no `zdict_trainer` series);
* Prometheus (Debian's package, /usr/bin/prometheus) runs from deploy/prometheus/prometheus.yml
  with both sidecars as the targets of job `zdict-sidecar`, a 1 s scrape and evaluation
  interval, its own storage directory and port, and the real rule files. Its scrape config
  relabels the targets as the Prometheus Operator does for a ServiceMonitor (`namespace`,
  `pod`, `service`, `container`, `endpoint` target labels, honor_labels off), so a metric label
  of one of those names would come out renamed `exported_<name>`.

Drift never triggers a run here (ZDICT_TRAINING__DRIFT_TOLERANCE=0.9) and the next scheduled
run is an hour away: the dictionaries the set-up activates are the only ones, so the tests know
which the annotations must name.

Then every PromQL expression of the dashboard and of the rule files is sent to Prometheus's HTTP
API with Grafana's template variables substituted (`$topic` = the three topics, `$job` =
`zdict-sidecar`, `$cluster`, `$namespace` and `$instance` = All, the cost constants at their
defaults, `$__rate_interval` = 10s, `$__range` = 1m, `$__interval` = 2s) and must return series.
Alert and annotation conditions are evaluated with their `OP NUMBER` comparisons stripped
(tests/deploy/promql.py says why), the annotations, which mark events, over the whole time
Prometheus has been scraping. The one exception is a metric that only has series after a failure:
`zdict_produce_errors_total` (no delivery fails here); its queries must still be accepted by
Prometheus, and the exposition must declare it. Nothing is skipped: without Prometheus or the
broker these tests fail.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry, generate_latest

from deploy.monitoring.dashboard import COST_VARIABLES
from sidecar.bench.events import generate
from sidecar.proxy.metrics import ForwardMetrics
from sidecar.serde.metrics import ProducerMetrics
from sidecar.tools.report import POINTS
from tests.deploy.promql import (
    CLUSTER_METRICS,
    Query,
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

from .launch import StartSidecar
from .process import Sidecar
from .prometheus_server import JOB, K8S_NAMESPACE, PROMETHEUS_DIR, ROOT, PrometheusServer
from .topics import MakeTopic
from .training import train_dictionary
from .waiting import wait_until

DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "zdict-sidecar.json"
#: Metrics whose series exist only after a failure that these tests do not cause.
FAILURE_ONLY = frozenset({"zdict_produce_errors_total", "zdict_produce_errors_created"})
#: Metrics without series here: the failure-only ones, and kube-state-metrics' (no cluster).
NO_SERIES_HERE = FAILURE_ONLY | CLUSTER_METRICS
OPERATOR_LABELS = ("namespace", "pod", "service", "container", "endpoint")
SCRAPES_BEFORE_CHECKING = 15
#: Sidecar A trains in-process within seconds: a first training on 2,000 values with one
#: dictionary size and two levels, no speed budget (the choice must not depend on machine load),
#: the registry followed every second, the live ratio over 4 s. Drift cannot trigger a run (the
#: live ratio would have to fall to a tenth): the set-up's activations are the only ones.
TRAINING_ENV = {
    "ZDICT_SAMPLING__MIN_MESSAGES": "2000",
    "ZDICT_TRAINING__DICT_SIZES": "[8192]",
    "ZDICT_TRAINING__LEVELS": "[1, 3]",
    "ZDICT_TRAINING__BUDGET_US_PER_MESSAGE": "0",
    "ZDICT_TRAINING__BUDGET_MB_PER_S": "0",
    "ZDICT_TRAINING__DRIFT_WINDOW": "4",
    "ZDICT_TRAINING__DRIFT_MIN_MESSAGES": "1000",
    "ZDICT_TRAINING__DRIFT_TOLERANCE": "0.9",
    "ZDICT_REGISTRY__FOLLOW_INTERVAL": "1",
    # The default output mode, as deployed: full batches of a partition go raw.
    "ZDICT_CODEC__OUTPUT_MODE": "auto",
}


class SteadyTraffic(threading.Thread):
    """Produces generated events to each topic at its rate (records/s) until stopped.

    In the `tombstones` topics one record in 50 is a tombstone, so the pass-through outcomes
    count more than small values.
    """

    def __init__(self, bootstrap: str, rates: dict[str, int], tombstones: set[str]) -> None:
        super().__init__(daemon=True, name="steady-traffic")
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.rates = rates
        self.tombstones = tombstones
        self.sent = dict.fromkeys(rates, 0)
        self.stopped = threading.Event()
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            events = {topic: generate("product_viewed", 10_000_000, seed=7) for topic in self.rates}
            start = time.monotonic()
            while not self.stopped.is_set():
                elapsed = time.monotonic() - start
                for topic, rate in self.rates.items():
                    while self.sent[topic] < elapsed * rate:
                        value = next(events[topic])
                        tombstone = topic in self.tombstones and self.sent[topic] % 50 == 0
                        self.producer.produce(topic, None if tombstone else value, key=value[16:24])
                        self.sent[topic] += 1
                self.producer.poll(0)
                time.sleep(0.05)
            self.producer.flush(30)
        except BaseException as exc:  # reported by stop(), not lost in the thread
            self.failure = exc

    def stop(self) -> None:
        self.stopped.set()
        self.join(60)
        assert self.failure is None, f"the traffic thread failed: {self.failure!r}"


@dataclass
class Stack:
    """What the module's set-up started, for the tests to query."""

    prometheus: PrometheusServer
    relay: Sidecar  # A: `dict` and `fresh`, training
    plain_relay: Sidecar  # B: `plain`, not training
    dict_topic: str
    plain_topic: str
    fresh_topic: str
    first_id: int
    second_id: int
    fresh_training: dict[str, Any]  # A's training_finished line for `fresh`
    work_dir: Path
    started: float  # when Prometheus started scraping (Unix time)

    @property
    def topics(self) -> tuple[str, str, str]:
        return (self.dict_topic, self.plain_topic, self.fresh_topic)

    @property
    def variables(self) -> dict[str, str]:
        """Grafana's template variables as Grafana would send them for "All"."""
        return {
            "topic": f"({'|'.join(self.topics)})",
            "cluster": ".*",
            "namespace": ".*",
            "job": f"({JOB})",
            "instance": ".*",
            "__rate_interval": "10s",
            "__interval": "2s",
            "__range": "1m",
            "__range_s": "60",
            **{name: default for name, _, default, _ in COST_VARIABLES},
        }


def _cli(registry_topic: str, *args: str, exit_code: int = 0) -> str:
    """`python -m sidecar *args` against the module's registry topic; its stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZDICT_")}
    env["ZDICT_REGISTRY__TOPIC"] = registry_topic
    result = subprocess.run(
        [sys.executable, "-m", "sidecar", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == exit_code, result.stdout + result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def stack(
    kafka_bootstrap: str,
    make_topic: MakeTopic,
    module_sidecar: StartSidecar,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    work_dir = tmp_path_factory.mktemp("monitoring")
    registry_topic = f"_zdict_dictionaries-{uuid.uuid4().hex}"  # the module's own
    dict_topic = make_topic(partitions=2, name_prefix="zdict-it-dict")
    plain_topic = make_topic(partitions=1, name_prefix="zdict-it-plain")
    fresh_topic = make_topic(partitions=1, name_prefix="zdict-it-fresh")

    # `dict` starts with a dictionary trained offline on a small sample; sidecar A publishes it
    # to the registry when it starts (it adopts the local store's active dictionary).
    store = work_dir / "dictionaries-a"
    no_speed_budget = (
        "--budget-us",
        "0",
        "--budget-mb-per-s",
        "0",
    )  # the choice must not depend on machine load
    small = list(generate("product_viewed", 1_500, seed=901))
    first_id, _ = train_dictionary(store, dict_topic, small, work_dir, no_speed_budget)

    traffic = SteadyTraffic(
        kafka_bootstrap, {dict_topic: 1500, plain_topic: 300, fresh_topic: 500}, {plain_topic}
    )
    traffic.start()
    group = f"zdict-it-monitoring-{uuid.uuid4().hex[:8]}"
    registry = {"ZDICT_REGISTRY__TOPIC": registry_topic}
    relay = module_sidecar(
        "run",
        *("--input-topic", dict_topic, "--input-topic", fresh_topic),
        "--create-topics",
        *("--dictionaries", str(store), "--group-id", f"{group}-a"),
        # The traffic starts first: `fresh` must not be held back as a backlog (its held records
        # would be a latency alert of their own); it trains from live samples, as stated below.
        env={**TRAINING_ENV, **registry, "ZDICT_RELAY__BACKLOG_WAIT": "0"},
        name="relay-a",
    )
    plain_relay = module_sidecar(
        "run",
        *("--input-topic", plain_topic, "--create-topics", "--no-training"),
        *("--dictionaries", str(work_dir / "dictionaries-b"), "--group-id", f"{group}-b"),
        env=registry,
        name="relay-b",
    )
    prometheus: PrometheusServer | None = None
    try:
        for sidecar in (relay, plain_relay):
            sidecar.wait_for_event("partitions_assigned", timeout=60)
        ports = [sidecar.metrics_port for sidecar in (relay, plain_relay)]
        assert None not in ports
        prometheus = prom = PrometheusServer(work_dir, [port for port in ports if port])
        started = time.time()
        prom.wait_ready()
        scrapes = f'count_over_time(up{{job="{JOB}"}}[1m])'
        wait_until(
            lambda: len(prom.result(f"{scrapes} >= 5")) == 2, 60, "five scrapes of each sidecar"
        )
        # A better dictionary for `dict`, trained on a larger sample and promoted through the
        # registry by the CLI, as the retraining CronJob does; A follows the registry. The
        # sample is the traffic's own stream (seed 7), as the CronJob samples the topic: one
        # trained on another seed's ids compresses the traffic at ~0.8 of its held-out ratio,
        # right at ZdictCompressionRatioDropped's threshold.
        large = work_dir / "train-large.ndjson"
        large.write_bytes(b"".join(e + b"\n" for e in generate("product_viewed", 8_000, seed=7)))
        report = json.loads(
            _cli(
                registry_topic,
                "train",
                *("--input", str(large), "--namespace", dict_topic, *no_speed_budget),
                *("--dictionaries", str(work_dir / "dictionaries-cli"), "--publish", "--json"),
            )
        )
        assert report["decision"] == "promoted", report
        second_id = int(report["stored_id"])
        assert second_id != first_id
        relay.wait_for_event(
            "dictionary_loaded", timeout=30, where=lambda e: e.get("dict_id") == second_id
        )
        # The retraining CronJob's run for `plain` fails (15 records, fewer than
        # training.min_samples, 20): the CLI exits 1 and records the failed run in the registry,
        # which B follows and exports.
        _cli(
            registry_topic,
            "train",
            *("--topic", plain_topic, "--sample", "15", "--publish"),
            *("--dictionaries", str(work_dir / "dictionaries-cron")),
            exit_code=1,
        )
        # A's own first training of `fresh` (it starts as soon as 2,000 values are sampled).
        relay.wait_for_event(
            "training_finished",
            timeout=180,
            where=lambda e: e.get("namespace") == fresh_topic,
        )
        trainings = relay.events("training_finished")
        assert [e["namespace"] for e in trainings] == [fresh_topic], trainings
        fresh_training = trainings[0]
        assert fresh_training["decision"] == "promoted", fresh_training
        ready_when = [
            f"{scrapes} >= {SCRAPES_BEFORE_CHECKING}",
            f'zdict_dictionary_info{{dict_id="{second_id}"}}',
            f'zdict_dictionary_info{{dict_id="{fresh_training["stored_id"]}"}}',
            f'zdict_live_compression_factor{{topic="{dict_topic}"}}',
            f'zdict_live_compression_factor{{topic="{fresh_topic}"}}',
            f'zdict_training_runs_total{{topic="{fresh_topic}", result="promoted"}} > 0',
            f'zdict_last_training_timestamp_seconds{{topic="{dict_topic}", trigger="manual"}}',
            f'zdict_last_training_timestamp_seconds{{topic="{fresh_topic}", trigger="first"}}',
            f'zdict_last_training_timestamp_seconds{{topic="{plain_topic}", result="failed"}}',
            # the rules have looked at it (the alerts test reads their state once)
            'ALERTS{alertname="ZdictLastTrainingFailed", alertstate="pending"}',
            "zdict_consumer_lag_records",
            "sum(zdict_relay_latency_seconds_count) > 0",
            "sum(rate(zdict_stored_records_total[10s])) > 0",
            "namespace_job_topic:zdict_input_bytes:rate5m",
            "namespace_job_topic:zdict_codec_seconds_per_record:rate5m",
            "namespace_job_topic:zdict_stored_records:rate5m",
            "namespace_job_topic:zdict_stored_saved_bytes:rate5m",
            "namespace_job_topic_le:zdict_relay_latency_seconds_bucket:rate5m",
            "namespace_job_topic:zdict_consumer_lag_records:sum",
        ]
        for expr in ready_when:
            wait_until(partial(prom.result, expr), 90, f"Prometheus to return {expr}")
        yield Stack(
            prom,
            relay,
            plain_relay,
            dict_topic,
            plain_topic,
            fresh_topic,
            first_id,
            second_id,
            fresh_training,
            work_dir,
            started,
        )
    finally:
        traffic.stop()
        if prometheus is not None:
            prometheus.close()
        for sidecar in (relay, plain_relay):
            if sidecar.running():
                assert sidecar.stop() == 0, sidecar.tail()


# -- evaluating the files ------------------------------------------------------------------------


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def _rule_groups() -> list[Any]:
    return [
        group
        for name in ("rules.yml", "alerts.yml")
        for group in load_rule_groups((PROMETHEUS_DIR / name).read_text())
    ]


def _problems(stack: Stack, queries: list[Query]) -> list[str]:
    """Each query Prometheus refuses, or answers with no series (failure-only metrics aside).

    An annotation marks events, so it is asked over the whole time Prometheus has scraped
    (its comparison stripped too: the drift and the restart it marks do not happen here)."""
    problems: list[str] = []
    for query in queries:
        expr = _evaluable(query, stack.variables)
        if query.source.startswith("annotation"):
            body = stack.prometheus.api(
                "query_range",
                query=expr,
                start=f"{stack.started:.3f}",
                end=f"{time.time():.3f}",
                step="1",
            )
        else:
            body = stack.prometheus.query(expr)
        if body["status"] != "success":
            problems.append(f"{query.source}: refused: {body.get('error')}\n    {expr}")
        elif not body["data"]["result"] and not metric_names(expr) & NO_SERIES_HERE:
            problems.append(f"{query.source}: no series\n    {expr}")
    return problems


def _evaluable(query: Query, variables: dict[str, str]) -> str:
    expr = substitute(query.expr, variables)
    return strip_conditions(expr) if query.condition else expr


def test_every_dashboard_query_returns_series_from_prometheus_scraping_the_sidecar(
    stack: Stack,
) -> None:
    queries = dashboard_queries(_dashboard())
    assert len(queries) >= 30
    problems = _problems(stack, queries)
    assert not problems, "\n".join(problems)


def test_every_range_panel_has_points_over_the_last_half_minute(stack: Stack) -> None:
    problems: list[str] = []
    end = time.time()
    for panel in _dashboard()["panels"]:
        for target in panel.get("targets", []):
            if not target.get("range"):
                continue
            expr = substitute(target["expr"], stack.variables)
            body = stack.prometheus.api(
                "query_range", query=expr, start=f"{end - 30:.3f}", end=f"{end:.3f}", step="2"
            )
            points = sum(len(s["values"]) for s in body.get("data", {}).get("result", []))
            if body["status"] != "success" or (
                not points and not metric_names(expr) <= FAILURE_ONLY
            ):
                problems.append(f"{panel['title']} {target['refId']}: {points} points\n    {expr}")
    assert not problems, "\n".join(problems)


def test_every_alert_and_recording_rule_evaluates_to_series_from_the_sidecar(
    stack: Stack,
) -> None:
    queries = rule_expressions(_rule_groups())
    problems = _problems(stack, queries)
    assert not problems, "\n".join(problems)
    for name in recorded_names(_rule_groups()):
        assert stack.prometheus.result(name), f"Prometheus recorded no {name}"


def test_prometheus_loaded_every_rule_and_evaluates_them_without_errors(stack: Stack) -> None:
    body = stack.prometheus.api("rules")
    assert body["status"] == "success"
    loaded = {rule["name"]: rule for group in body["data"]["groups"] for rule in group["rules"]}
    expected = {
        rule.get("alert") or rule["record"] for group in _rule_groups() for rule in group["rules"]
    }
    assert set(loaded) == expected
    unhealthy = {
        name: rule.get("lastError") for name, rule in loaded.items() if rule["health"] != "ok"
    }
    assert not unhealthy


def test_no_alert_fires_while_healthy_and_only_the_untrained_plain_topic_has_pending_ones(
    stack: Stack,
) -> None:
    alerts = stack.prometheus.api("alerts")["data"]["alerts"]
    firing = [a["labels"] for a in alerts if a["state"] == "firing"]
    assert not firing
    pending = {(a["labels"]["alertname"], a["labels"].get("topic")) for a in alerts}
    # Sidecar B relays `plain` with --no-training: no dictionary, nobody to train one, and the
    # CLI's (the CronJob's) run failed.
    # Alerts about a topic keep the target's (Kubernetes) namespace for routing.
    assert {a["labels"].get("namespace") for a in alerts} == {K8S_NAMESPACE}
    assert pending == {
        ("ZdictNoDictionary", stack.plain_topic),
        ("ZdictLastTrainingFailed", stack.plain_topic),
    }


def test_every_dictionary_activation_is_annotated_the_first_ones_included(stack: Stack) -> None:
    """Over the time Prometheus has scraped: `dict`'s dictionary as Prometheus first saw it, the
    one the CLI promoted, and `fresh`'s first (the old annotation showed only the CLI's: a
    first dictionary's series is new, and changes() of a new series is 0)."""
    (annotation,) = [
        a for a in _dashboard()["annotations"]["list"] if a["name"] == "Dictionary activated"
    ]
    expr = substitute(annotation["expr"], stack.variables)
    body = stack.prometheus.api(
        "query_range", query=expr, start=f"{stack.started:.3f}", end=f"{time.time():.3f}", step="1"
    )
    assert body["status"] == "success", body
    marked = {(s["metric"]["topic"], s["metric"]["dict_id"]) for s in body["data"]["result"]}
    assert marked == {
        (stack.dict_topic, str(stack.first_id)),
        (stack.dict_topic, str(stack.second_id)),
        (stack.fresh_topic, str(stack.fresh_training["stored_id"])),
    }


def _value(stack: Stack, expr: str) -> float:
    """The one sample `expr` evaluates to now."""
    (sample,) = stack.prometheus.result(expr)
    return float(sample["value"][1])


def test_prometheus_saw_the_sidecar_train_fresh_once_publish_it_and_judge_its_live_ratio(
    stack: Stack,
) -> None:
    fresh = f'topic="{stack.fresh_topic}"'
    run = stack.fresh_training
    triggers = stack.prometheus.result(f"zdict_training_triggers_total{{{fresh}}}")
    assert {s["metric"]["trigger"]: float(s["value"][1]) for s in triggers} == {
        "first": 1.0,
        "growth": 0.0,
        "scheduled": 0.0,
        "drift": 0.0,
    }
    assert _value(stack, f'zdict_training_runs_total{{{fresh}, result="promoted"}}') == 1
    assert _value(stack, f"zdict_training_duration_seconds_count{{{fresh}}}") == 1
    # The run's CPU time is the child's, as logged (rounded there to the millisecond).
    cpu = _value(stack, f"zdict_training_cpu_seconds_total{{{fresh}}}")
    assert cpu > 0
    assert cpu == pytest.approx(run["cpu_seconds"], abs=0.001)
    assert _value(stack, 'sum(zdict_registry_publications_total{result="ok"})') == 1
    assert _value(stack, 'sum(zdict_registry_publications_total{result="failed"})') == 0
    # A holds partition 0 of `dict` and `fresh` and trains them; B trains nothing, so it has no
    # zdict_trainer series (was: 0 for `plain`, which ZdictTrainerNotUnique read as "nobody
    # trains it" in a deployment that trains elsewhere).
    trainers = {
        (s["metric"]["topic"], s["metric"]["instance"]): float(s["value"][1])
        for s in stack.prometheus.result("zdict_trainer")
    }
    a = f"127.0.0.1:{stack.relay.metrics_port}"
    assert trainers == {
        (stack.dict_topic, a): 1.0,
        (stack.fresh_topic, a): 1.0,
    }
    # A dictionary trained on the stream it compresses: the live ratio is of the order of its
    # held-out ratio (drift would be a tenth of it here); the reservoir keeps sampling.
    heldout = _value(stack, f"zdict_dictionary_heldout_compression_factor{{{fresh}}}")
    assert heldout == pytest.approx(run["heldout_ratio"], rel=1e-6)
    assert (
        0.7 * heldout < _value(stack, f"zdict_live_compression_factor{{{fresh}}}") < 1.3 * heldout
    )
    assert _value(stack, f"zdict_sample_records{{{fresh}}}") >= 2000
    assert _value(stack, f"zdict_sample_bytes{{{fresh}}}") > 2000 * 100


def test_the_dashboard_variables_list_the_job_its_instances_and_the_relayed_topics(
    stack: Stack,
) -> None:
    instances = {f"127.0.0.1:{s.metrics_port}" for s in (stack.relay, stack.plain_relay)}
    wanted = {
        "cluster": set(),  # no cluster label here: All (.*) matches series without it
        "namespace": {K8S_NAMESPACE},
        "job": {JOB},
        "instance": instances,
        "topic": set(stack.topics),
    }
    for variable in dashboard_variables(_dashboard()):
        assert variable.metric
        selector = substitute(variable.metric, stack.variables)
        body = stack.prometheus.api(f"label/{variable.label}/values", **{"match[]": selector})
        assert body["status"] == "success", body
        assert set(body["data"]) == wanted[variable.name], variable


def test_every_metric_the_dashboard_and_rules_query_is_in_the_sidecars_exposition(
    stack: Stack,
) -> None:
    status, body = stack.relay.http_get("/metrics")
    assert status == 200
    known = exported_names(body.decode()) | recorded_names(_rule_groups()) | {"up"}
    known |= CLUSTER_METRICS
    # The output mode panel reads the in-process producer's gauge and the proxy's batch counts
    # too, which no relay exports: their families as those processes' registries declare them.
    application = CollectorRegistry()
    ProducerMetrics(application)
    proxy = CollectorRegistry()
    ForwardMetrics(proxy)
    known |= exported_names(generate_latest(proxy).decode())
    known |= exported_names(generate_latest(application).decode())
    queries = dashboard_queries(_dashboard()) + rule_expressions(_rule_groups())
    assert unknown_metrics(queries, known) == {}
    assert known >= FAILURE_ONLY


def test_under_operator_target_labels_the_topic_survives_and_nothing_is_renamed(
    stack: Stack,
) -> None:
    """With the Operator's target labels and honor_labels off, a metric label named like one
    of them would be stored as exported_<name> (the topic in exported_namespace)."""
    for label in OPERATOR_LABELS:
        renamed = stack.prometheus.result(f'{{__name__=~"zdict_.+", exported_{label}!=""}}')
        assert renamed == [], label
    series = stack.prometheus.result('zdict_records_total{op="encode"}')
    assert {s["metric"]["namespace"] for s in series} == {K8S_NAMESPACE}
    assert {s["metric"]["topic"] for s in series} == set(stack.topics)
    pods = {s["metric"]["pod"] for s in series}
    assert pods == {f"orders-producer-{s.metrics_port}" for s in (stack.relay, stack.plain_relay)}
    # The recording rules keep both: the Kubernetes namespace and the topic.
    ratios = stack.prometheus.result("namespace_job_topic:zdict_input_bytes:rate5m")
    assert {(r["metric"]["namespace"], r["metric"]["topic"]) for r in ratios} == {
        (K8S_NAMESPACE, topic) for topic in stack.topics
    }


def test_the_output_is_stored_at_its_value_bytes_plus_framing_per_record(stack: Stack) -> None:
    """From the producer's batch statistics: each output record costs the broker at most its
    value (frame and zd header) plus its share of the record batch and its own framing and key;
    the relay batch-compresses with zstd by default, so usually less."""
    for topic in (stack.dict_topic, stack.fresh_topic, stack.plain_topic):
        selector = f'{{topic="{topic}", path="relay"}}'
        stored = _value(
            stack,
            f"sum(rate(zdict_stored_bytes_total{selector}[30s])) "
            f"/ sum(rate(zdict_stored_records_total{selector}[30s]))",
        )
        value_out = _value(
            stack,
            f'sum(rate(zdict_output_bytes_total{{topic="{topic}", op="encode"}}[30s])) '
            f'/ sum(rate(zdict_records_total{{topic="{topic}", op="encode"}}[30s]))',
        )
        # An 8-byte key, ~8 bytes of record framing, and a 61-byte batch header shared by the
        # records of a batch, above; what batch zstd finds across records, below.
        assert 0.2 * value_out < stored < value_out + 100, (topic, stored, value_out)
        per_batch = _value(
            stack,
            f"sum(rate(zdict_stored_records_total{selector}[30s])) "
            f"/ sum(rate(zdict_stored_batches_total{selector}[30s]))",
        )
        assert per_batch >= 1


def test_the_registry_s_latest_training_runs_are_exported_the_cli_s_included(
    stack: Stack,
) -> None:
    """The retraining CronJob runs `zdict-sidecar train --publish`: its outcome reaches
    Prometheus through the registry record every sidecar follows."""
    runs = {
        (s["metric"]["topic"], s["metric"]["trigger"], s["metric"]["result"])
        for s in stack.prometheus.result("zdict_last_training_timestamp_seconds")
    }
    assert runs == {
        (stack.dict_topic, "manual", "promoted"),
        (stack.fresh_topic, "first", "promoted"),
        (stack.plain_topic, "manual", "failed"),
    }
    finished = _value(
        stack, f'zdict_last_training_timestamp_seconds{{topic="{stack.fresh_topic}"}}'
    )
    assert finished == pytest.approx(stack.fresh_training["finished_at"], abs=1e-3)


def test_the_containers_memory_and_its_limit_are_exported_for_the_memory_alert(
    stack: Stack,
) -> None:
    (limit,) = stack.prometheus.result(
        f'zdict_memory_limit_bytes{{instance="127.0.0.1:{stack.relay.metrics_port}"}}'
    )
    (working_set,) = stack.prometheus.result(
        f'zdict_memory_working_set_bytes{{instance="127.0.0.1:{stack.relay.metrics_port}"}}'
    )
    assert float(working_set["value"][1]) > 10 * 2**20
    assert float(limit["value"][1]) > float(working_set["value"][1])


# -- the report ----------------------------------------------------------------------------------


def _report(stack: Stack, *args: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "sidecar", "report", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary: dict[str, Any] = json.loads(result.stdout)
    return summary


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert data.rstrip(b"\x00")[-8:-4] == b"IEND", "truncated PNG"
    return width, height


def test_report_from_prometheus_draws_a_png_and_its_numbers_are_prometheus_numbers(
    stack: Stack,
) -> None:
    out = stack.work_dir / "report-prometheus.png"
    # Ending the range 3 s back (scrapes every 1 s, 1 s timeout): every sample stamped before
    # the end is stored when the report queries, so the test's own queries at that end agree.
    end = time.time() - 3.0
    summary = _report(
        stack,
        "--prometheus",
        stack.prometheus.url,
        "--end",
        f"{end:.3f}",
        "--namespace",
        stack.dict_topic,
        "--range",
        "1m",
        "--rate-window",
        "10s",
        "--out",
        str(out),
    )
    assert _png_size(out) == (1400, 1000)
    assert out.stat().st_size > 30_000  # curves and text, not an empty canvas

    at = summary["end"]
    assert at == pytest.approx(end, abs=1e-3)
    selector = f'{{topic=~"{stack.dict_topic}", op="encode"}}'
    for field, metric in (("input_bytes", "input"), ("output_bytes", "output")):
        (sample,) = stack.prometheus.query(
            f"sum(increase(zdict_{metric}_bytes_total{selector}[60s]))", at
        )["data"]["result"]
        assert summary[field] == pytest.approx(float(sample["value"][1]), rel=1e-12)
    assert summary["ratio"] == pytest.approx(summary["input_bytes"] / summary["output_bytes"])
    # Saved against the producer's codec: the stored bytes and the producer's own, per topic.
    topic = f'{{topic=~"{stack.dict_topic}"}}'
    for field, metric in (("stored_bytes", "bytes"), ("without_bytes", "without_sidecar_bytes")):
        (sample,) = stack.prometheus.query(
            f"sum(increase(zdict_stored_{metric}_total{topic}[60s]))", at
        )["data"]["result"]
        assert summary[field] == pytest.approx(float(sample["value"][1]), rel=1e-12)
    assert summary["saved_bytes"] == pytest.approx(
        summary["without_bytes"] - summary["stored_bytes"]
    )
    assert set(summary["topics"]) == {stack.dict_topic}
    # saved per second: the mean of the curve Prometheus returns for the range
    step = max(1.0, 60 / POINTS)
    saved = (
        f"sum(sum by (topic) (rate(zdict_stored_without_sidecar_bytes_total{topic}[10s])) "
        f"- sum by (topic) (rate(zdict_stored_bytes_total{topic}[10s])))"
    )
    body = stack.prometheus.api(
        "query_range",
        query=saved,
        start=f"{summary['start']:.3f}",
        end=f"{at:.3f}",
        step=f"{step:g}",
    )
    (curve,) = body["data"]["result"]
    values = [float(v) for _, v in curve["values"]]
    assert len(values) >= 10
    assert summary["saved_per_second"] == pytest.approx(sum(values) / len(values), rel=1e-9)
    assert summary["saved_per_month"] == pytest.approx(summary["saved_per_second"] * 30 * 86400)

    # The raw-mode truth: at 1,500 records/s the relay's batches fill past the dictionary's
    # crossover and its partitions go raw (output mode auto), their records counted at their
    # size in and out: the batch zstd's saving is the producer's, so the value ratio is the
    # frames' diluted towards 1, by a raw share that follows each partition's fill (so the
    # one-minute ratio is no longer the sidecar's ratio since it started, give or take noise).
    # What the dictionary achieves on these events is the live ratio, measured on the raw
    # records' shadow sample.
    counters = stack.relay.metrics()
    labels = frozenset({("topic", stack.dict_topic), ("op", "encode")})
    own_ratio = (
        counters[("zdict_input_bytes_total", labels)]
        / counters[("zdict_output_bytes_total", labels)]
    )
    assert counters[("zdict_records_total", frozenset({*labels, ("outcome", "raw")}))] > 0
    assert 1.0 <= summary["ratio"] < 3.0
    assert 1.0 <= own_ratio < 3.0
    (live,) = stack.prometheus.result(
        f'last_over_time(zdict_live_compression_factor{{topic="{stack.dict_topic}"}}[60s])'
    )
    assert 1.3 < float(live["value"][1]) < 3.0


def test_report_from_the_sidecars_own_metrics_sums_its_counters(stack: Stack) -> None:
    def input_total() -> float:
        return sum(
            value
            for (name, _), value in stack.relay.metrics().items()
            if name == "zdict_input_bytes_total"
        )

    out = stack.work_dir / "report-metrics.png"
    before = input_total()
    summary = _report(
        stack,
        "--metrics",
        f"http://127.0.0.1:{stack.relay.metrics_port}/metrics",
        "--out",
        str(out),
    )
    after = input_total()
    assert before <= summary["input_bytes"] <= after
    assert summary["stored_bytes"] > 0
    assert summary["saved_bytes"] == summary["without_bytes"] - summary["stored_bytes"]
    assert set(summary["topics"]) == {stack.dict_topic, stack.fresh_topic}
    width, height = _png_size(out)
    assert (width, height) == (1400, 1000)
    assert out.stat().st_size > 20_000
