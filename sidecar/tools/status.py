"""`dicts status`: per namespace, what it uses and why: the active dictionary, its age and
held-out ratio, whether an operator pinned it, the last training decision and its reason; with a
sidecar's /metrics, the live ratio and the output mode of each partition.

The registry is the source when it is enabled (every sidecar follows it); the local store when
it is not (pins live in the registry only). Building the rows is pure; reading /metrics is the
one piece of I/O here.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from prometheus_client.parser import text_string_to_metric_families

from sidecar.dictionaries.model import DictionaryMeta
from sidecar.dictionaries.registry_state import Activation, RegistryState
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import InputError, StoreError
from sidecar.tools.tables import render

#: Seconds a read of /metrics may take.
METRICS_TIMEOUT: Final = 10.0
#: The series read from /metrics (sidecar/metrics: training.py, records.py).
_LIVE: Final = "zdict_live_compression_factor"
_MODE: Final = "zdict_output_mode"
#: Characters of a training's reason shown in the text report (the JSON has all of it).
_REASON_WIDTH: Final = 160


@dataclass(slots=True)
class NamespaceStatus:
    """One namespace, as `dicts status` reports it."""

    namespace: str
    active: DictionaryMeta | None = None
    #: When the active dictionary became active, and by which action (promote, activate...).
    activated_at: datetime | None = None
    action: str | None = None
    #: The operator's pin: who and when (None: not pinned; unknown without the registry).
    pinned_by: str | None = None
    pinned_at: datetime | None = None
    #: The namespace's last training run as recorded (decision, reason, trigger, finished_at).
    training: Mapping[str, Any] | None = None
    #: From /metrics: the live compression factor, and each output partition's mode.
    live_ratio: float | None = None
    modes: dict[int, str] = field(default_factory=dict)
    #: What is wrong with the namespace's files (the store), if anything.
    problem: str | None = None
    #: Set for a report from the local store, which does not know pins.
    pinned_unknown: bool = False

    def to_dict(self, now: datetime) -> dict[str, Any]:
        meta = self.active
        training = dict(self.training) if self.training is not None else None
        return {
            "namespace": self.namespace,
            "dict_id": meta.id if meta else None,
            "version": meta.version if meta else None,
            "created_at": meta.created_at.isoformat() if meta else None,
            "age_seconds": round((now - meta.created_at).total_seconds()) if meta else None,
            "heldout_ratio": meta.heldout_ratio if meta else None,
            "batch_level": meta.batch_level if meta else None,
            "activated_at": self.activated_at.isoformat() if self.activated_at else None,
            "action": self.action,
            "pinned": None if self.pinned_unknown else self.pinned_by is not None,
            "pinned_by": self.pinned_by,
            "pinned_at": self.pinned_at.isoformat() if self.pinned_at else None,
            "last_training": training,
            "live_ratio": self.live_ratio,
            "output_modes": {str(p): m for p, m in sorted(self.modes.items())},
            "problem": self.problem,
        }


def from_registry(state: RegistryState, namespace: str | None = None) -> list[NamespaceStatus]:
    """Every namespace the registry knows (or only `namespace`), sorted."""
    names = {d.namespace for d in state.versions()} | set(state.activations) | set(state.trainings)
    rows = []
    for name in sorted(names):
        if namespace is not None and name != namespace:
            continue
        activation: Activation | None = state.activations.get(name)
        active = state.active(name)
        row = NamespaceStatus(
            name,
            active=active.meta if active else None,
            training=state.trainings.get(name),
        )
        if activation is not None:
            row.activated_at, row.action = activation.at, activation.action
            if activation.pinned is not None:
                row.pinned_by, row.pinned_at = activation.pinned.by, activation.pinned.at
        rows.append(row)
    return rows


def from_store(store: DictionaryStore, namespace: str | None = None) -> list[NamespaceStatus]:
    """Every namespace of the local store (or only `namespace`), sorted; what does not read is
    the row's `problem`."""
    rows = []
    for name in [namespace] if namespace is not None else store.namespaces():
        row = NamespaceStatus(name, pinned_unknown=True)
        try:
            active = store.active(name)
            row.active = active.meta if active else None
            history = store.history(name)
            row.training = store.last_training(name)
        except StoreError as exc:
            row.problem = str(exc)
            rows.append(row)
            continue
        if history and row.active is not None:
            last = history[-1]
            row.action = str(last.get("action", "?"))
            at = last.get("at")
            row.activated_at = datetime.fromisoformat(at) if isinstance(at, str) else None
        rows.append(row)
    return rows


