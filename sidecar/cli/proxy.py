"""`proxy`: the forwarding Kafka proxy next to the clients of a pod (`bootstrap.servers` → it)."""

from __future__ import annotations

import argparse
import shutil
import textwrap
from typing import TYPE_CHECKING, Any, Final

from sidecar.cli.common import (
    add_config_flags,
    add_lifecycle_flags,
    configured_settings,
    setting_number,
)
from sidecar.config import MetricsSettings, environment_help

if TYPE_CHECKING:
    from sidecar.cli.common import Commands

#: The `proxy --help` environment section is never wider than this, whatever the terminal.
_MAX_HELP_WIDTH: Final = 100
_DESCRIPTION: Final = (
    "Every request is forwarded to the upstream broker the client addressed, broker addresses "
    "rewritten to local ports (ZDICT_PROXY__BROKER_PORT_BASE + node id), Produce requests "
    "rewritten in place (values encoded), Fetch responses decoded (ZDICT_PROXY__FETCH_DECODE); "
    "clients may produce to ZDICT_PROXY__ALLOWED_TOPICS (default: the --topic topics)."
)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings `proxy`'s flags set, as `load_settings` overrides."""
    proxy: dict[str, Any] = {}
    if args.listen is not None:
        proxy["listen"] = args.listen
    if args.topic:
        proxy["topics"] = tuple(args.topic)
    if args.pass_through:
        proxy["compress"] = False
    overrides: dict[str, Any] = {"proxy": proxy} if proxy else {}
    if args.no_training:
        overrides["training"] = {"enabled": False}
    if args.no_registry:
        overrides["registry"] = {"enabled": False}
    if args.metrics_port is not None:
        overrides["metrics"] = {"port": args.metrics_port}
    return overrides


def cmd_proxy(args: argparse.Namespace) -> int:
    settings = configured_settings(args, **_overrides(args))
    from sidecar.proxy.service import run_proxy

    return run_proxy(settings)


def add_proxy(commands: Commands) -> None:
    width = min(shutil.get_terminal_size().columns - 2, _MAX_HELP_WIDTH)
    p = commands.add_parser(
        "proxy",
        help="a Kafka proxy on localhost that compresses on Produce and decodes on Fetch: "
        "clients point bootstrap.servers at it",
        description=textwrap.fill(_DESCRIPTION, width),
        epilog=environment_help(width),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--listen", metavar="HOST:PORT", help="where clients connect (default 127.0.0.1:9092)"
    )
    p.add_argument("--topic", action="append", metavar="TOPIC", help="set up at start (repeatable)")
    p.add_argument(
        "--metrics-port",
        type=setting_number(MetricsSettings, "port"),
        metavar="PORT",
        help="0 picks a free port",
    )
    p.add_argument("--pass-through", action="store_true", help="encode nothing (a cost baseline)")
    add_lifecycle_flags(p, "the proxy")
    add_config_flags(p)
    p.set_defaults(func=cmd_proxy)
