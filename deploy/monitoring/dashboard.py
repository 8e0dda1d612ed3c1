"""The Grafana dashboard: its annotations, variables and panels as one JSON model."""

from __future__ import annotations

import json

from deploy.monitoring.queries import CLUSTER, JOB, NAMESPACE, ON, SEL
from deploy.monitoring.rows import panels
from deploy.monitoring.widgets import DS, Json

DASHBOARD_UID = "zdict-sidecar"

#: The cost estimate's constants: (name, label, default, what it means). Defaults are list
#: prices of the large clouds' block storage and cross-zone transfer, and Kafka's defaults.
COST_VARIABLES = (
    ("storage_price", "Storage $/GB-month", "0.10", "price of a GB of disk for a month"),
    ("transfer_price", "Transfer $/GB", "0.02", "price of a GB moved over a priced link"),
    ("retention_days", "Retention (days)", "7", "how long the output topics keep records"),
    ("replicas", "Replicas", "3", "the output topics' replication factor"),
    (
        "input_retention_days",
        "Relay input retention (days)",
        "1",
        "how long a relay's input topics keep records",
    ),
    (
        "transfers",
        "Priced transfers",
        "2",
        "times each byte crosses a priced link (replication to other zones, consumers)",
    ),
)


def _annotations() -> list[Json]:
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

    info = f"zdict_dictionary_info{{{SEL}}}"
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
        # A dictionary's info series starts when it becomes active: one that no instance of the
        # topic exported two minutes earlier is an activation (the first one included, and a
        # dictionary active when Prometheus first sees the topic); a pod joining with the
        # topic's current dictionary is not.
        prometheus(
            "Dictionary activated",
            "green",
            "max by (topic, dict_id, version) ("
            f'zdict_dictionary_info{{{SEL}, dict_id!="0"}}'
            f" unless on (topic, dict_id) {info} offset 2m)",
            "Dictionary {{dict_id}} v{{version}} active",
            "topic {{topic}}",
            "topic",
        ),
        prometheus(
            "Training promoted",
            "blue",
            f'sum by (topic) (increase(zdict_training_runs_total{{{SEL}, result="promoted"}}'
            "[2m])) > 0",
            "Training promoted a dictionary",
            "topic {{topic}}",
            "topic",
        ),
        prometheus(
            "Drift",
            "orange",
            f'sum by (topic) (increase(zdict_training_triggers_total{{{SEL}, trigger="drift"}}'
            "[2m])) > 0",
            "Drift: training triggered",
            "topic {{topic}}",
            "topic",
        ),
        prometheus(
            "Sidecar restarted",
            "red",
            f"sum by (instance) (changes(process_start_time_seconds{{{ON}}}[2m])) > 0",
            "Sidecar restarted",
            "{{instance}}",
            "instance",
        ),
    ]


def _templating() -> list[Json]:
    """The data source; the cluster, namespace, job, instance and topic variables (each
    narrowed by the ones before it); the cost estimate's constants."""

    def label_values(name: str, title: str, label: str, metric: str, all_value: str | None) -> Json:
        query = f"label_values({metric}, {label})"
        variable: Json = {
            "name": name,
            "label": title,
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

    def constant(name: str, title: str, default: str, meaning: str) -> Json:
        return {
            "name": name,
            "label": title,
            "description": meaning,
            "type": "textbox",
            "query": default,
            "current": {"selected": False, "text": default, "value": default},
            "options": [{"selected": True, "text": default, "value": default}],
            "hide": 0,
        }

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
        # A Prometheus shared by clusters (an external or target label `cluster`) and
        # namespaces: the same topic name in two of them is two topics. The sidecars' own
        # processes export zdict_build_info; an application with the in-process producer
        # exports zdict_producer_records_total instead, and is listed too.
        label_values("cluster", "Cluster", "cluster", _sidecars(), ".*"),
        label_values("namespace", "Namespace", "namespace", _sidecars(CLUSTER), ".*"),
        # No custom All value: "All" then means every job that exports those, so a
        # Prometheus scraping itself does not add its own process_* series.
        label_values("job", "Job", "job", _sidecars(f"{CLUSTER}, {NAMESPACE}"), None),
        label_values(
            "instance", "Instance", "instance", _sidecars(f"{CLUSTER}, {NAMESPACE}, {JOB}"), ".*"
        ),
        label_values(
            "topic",
            "Topic",
            "topic",
            f'{{__name__=~"zdict_records_total|zdict_producer_records_total", {ON}}}',
            ".*",
        ),
        *(constant(*variable) for variable in COST_VARIABLES),
    ]


def _sidecars(matchers: str = "") -> str:
    """The series every sidecar process and every in-process producer exports, narrowed by
    `matchers`."""
    names = '__name__=~"zdict_build_info|zdict_producer_records_total"'
    return f"{{{names}{', ' if matchers else ''}{matchers}}}"


def dashboard() -> Json:
    """The whole dashboard JSON model."""
    return {
        "uid": DASHBOARD_UID,
        "title": "zdict-sidecar: compression savings",
        "description": "Savings as stored against the producer's own codec, outcomes, latency, "
        "dictionaries and lag of zdict-sidecar relays, proxies and in-process producers.",
        "tags": ["zdict-sidecar", "kafka", "compression"],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "browser",
        "links": [],
        "annotations": {"list": _annotations()},
        "templating": {"list": _templating()},
        "panels": panels(),
    }


def dashboard_json() -> str:
    """The dashboard as the committed file holds it: indented JSON, UTF-8 kept, a final newline."""
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"
