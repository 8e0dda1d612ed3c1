"""`dicts retire`: which dictionaries of the registry no record can name any more, and why
(`sidecar.dictionaries.retirement` decides, `sidecar.dictionaries.retire_run` asks the cluster);
a dry run unless `--apply`, which retires them and removes their files from the local store."""

from __future__ import annotations

import argparse
import json
from datetime import timedelta
from typing import TYPE_CHECKING

from sidecar.cli.common import add_config_flags, number, open_registry
from sidecar.config import Settings
from sidecar.dictionaries.model import validate_namespace
from sidecar.dictionaries.retire_run import MARGIN, OLDER_THAN, retire
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import ConfigError
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
    """`dicts retire`: a verdict per dictionary of the registry; `--apply` retires them."""
    topics = topics_by_namespace(args.topic)
    store = DictionaryStore(settings.dictionaries) if args.apply else None
    registry = open_registry(settings, "operator")
    try:
        done = retire(
            settings,
            registry,
            topics,
            older_than=timedelta(days=args.older_than_days),
            margin=timedelta(hours=args.margin_hours),
            store=store,
        )
    finally:
        registry.close()
    verdicts, retired = done.verdicts, {m.id for m in done.retired}
    if args.json:
        rows = [
            {
                "dict_id": v.meta.id,
                "namespace": v.meta.namespace,
                "retire": v.retire,
                "why": v.reason,
            }
            | ({"retired": v.meta.id in retired} if args.apply else {})
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
            ("retired" if v.meta.id in retired else "yes") if v.retire else "no",
            v.reason,
        ]
        for v in verdicts
    ]
    print(render(["id", "namespace", "version", "created", "retire", "why"], table))
    going = sum(v.retire for v in verdicts)
    if args.apply:
        print(
            f"retired {len(retired)} of {len(verdicts)} dictionaries of registry topic "
            f"{settings.registry.topic}; {len(done.removed)} removed from the store "
            f"{settings.dictionaries}"
        )
    else:
        print(
            f"dry run: {going} of {len(verdicts)} dictionaries of registry topic "
            f"{settings.registry.topic} could be retired; nothing was changed (--apply retires "
            "them)"
        )
    return 0


def add_action(actions: Commands) -> None:
    """The `retire` action of `dicts`."""
    a = actions.add_parser(
        "retire",
        help="list the dictionaries no record can name any more, and why; --apply retires them",
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
        default=OLDER_THAN / timedelta(days=1),
        help="only dictionaries created longer ago than this, whatever the topics' retention "
        "(default 30)",
    )
    a.add_argument(
        "--margin-hours",
        type=number(float, ge=0),
        default=MARGIN / timedelta(hours=1),
        help="after an activation, how long a producer may still write with the dictionary it "
        "replaced (default 1)",
    )
    a.add_argument(
        "--apply",
        action="store_true",
        help="retire them: tombstones in the registry and its index (every sidecar forgets "
        "them; their ids are never reused), their files removed from the store (--dictionaries)",
    )
    a.add_argument("--json", action="store_true")
    add_config_flags(a)
