"""`dicts retire`: which dictionaries of the registry no record can name any more, and why
(`sidecar.dictionaries.retirement` decides); a dry run, nothing is changed."""

from __future__ import annotations

import argparse
import json
from datetime import timedelta
from typing import TYPE_CHECKING

from sidecar.cli.common import add_config_flags, number, open_registry
from sidecar.config import Settings
from sidecar.dictionaries.model import utc_now, validate_namespace
from sidecar.dictionaries.retirement import PartitionSpan, cutoff, judge
from sidecar.errors import ConfigError
from sidecar.kafka import make_reader, offsets_since
from sidecar.tools.tables import render

if TYPE_CHECKING:
    from sidecar.cli.common import Commands


def topics_by_namespace(named: list[str]) -> dict[str, list[str]]:
    """`--topic NAMESPACE=TOPIC` (or `--topic TOPIC`: the namespace of the same name)."""
    topics: dict[str, list[str]] = {}
    for item in named:
        namespace, _, topic = item.partition("=")
        if not topic and "=" in item:
            raise ConfigError(f"--topic {item}: expected NAMESPACE=TOPIC or TOPIC")
        topics.setdefault(validate_namespace(namespace), []).append(topic or namespace)
    return topics


def cmd_retire(args: argparse.Namespace, settings: Settings) -> int:
    """`dicts retire`: a verdict per dictionary of the registry (a dry run)."""
    topics = topics_by_namespace(args.topic)
    margin = timedelta(hours=args.margin_hours)
    registry = open_registry(settings, "operator")
    try:
        state = registry.state
        metas = state.versions()
        activations = dict(state.activations)
    finally:
        registry.close()
    spans: dict[str, list[PartitionSpan]] = {}
    reader = make_reader(settings, "retire")
    try:
        for namespace, named in topics.items():
            activation = activations.get(namespace)
            if activation is None:
                continue
            at_ms = int(cutoff(activation, margin).timestamp() * 1000)
            spans[namespace] = [
                PartitionSpan(topic, partition, low, since)
                for topic in named
                for partition, low, since in offsets_since(
                    reader, topic, at_ms, settings.registry.timeout
                )
            ]
    finally:
        reader.close()
    verdicts = judge(metas, activations, spans, utc_now(), timedelta(days=args.older_than_days))
    going = [v for v in verdicts if v.retire]
    if args.json:
        rows = [
            {
                "dict_id": v.meta.id,
                "namespace": v.meta.namespace,
                "retire": v.retire,
                "why": v.reason,
            }
            for v in verdicts
        ]
        print(json.dumps(rows, indent=2))
        return 0
    table = [
        [
            str(v.meta.id),  # an id, not a quantity: no thousands separator
            v.meta.namespace,
            v.meta.version,
            f"{v.meta.created_at:%Y-%m-%d}",
            "yes" if v.retire else "no",
            v.reason,
        ]
        for v in verdicts
    ]
    print(render(["id", "namespace", "version", "created", "retire", "why"], table))
    print(
        f"dry run: {len(going)} of {len(verdicts)} dictionaries of registry topic "
        f"{settings.registry.topic} could be retired; nothing was changed"
    )
    return 0


def add_action(actions: Commands) -> None:
    """The `retire` action of `dicts`."""
    a = actions.add_parser(
        "retire",
        help="list the dictionaries no record can name any more, and why (a dry run)",
    )
    a.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="NAMESPACE=TOPIC",
        help="a topic holding records of NAMESPACE (repeat; TOPIC alone: its own namespace); "
        "a namespace with none keeps every dictionary",
    )
    a.add_argument(
        "--older-than-days",
        type=number(float, ge=0),
        default=30.0,
        help="only dictionaries created longer ago than this (default 30)",
    )
    a.add_argument(
        "--margin-hours",
        type=number(float, ge=0),
        default=1.0,
        help="after an activation, how long a producer may still write with the dictionary it "
        "replaced (default 1)",
    )
    a.add_argument("--json", action="store_true")
    add_config_flags(a)