def add_metrics(
    rows: list[NamespaceStatus],
    text: str,
    source: str,
    namespaces: Callable[[str], str] = lambda topic: topic,
) -> list[NamespaceStatus]:
    """The live ratio and output modes of a sidecar's /metrics `text` added to `rows` (a topic
    the rows lack gets a row of its own: the sidecar relays it, nothing is recorded for it).
    `namespaces` maps an output topic (the relay labels output modes with it) to its input
    topic's namespace; other names are their own.

    Raises:
        InputError: `text` is not Prometheus's text format.
    """
    by_name = {row.namespace: row for row in rows}
    try:
        samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    except ValueError as exc:
        raise InputError(f"{source} does not serve Prometheus metrics: {exc}") from None
    for sample in samples:
        topic = sample.labels.get("topic")
        if topic is None or sample.name not in (_LIVE, _MODE):
            continue
        name = topic if sample.name == _LIVE else namespaces(topic)
        row = by_name.get(name)
        if row is None:
            row = by_name[name] = NamespaceStatus(name)
        if sample.name == _LIVE:
            row.live_ratio = sample.value
        elif sample.value == 1:
            row.modes[int(sample.labels.get("partition", "-1"))] = sample.labels.get("mode", "?")
    return sorted(by_name.values(), key=lambda r: r.namespace)


def read_metrics(url: str) -> str:
    """The text of a sidecar's /metrics at `url`.

    Raises:
        InputError: it cannot be read.
    """
    try:
        with urllib.request.urlopen(url, timeout=METRICS_TIMEOUT) as response:
            return str(response.read().decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError) as exc:
        raise InputError(f"cannot read {url} (--metrics): {getattr(exc, 'reason', exc)}") from None


def age(seconds: float) -> str:
    """A duration as people read one: `45s`, `12m`, `3h 5m`, `2d 4h`."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def _training_cell(training: Mapping[str, Any] | None, now: datetime) -> str:
    if training is None:
        return "-"
    finished = training.get("finished_at")
    when = (
        f"{age(now.timestamp() - finished)} ago"
        if isinstance(finished, int | float) and not isinstance(finished, bool)
        else "?"
    )
    return f"{training.get('decision', '?')} ({training.get('trigger', '?')}, {when})"


def format_status(rows: list[NamespaceStatus], now: datetime, where: str) -> str:
    """The text report: a table, then each namespace's last training reason."""
    if not rows:
        return f"no namespace in {where}"
    with_metrics = any(r.live_ratio is not None or r.modes for r in rows)
    headers = ["namespace", "active", "version", "age", "held-out ratio", "batch level"]
    headers += ["pinned", "last training"]
    if with_metrics:
        headers += ["live ratio", "output mode by partition"]
    table = []
    for r in rows:
        meta = r.active
        pinned = "?" if r.pinned_unknown else ("yes" if r.pinned_by else "no")
        cells: list[object] = [
            r.namespace,
            str(meta.id) if meta else "none",
            meta.version if meta else "-",
            age((now - meta.created_at).total_seconds()) if meta else "-",
            meta.heldout_ratio if meta else "-",
            # Chosen at training; "-": the producer's default (zstd 3).
            meta.batch_level if meta and meta.batch_level else "-",
            pinned,
            _training_cell(r.training, now),
        ]
        if with_metrics:
            modes = " ".join(f"{'all' if p < 0 else p}:{m}" for p, m in sorted(r.modes.items()))
            cells += [round(r.live_ratio, 3) if r.live_ratio is not None else "-", modes or "-"]
        table.append(cells)
    lines = [render(headers, table, f"{where}, at {now:%Y-%m-%d %H:%M:%S} UTC")]
    for r in rows:
        notes = []
        if r.pinned_by is not None and r.pinned_at is not None:
            notes.append(f"pinned by {r.pinned_by} at {r.pinned_at:%Y-%m-%d %H:%M:%S} UTC")
        if r.training is not None and r.training.get("reason"):
            reason = " ".join(str(r.training["reason"]).split())
            cut = reason if len(reason) <= _REASON_WIDTH else reason[: _REASON_WIDTH - 1] + "…"
            notes.append(f"last training: {cut}")
        if r.problem is not None:
            notes.append(f"PROBLEM: {r.problem}")
        if notes:
            lines.append(f"{r.namespace}: " + "; ".join(notes))
    return "\n".join(lines)


def format_json(rows: list[NamespaceStatus], now: datetime) -> str:
    return json.dumps([r.to_dict(now) for r in rows], indent=2, default=str)
