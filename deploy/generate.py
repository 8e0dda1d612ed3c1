#!/usr/bin/env python3
"""Generate the Grafana dashboard and the Kubernetes PrometheusRule: `make dashboard`.

Writes, from this code and deploy/prometheus/{rules,alerts}.yml:

* deploy/grafana/dashboards/zdict-sidecar.json: the dashboard (uid `zdict-sidecar`, every query
  on the data source variable `${datasource}`);
* deploy/k8s/prometheusrule.yaml: the same recording and alert rules for prometheus-operator.

Both outputs are committed; the tests compare them with what this script generates, so edit
this file (or the rule files) and run `make dashboard`, never the outputs. `--check` exits 1
when a committed output differs.

Queries use Grafana's `$__rate_interval` for rates, `$__range` for totals over the time range,
and the variables `$namespace` (multi-value, All = `.*`) and `$job` (the Prometheus jobs that
scrape a sidecar; process metrics and `up` are filtered by it).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parent
DASHBOARD_PATH = DEPLOY / "grafana" / "dashboards" / "zdict-sidecar.json"
PROMETHEUS_RULE_PATH = DEPLOY / "k8s" / "prometheusrule.yaml"
RULE_FILES = (DEPLOY / "prometheus" / "rules.yml", DEPLOY / "prometheus" / "alerts.yml")

DASHBOARD_UID = "zdict-sidecar"
DS: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}
NS = 'namespace=~"$namespace"'
JOB = 'job=~"$job"'
RATE = "$__rate_interval"
#: "Per month" in the savings estimate: 30 days.
MONTH_SECONDS = 30 * 86_400

Json = dict[str, Any]

#: A value mapping: NaN (no run in the time range, so 0 / 0) reads "no run".
NO_RUN: Json = {"type": "special", "options": {"match": "nan", "result": {"text": "no run"}}}


# -- queries -------------------------------------------------------------------------------------

IN = f"zdict_input_bytes_total{{{NS}}}"
OUT = f"zdict_output_bytes_total{{{NS}}}"
MESSAGES = f"zdict_messages_total{{{NS}}}"


def _sum_rate(metric: str, window: str = RATE, by: str = "") -> str:
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (rate({metric}[{window}]))"


def _quantile(q: float, histogram: str) -> str:
    return f"histogram_quantile({q}, sum by (le) (rate({histogram}_bucket{{{NS}}}[{RATE}])))"


RATIO = f"{_sum_rate(IN)} / {_sum_rate(OUT)}"
SAVED_PER_SECOND = f"{_sum_rate(IN)} - {_sum_rate(OUT)}"
SAVED_IN_RANGE = f"sum(increase({IN}[$__range])) - sum(increase({OUT}[$__range]))"
SAVED_PER_MONTH = f"({_sum_rate(IN, '1h')} - {_sum_rate(OUT, '1h')}) * {MONTH_SECONDS}"
PASSED_THROUGH = (
    f'1 - sum(rate(zdict_messages_total{{{NS}, outcome="compressed"}}[{RATE}])) '
    f"/ {_sum_rate(MESSAGES)}"
)


# -- panels --------------------------------------------------------------------------------------


def target(expr: str, legend: str = "", ref: str = "A", instant: bool = False) -> Json:
    """One Prometheus query of a panel."""
    return {
        "datasource": DS,
        "expr": expr,
        "legendFormat": legend or "__auto",
        "refId": ref,
        "range": not instant,
        "instant": instant,
    }


def _targets(queries: Sequence[tuple[str, str]], instant: bool = False) -> list[Json]:
    return [
        target(expr, legend, chr(ord("A") + i), instant) for i, (expr, legend) in enumerate(queries)
    ]


def _thresholds(*steps: tuple[float | None, str]) -> Json:
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for v, c in steps]}


def _field_config(unit: str, decimals: int | None = None, **extra: Any) -> Json:
    defaults: Json = {"unit": unit, "color": {"mode": "palette-classic"}, **extra}
    if decimals is not None:
        defaults["decimals"] = decimals
    return {"defaults": defaults, "overrides": []}


def stat(
    title: str,
    description: str,
    queries: Sequence[tuple[str, str]],
    unit: str,
    *,
    decimals: int | None = None,
    thresholds: Json | None = None,
    text_mode: str = "auto",
    instant: bool = False,
    mappings: list[Json] | None = None,
) -> Json:
    """A single-number panel (the last value of each query)."""
    config = _field_config(unit, decimals, mappings=mappings or [])
    if thresholds is not None:
        config["defaults"]["thresholds"] = thresholds
        config["defaults"]["color"] = {"mode": "thresholds"}
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": _targets(queries, instant),
        "fieldConfig": config,
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value" if thresholds else "none",
            "graphMode": "area" if not instant else "none",
            "textMode": text_mode,
            "justifyMode": "auto",
            "orientation": "auto",
        },
    }


def timeseries(
    title: str,
    description: str,
    queries: Sequence[tuple[str, str]],
    unit: str,
    *,
    stack: bool = False,
    bars: bool = False,
    minimum: float | None = None,
) -> Json:
    """A graph over the time range."""
    custom: Json = {
        "drawStyle": "bars" if bars else "line",
        "fillOpacity": 60 if stack or bars else 10,
        "lineWidth": 1,
        "showPoints": "never",
        "spanNulls": False,
        "stacking": {"mode": "normal" if stack else "none", "group": "A"},
    }
    config = _field_config(unit, custom=custom)
    if minimum is not None:
        config["defaults"]["min"] = minimum
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": _targets(queries),
        "fieldConfig": config,
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
    }


def bargauge(title: str, description: str, queries: Sequence[tuple[str, str]], unit: str) -> Json:
    """Horizontal bars, one per series, of an instant query over the time range."""
    return {
        "type": "bargauge",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": _targets(queries, instant=True),
        "fieldConfig": _field_config(unit, min=0),
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "orientation": "horizontal",
            "displayMode": "basic",
            "showUnfilled": True,
        },
    }


def state_timeline(
    title: str, description: str, queries: Sequence[tuple[str, str]], state: str = "active"
) -> Json:
    """One lane per series, coloured (and named `state`) while the series is 1."""
    config = _field_config(
        "none",
        mappings=[{"type": "value", "options": {"1": {"text": state, "index": 0}}}],
        custom={"fillOpacity": 80, "lineWidth": 0},
    )
    return {
        "type": "state-timeline",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": _targets(queries),
        "fieldConfig": config,
        "options": {
            "showValue": "never",
            "mergeValues": True,
            "rowHeight": 0.8,
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": False},
        },
    }


class Layout:
    """Places panels left to right in rows of 24 grid units and numbers them."""

    def __init__(self) -> None:
        self.panels: list[Json] = []
        self._x = 0
        self._y = 0
        self._row_height = 0

    def row(self, title: str) -> None:
        self._newline()
        self.panels.append(
            {
                "type": "row",
                "title": title,
                "collapsed": False,
                "panels": [],
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": self._y},
            }
        )
        self._y += 1

    def add(self, panel: Json, width: int, height: int) -> None:
        if self._x + width > 24:
            self._newline()
        panel["gridPos"] = {"h": height, "w": width, "x": self._x, "y": self._y}
        self.panels.append(panel)
        self._x += width
        self._row_height = max(self._row_height, height)

    def _newline(self) -> None:
        self._y += self._row_height
        self._x = 0
        self._row_height = 0

    def numbered(self) -> list[Json]:
        return [{"id": i, **panel} for i, panel in enumerate(self.panels, start=1)]


def panels() -> list[Json]:
    """Every panel of the dashboard, laid out."""
    layout = Layout()

    layout.row("Savings at a glance")
    ratio_colours = _thresholds((None, "red"), (1.1, "orange"), (1.5, "green"))
    for panel in (
        stat(
            "Compression ratio",
            "Raw value bytes in / bytes out (compressed frames with their zd header, and values "
            "passed through), over the selected namespaces. 1.00 saves nothing.",
            [(RATIO, "ratio")],
            "none",
            decimals=2,
            thresholds=ratio_colours,
        ),
        stat(
            "Bytes saved per second",
            "Input bytes per second minus output bytes per second.",
            [(SAVED_PER_SECOND, "saved")],
            "binBps",
        ),
        stat(
            "Saved in the time range",
            "Bytes in minus bytes out over the dashboard's time range (restarts handled).",
            [(SAVED_IN_RANGE, "saved")],
            "bytes",
            instant=True,
        ),
        stat(
            "Estimated saving per month",
            "Bytes saved per second over the last hour, times 30 days: what the output topics "
            "and everything downstream (replicas, network, sinks) stop storing or moving.",
            [(SAVED_PER_MONTH, "per month")],
            "bytes",
            instant=True,
        ),
        stat(
            "Records passed through",
            "Share of records left uncompressed (tombstones, below the break-even size, "
            "precompressed, no gain, already encoded). The reasons are in Records below.",
            [(PASSED_THROUGH, "passed through")],
            "percentunit",
            decimals=1,
        ),
        stat(
            "Active dictionary",
            "The dictionary each namespace is compressed with (dict_id 0: none yet).",
            [
                (
                    f"max by (namespace, dict_id, version) (zdict_dictionary_info{{{NS}}})",
                    "{{namespace}}: {{dict_id}} v{{version}}",
                )
            ],
            "none",
            text_mode="name",
            instant=True,
        ),
    ):
        layout.add(panel, 4, 5)

    layout.row("Compression")
    layout.add(
        timeseries(
            "Compression ratio: live vs held-out",
            "Live ratio per namespace next to the held-out ratio the active dictionary reached "
            "when it was trained. A live ratio well below its held-out ratio means drift: "
            "retrain (alert ZdictCompressionRatioDropped).",
            [
                (
                    f"{_sum_rate(IN, by='namespace')} / {_sum_rate(OUT, by='namespace')}",
                    "{{namespace}} live",
                ),
                (
                    f"max by (namespace) (zdict_dictionary_heldout_ratio{{{NS}}})",
                    "{{namespace}} held-out",
                ),
            ],
            "none",
        ),
        12,
        8,
    )
    layout.add(
        timeseries(
            "Bytes per second: in, out, saved",
            "Raw bytes consumed, bytes produced (header included) and their difference.",
            [
                (_sum_rate(IN, by="namespace"), "{{namespace}} in"),
                (_sum_rate(OUT, by="namespace"), "{{namespace}} out"),
                (
                    f"{_sum_rate(IN, by='namespace')} - {_sum_rate(OUT, by='namespace')}",
                    "{{namespace}} saved",
                ),
            ],
            "binBps",
            minimum=0,
        ),
        12,
        8,
    )

    layout.row("Records")
    layout.add(
        timeseries(
            "Records per second by outcome",
            "compressed, or passed through because of: tombstone, already_encoded, "
            "below_threshold, precompressed, no_gain (README, wire format).",
            [(_sum_rate(MESSAGES, by="outcome"), "{{outcome}}")],
            "short",
            stack=True,
        ),
        12,
        8,
    )
    layout.add(
        bargauge(
            "Passed through, by reason (share of all records in the time range)",
            "Records passed through unchanged, by reason, as a share of every record relayed.",
            [
                (
                    f"sum by (outcome) (increase(zdict_messages_total{{{NS}, "
                    f'outcome!="compressed"}}[$__range])) '
                    f"/ scalar(sum(increase({MESSAGES}[$__range])))",
                    "{{outcome}}",
                )
            ],
            "percentunit",
        ),
        12,
        8,
    )

    layout.row("Latency")
    layout.add(
        timeseries(
            "Compress time per message (p50, p99)",
            "Encode time per message, observed as each consumed batch's mean.",
            [
                (_quantile(0.5, "zdict_compress_seconds"), "p50"),
                (_quantile(0.99, "zdict_compress_seconds"), "p99"),
            ],
            "s",
        ),
        12,
        8,
    )
    layout.add(
        timeseries(
            "Relay latency: record timestamp to acknowledged (p50, p99)",
            "From the input record's timestamp to the broker's acknowledgement of its "
            "compressed copy (one record in 8). Includes the producer's own delay and any lag.",
            [
                (_quantile(0.5, "zdict_relay_latency_seconds"), "p50"),
                (_quantile(0.99, "zdict_relay_latency_seconds"), "p99"),
            ],
            "s",
        ),
        12,
        8,
    )

    layout.row("Dictionaries and training")
    layout.add(
        state_timeline(
            "Active dictionary over time",
            "One lane per dictionary, filled while it is the active one; activations are "
            "annotated on every graph (toggle 'Dictionary activated' at the top).",
            [
                (
                    f"max by (namespace, dict_id, version) (zdict_dictionary_info{{{NS}}})",
                    "{{namespace}} {{dict_id}} v{{version}}",
                )
            ],
        ),
        12,
        8,
    )
    layout.add(
        timeseries(
            "Dictionary age",
            "Time since the active dictionary was trained (alert ZdictDictionaryStale).",
            [
                (
                    f"time() - max by (namespace) "
                    f"(zdict_dictionary_created_timestamp_seconds{{{NS}}})",
                    "{{namespace}}",
                )
            ],
            "s",
        ),
        6,
        8,
    )
    layout.add(
        bargauge(
            "Training runs in the time range",
            "Runs by result: promoted (a new dictionary), rejected (the champion stays), "
            "failed (alert ZdictTrainingFailing).",
            [
                (
                    f"sum by (result) (increase(zdict_training_runs_total{{{NS}}}[$__range]))",
                    "{{result}}",
                )
            ],
            "short",
        ),
        6,
        8,
    )
    layout.add(
        timeseries(
            "Training runs by result",
            "Training runs per namespace and result.",
            [
                (
                    f"sum by (namespace, result) "
                    f"(increase(zdict_training_runs_total{{{NS}}}[{RATE}]))",
                    "{{namespace}} {{result}}",
                )
            ],
            "short",
            bars=True,
        ),
        12,
        8,
    )
    layout.add(
        stat(
            "Training time per run (mean over the time range)",
            "Wall time of one training run, sampling excluded.",
            [
                (
                    f"sum(increase(zdict_training_seconds_sum{{{NS}}}[$__range])) "
                    f"/ sum(increase(zdict_training_seconds_count{{{NS}}}[$__range]))",
                    "mean",
                )
            ],
            "s",
            instant=True,
            mappings=[NO_RUN],
        ),
        12,
        8,
    )

    layout.row("Training in the sidecar")
    layout.add(
        state_timeline(
            "Trainer of each namespace",
            "The instance that trains each namespace: the holder of partition 0 of its input "
            "topic. Exactly one per namespace; the role moves with the partition.",
            [
                (
                    f"max by (namespace, instance) (zdict_trainer{{{NS}}} == 1)",
                    "{{namespace}} on {{instance}}",
                )
            ],
            state="trainer",
        ),
        16,
        8,
    )
    layout.add(
        stat(
            "Trainers per namespace",
            "Instances that train each namespace: 1 is right; 0 (nobody trains it) or 2 and "
            "more for 15 minutes is alert ZdictTrainerNotUnique.",
            [(f"sum by (namespace) (zdict_trainer{{{NS}}})", "{{namespace}}")],
            "none",
            decimals=0,
            thresholds=_thresholds((None, "red"), (1, "green"), (2, "red")),
            text_mode="value_and_name",
            instant=True,
        ),
        8,
        8,
    )
    layout.add(
        timeseries(
            "Drift: the trainer's live ratio vs the held-out ratio",
            "The live ratio the trainer judges drift by (over ZDICT_TRAINING__DRIFT_WINDOW, "
            "values no dictionary could shrink left out; none until a full window) next to "
            "the active dictionary's held-out ratio. Drift retrains once the live ratio is "
            "ZDICT_TRAINING__DRIFT_TOLERANCE below it (the 'Drift' annotation).",
            [
                (
                    f"max by (namespace) (zdict_live_ratio{{{NS}}} "
                    f"and on (instance, namespace) (zdict_trainer{{{NS}}} == 1))",
                    "{{namespace}} live",
                ),
                (
                    f"max by (namespace) (zdict_dictionary_heldout_ratio{{{NS}}})",
                    "{{namespace}} held-out",
                ),
            ],
            "none",
        ),
        12,
        8,
    )
    layout.add(
        timeseries(
            "Training triggers by kind",
            "Training runs started: first (the reservoir filled for the first time), "
            "scheduled (ZDICT_TRAINING__RETRAIN_INTERVAL), drift (the live ratio fell).",
            [
                (
                    f"sum by (namespace, trigger) "
                    f"(increase(zdict_training_triggers_total{{{NS}}}[{RATE}]))",
                    "{{namespace}} {{trigger}}",
                )
            ],
            "short",
            bars=True,
        ),
        8,
        8,
    )
    layout.add(
        bargauge(
            "Triggers in the time range",
            "Training runs started in the time range, by trigger.",
            [
                (
                    f"sum by (trigger) (increase(zdict_training_triggers_total{{{NS}}}[$__range]))",
                    "{{trigger}}",
                )
            ],
            "short",
        ),
        4,
        8,
    )
    layout.add(
        timeseries(
            "Training reservoir: bytes",
            "Bytes each instance's reservoir of recent values holds per namespace (values "
            "plus bookkeeping; at most ZDICT_SAMPLING__MAX_BYTES). The trainer trains on its own.",
            [
                (
                    f"max by (namespace, instance) (zdict_sample_bytes{{{NS}}})",
                    "{{namespace}} {{instance}}",
                )
            ],
            "bytes",
            minimum=0,
        ),
        6,
        8,
    )
    layout.add(
        timeseries(
            "Training reservoir: values",
            "Values each reservoir holds; the first training waits for "
            "ZDICT_SAMPLING__MIN_MESSAGES.",
            [
                (
                    f"max by (namespace, instance) (zdict_sample_messages{{{NS}}})",
                    "{{namespace}} {{instance}}",
                )
            ],
            "short",
            minimum=0,
        ),
        6,
        8,
    )
    training_cpu = _sum_rate(f"zdict_training_cpu_seconds_total{{{JOB}}}", "1h", by="instance")
    layout.add(
        timeseries(
            "Training CPU share (last hour)",
            "CPU seconds of the training processes over CPU seconds of the relay and the "
            "training processes, per instance, over the preceding hour (a run's CPU time is "
            "counted when it ends).",
            [
                (
                    f"{training_cpu} / ("
                    f"{_sum_rate(f'process_cpu_seconds_total{{{JOB}}}', '1h', by='instance')}"
                    f" + {training_cpu})",
                    "{{instance}}",
                )
            ],
            "percentunit",
            minimum=0,
        ),
        6,
        8,
    )
    layout.add(
        timeseries(
            "Registry publications by result",
            "Dictionaries and activations published to the registry topic, ok or failed "
            "(a failed one leaves the champion active; alert ZdictRegistryPublishFailing).",
            [
                (
                    f"sum by (result) (increase(zdict_registry_publish_total{{{JOB}}}[{RATE}]))",
                    "{{result}}",
                )
            ],
            "short",
            bars=True,
        ),
        6,
        8,
    )

    layout.row("Kafka")
    layout.add(
        timeseries(
            "Consumer lag per partition",
            "Records between the sidecar's position and the end of each input partition "
            "(from librdkafka's statistics, every 5 s; alert ZdictConsumerLagGrowing).",
            [
                (
                    'sum by (topic, partition) (zdict_consumer_lag_messages{topic=~"$namespace"})',
                    "{{topic}} [{{partition}}]",
                )
            ],
            "short",
            minimum=0,
        ),
        12,
        8,
    )
    layout.add(
        timeseries(
            "Offset commits per second",
            "Consumer offset commits by result; a failed commit is retried with newer offsets.",
            [(_sum_rate(f"zdict_commits_total{{{JOB}}}", by="result"), "{{result}}")],
            "short",
        ),
        6,
        8,
    )
    layout.add(
        timeseries(
            "Dead letters by stage",
            "Records set aside to the dead-letter topic because they could not be encoded, "
            "decoded or produced (too large for the output topic); 0 without a dead-letter "
            "topic, where the relay stops instead (alert ZdictDeadLetters).",
            [
                (
                    "sum by (namespace, stage) (increase(zdict_dead_letters_total"
                    f'{{{JOB}, namespace=~"$namespace"}}[{RATE}]))',
                    "{{namespace}} {{stage}}",
                )
            ],
            "short",
            bars=True,
        ),
        6,
        8,
    )
    layout.add(
        timeseries(
            "Transactions (exactly-once mode)",
            "Transactions committed and aborted per second; an abort rewinds to the last commit "
            "and reads the records again (0 in at-least-once mode).",
            [(_sum_rate(f"zdict_transactions_total{{{JOB}}}", by="result"), "{{result}}")],
            "short",
        ),
        6,
        8,
    )
    layout.add(
        timeseries(
            "Produce errors",
            "Records the producer failed to deliver, per instance and reason. The relay stops "
            "on the first one and is restarted (alert ZdictProduceErrors): no data is good.",
            [
                (
                    f"sum by (instance, reason) (zdict_produce_errors_total{{{JOB}}})",
                    "{{instance}} {{reason}}",
                )
            ],
            "short",
        ),
        6,
        8,
    )

    layout.row("Instances")
    layout.add(
        stat(
            "Instances up",
            "Sidecar instances Prometheus scrapes successfully, of all it scrapes.",
            [(f"sum(up{{{JOB}}})", "up"), (f"count(up{{{JOB}}})", "scraped")],
            "none",
            text_mode="value_and_name",
        ),
        4,
        6,
    )
    layout.add(
        stat(
            "Versions",
            "Instances per zdict-sidecar version and native library versions.",
            [
                (
                    f"count by (version, librdkafka, libzstd) (zdict_build_info{{{JOB}}})",
                    "{{version}} (librdkafka {{librdkafka}}, libzstd {{libzstd}})",
                )
            ],
            "none",
            text_mode="value_and_name",
            instant=True,
        ),
        8,
        6,
    )
    layout.add(
        stat(
            "Restarts in the time range",
            "Process starts per instance (alert ZdictSidecarRestarting).",
            [
                (
                    f"sum(changes(process_start_time_seconds{{{JOB}}}[$__range]))",
                    "restarts",
                )
            ],
            "none",
            instant=True,
        ),
        4,
        6,
    )
    layout.add(
        stat(
            "Assigned partitions",
            "Input partitions held by the consumer group's members.",
            [(f"sum(zdict_assigned_partitions{{{JOB}}})", "partitions")],
            "none",
        ),
        8,
        6,
    )
    layout.add(
        timeseries(
            "Resident memory per instance",
            "Resident set size of each sidecar process.",
            [(f"max by (instance) (process_resident_memory_bytes{{{JOB}}})", "{{instance}}")],
            "bytes",
            minimum=0,
        ),
        12,
        8,
    )
    layout.add(
        timeseries(
            "CPU per instance",
            "CPU seconds per second (1 = one core busy).",
            [(_sum_rate(f"process_cpu_seconds_total{{{JOB}}}", by="instance"), "{{instance}}")],
            "none",
            minimum=0,
        ),
        12,
        8,
    )
    return layout.numbered()


# -- dashboard -----------------------------------------------------------------------------------


def annotations() -> list[Json]:
    """Grafana's own annotations, then dictionary activations, promotions, drift-triggered
    training and restarts."""

    def prometheus(name: str, colour: str, expr: str, title: str, text: str, tags: str) -> Json:
        return {
            "name": name,
            "datasource": DS,
            "enable": True,
            "hide": False,
            "iconColor": colour,
            "expr": expr,
            "step": "1m",
            "titleFormat": title,
            "textFormat": text,
            "tagKeys": tags,
            "useValueForTime": False,
        }

    return [
        {
            "builtIn": 1,
            "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True,
            "hide": True,
            "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts",
            "type": "dashboard",
        },
        prometheus(
            "Dictionary activated",
            "green",
            "max by (namespace, dict_id, version) ("
            f"(changes(zdict_dictionary_created_timestamp_seconds{{{NS}}}[2m]) > 0)"
            f" * on (instance, namespace) group_left (dict_id, version)"
            f" zdict_dictionary_info{{{NS}}})",
            "Dictionary {{dict_id}} v{{version}} active",
            "namespace {{namespace}}",
            "namespace",
        ),
        prometheus(
            "Training promoted",
            "blue",
            f'sum by (namespace) (increase(zdict_training_runs_total{{{NS}, result="promoted"}}'
            "[2m])) > 0",
            "Training promoted a dictionary",
            "namespace {{namespace}}",
            "namespace",
        ),
        prometheus(
            "Drift",
            "orange",
            f'sum by (namespace) (increase(zdict_training_triggers_total{{{NS}, trigger="drift"}}'
            "[2m])) > 0",
            "Drift: training triggered",
            "namespace {{namespace}}",
            "namespace",
        ),
        prometheus(
            "Sidecar restarted",
            "red",
            f"sum by (instance) (changes(process_start_time_seconds{{{JOB}}}[2m])) > 0",
            "Sidecar restarted",
            "{{instance}}",
            "instance",
        ),
    ]


def templating() -> list[Json]:
    """The data source, namespace and job variables."""

    def label_values(name: str, label: str, metric: str, all_value: str | None) -> Json:
        query = f"label_values({metric}, {label})"
        variable: Json = {
            "name": name,
            "label": label.capitalize(),
            "type": "query",
            "datasource": DS,
            "query": {"query": query, "refId": f"{name}-variable"},
            "definition": query,
            "includeAll": True,
            "multi": True,
            "current": {},
            "options": [],
            "refresh": 2,
            "regex": "",
            "sort": 1,
            "hide": 0,
        }
        if all_value is not None:
            variable["allValue"] = all_value
        return variable

    return [
        {
            "name": "datasource",
            "label": "Data source",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
            "options": [],
            "refresh": 1,
            "regex": "",
            "hide": 0,
        },
        label_values("namespace", "namespace", "zdict_messages_total", ".*"),
        # No custom All value: "All" then means every job that exports zdict_build_info, so a
        # Prometheus scraping itself does not add its own process_* series.
        label_values("job", "job", "zdict_build_info", None),
    ]


def dashboard() -> Json:
    """The whole dashboard JSON model."""
    return {
        "uid": DASHBOARD_UID,
        "title": "zdict-sidecar: compression savings",
        "description": "Savings, outcomes, latency, dictionaries and lag of zdict-sidecar relays.",
        "tags": ["zdict-sidecar", "kafka", "compression"],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "browser",
        "links": [],
        "annotations": {"list": annotations()},
        "templating": {"list": templating()},
        "panels": panels(),
    }


def dashboard_json() -> str:
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"


# -- PrometheusRule ------------------------------------------------------------------------------


def prometheus_rule_yaml() -> str:
    """deploy/prometheus/{rules,alerts}.yml as one prometheus-operator PrometheusRule."""
    groups: list[Any] = []
    for path in RULE_FILES:
        groups.extend(yaml.safe_load(path.read_text())["groups"])
    resource = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "zdict-sidecar",
            "labels": {"app.kubernetes.io/name": "zdict-sidecar"},
        },
        "spec": {"groups": groups},
    }
    header = (
        "# Generated by deploy/generate.py from deploy/prometheus/rules.yml and alerts.yml:\n"
        "# edit those, then run `make dashboard`.\n"
    )
    body = yaml.safe_dump(resource, sort_keys=False, width=100, allow_unicode=True)
    return header + body


OUTPUTS = {DASHBOARD_PATH: dashboard_json, PROMETHEUS_RULE_PATH: prometheus_rule_yaml}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if an output is stale")
    args = parser.parse_args(argv)
    stale = []
    for path, render in OUTPUTS.items():
        text = render()
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path.relative_to(DEPLOY.parent)}")
    for path in stale:
        print(f"{path.relative_to(DEPLOY.parent)} is stale: run `make dashboard`", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
