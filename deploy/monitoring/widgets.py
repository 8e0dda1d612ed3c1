"""Grafana's panel types as functions (stat, timeseries, bargauge, state timeline) and `Layout`,
which places panels on the dashboard's 24-unit grid. Every query goes to `${datasource}`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Json = dict[str, Any]

DS: Json = {"type": "prometheus", "uid": "${datasource}"}

#: A value mapping: NaN (no run in the time range, so 0 / 0) reads "no run".
NO_RUN: Json = {"type": "special", "options": {"match": "nan", "result": {"text": "no run"}}}


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


def colour_steps(*steps: tuple[float | None, str]) -> Json:
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
        """Start a new row, headed by `title`, below everything placed so far."""
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
        """Place `panel` right of the previous one, or on a new line when it would not fit."""
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
        """The panels placed so far, with ids 1, 2, … in placement order."""
        return [{"id": i, **panel} for i, panel in enumerate(self.panels, start=1)]
