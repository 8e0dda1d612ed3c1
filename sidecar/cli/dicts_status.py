"""`dicts status`, `dicts pin` and `dicts unpin`: what each namespace uses and why, and an
operator's pin, published to the registry for every sidecar."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sidecar.cli.common import add_config_flags, open_registry
from sidecar.cli.report import http_url
from sidecar.config import Settings
from sidecar.dictionaries.model import utc_now, validate_namespace
from sidecar.dictionaries.store import DictionaryStore
from sidecar.tools import status

if TYPE_CHECKING:
    from sidecar.cli.common import Commands


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    """`dicts status`: per namespace, from the registry (the local store when it is disabled),
    with a sidecar's live figures when `--metrics` is given."""
    namespace = validate_namespace(args.namespace) if args.namespace else None
    # Read first: an unreadable endpoint fails before the registry is waited for.
    text = status.read_metrics(args.metrics) if args.metrics else None
    if settings.registry.enabled:
        registry = open_registry(settings, "operator")
        try:
            rows = status.from_registry(registry.state, namespace)
        finally:
            registry.close()
        where = f"registry topic {settings.registry.topic}"
    else:
        rows = status.from_store(DictionaryStore(settings.dictionaries), namespace)
        where = f"{settings.dictionaries} (the registry is disabled: pins are unknown)"
    if text is not None:
        # The relay labels output modes with its output topics: back to their input topics.
        inputs = {settings.relay.output_for(r.namespace): r.namespace for r in rows}
        rows = status.add_metrics(rows, text, args.metrics, lambda topic: inputs.get(topic, topic))
        if namespace is not None:
            rows = [r for r in rows if r.namespace == namespace]
    now = utc_now()
    if args.json:
        print(status.format_json(rows, now))
    else:
        print(status.format_status(rows, now, where))
    return 1 if any(r.problem for r in rows) else 0


def cmd_pin(args: argparse.Namespace, settings: Settings) -> int:
    """`dicts pin` / `dicts unpin`: published to the registry, for every sidecar."""
    namespace = validate_namespace(args.namespace)
    registry = open_registry(settings, "operator")
    try:
        if args.action == "pin":
            activation = registry.pin(namespace)
            print(
                f"namespace {namespace}: dictionary {activation.dict_id} is pinned in registry "
                f"topic {registry.topic}: no training replaces it (dicts activate and rollback "
                f"still do; dicts unpin --namespace {namespace} undoes it)"
            )
        else:
            activation = registry.unpin(namespace)
            print(
                f"namespace {namespace}: not pinned in registry topic {registry.topic}: "
                f"training may replace dictionary {activation.dict_id} again"
            )
    finally:
        registry.close()
    return 0


def add_actions(actions: Commands) -> None:
    """The `status`, `pin` and `unpin` actions of `dicts`."""
    a = actions.add_parser(
        "status",
        help="per namespace: the active dictionary, its age and held-out ratio, pinned or not, "
        "the last training decision; with --metrics, the live ratio and output modes",
    )
    a.add_argument("--namespace")
    a.add_argument("--json", action="store_true")
    a.add_argument(
        "--metrics",
        type=http_url,
        metavar="URL",
        help="a sidecar's /metrics (e.g. http://127.0.0.1:9400/metrics): live ratio and output "
        "mode per partition",
    )
    add_config_flags(a)
    a = actions.add_parser(
        "pin", help="keep the active dictionary: no training replaces it (the registry's)"
    )
    a.add_argument("--namespace", required=True)
    add_config_flags(a)
    a = actions.add_parser("unpin", help="let training replace the active dictionary again")
    a.add_argument("--namespace", required=True)
    add_config_flags(a)
