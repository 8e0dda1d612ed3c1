"""`proxy`: the Kafka-protocol produce proxy next to a producer (`bootstrap.servers` → it)."""

from __future__ import annotations

import argparse
import shutil
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


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings `proxy`'s flags set, as `load_settings` overrides."""
    proxy: dict[str, Any] = {}
    if args.listen is not None:
        proxy["listen"] = args.listen
    if args.upstream_topic is not None:
        proxy["upstream_topic"] = args.upstream_topic
    if args.topic:
        proxy["topics"] = tuple(args.topic)
    if args.pass_through:
        proxy["compress"] = False
    if args.forward:
        proxy["forward"] = True
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
    if settings.proxy.forward:
        from sidecar.proxy.forward.service import run_forward_proxy

        return run_forward_proxy(settings)
    from sidecar.proxy.service import run_proxy

    return run_proxy(settings)


def add_proxy(commands: Commands) -> None:
    width = min(shutil.get_terminal_size().columns - 2, _MAX_HELP_WIDTH)
    p = commands.add_parser(
        "proxy",
        help="a Kafka produce proxy on localhost: producers point bootstrap.servers at it",
        epilog=environment_help(width),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--listen", metavar="HOST:PORT", help="where producers connect (default 127.0.0.1:9092)"
    )
    p.add_argument(
        "--upstream-topic",
        metavar="NAME",
        help="where records produced to {topic} go (default {topic}: the same topic)",
    )
    p.add_argument("--topic", action="append", metavar="TOPIC", help="set up at start (repeatable)")
    p.add_argument(
        "--metrics-port",
        type=setting_number(MetricsSettings, "port"),
        metavar="PORT",
        help="0 picks a free port",
    )
    p.add_argument("--pass-through", action="store_true", help="encode nothing (a cost baseline)")
    p.add_argument(
        "--forward",
        action="store_true",
        help="forward every request to the upstream brokers, their addresses rewritten to "
        "local ports (ZDICT_PROXY__BROKER_PORT_BASE + node id), Produce requests rewritten in "
        "place (values encoded), Fetch responses decoded (ZDICT_PROXY__FETCH_DECODE); clients "
        "may produce to ZDICT_PROXY__ALLOWED_TOPICS (default: the --topic topics)",
    )
    add_lifecycle_flags(p, "the proxy")
    add_config_flags(p)
    p.set_defaults(func=cmd_proxy)
