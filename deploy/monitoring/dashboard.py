"""The Grafana dashboard: its annotations, variables and panels as one JSON model."""

from __future__ import annotations

import json

from deploy.monitoring.queries import JOB, NS
from deploy.monitoring.rows import panels
from deploy.monitoring.widgets import DS, Json

DASHBOARD_UID = "zdict-sidecar"


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


def _templating() -> list[Json]:
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
        "annotations": {"list": _annotations()},
        "templating": {"list": _templating()},
        "panels": panels(),
    }


def dashboard_json() -> str:
    """The dashboard as the committed file holds it: indented JSON, UTF-8 kept, a final newline."""
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"
