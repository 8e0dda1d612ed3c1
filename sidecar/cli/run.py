"""`run`: the relay, from input topics to compressed output topics (or back, `--mode decode`)."""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, get_args

from sidecar.cli.common import (
    add_config_flags,
    add_lifecycle_flags,
    configured_settings,
    setting_number,
)
from sidecar.config import Guarantee, MetricsSettings, RelayMode, RelaySettings, environment_help

if TYPE_CHECKING:
    from sidecar.cli.common import Commands

#: The `run --help` environment section is never wider than this, whatever the terminal.
_MAX_HELP_WIDTH: Final = 100


def _relay_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings `run`'s flags set, as `load_settings` overrides."""
    relay: dict[str, Any] = {}
    if args.input_topic:
        relay["input_topics"] = tuple(args.input_topic)
    for key in ("output_topic", "group_id", "batch_size", "workers"):
        if getattr(args, key) is not None:
            relay[key] = getattr(args, key)
    if args.create_topics:
        relay["create_topics"] = True
    if args.pass_through:
        relay["compress"] = False
    if args.mode is not None:
        relay["mode"] = args.mode
    if args.guarantee is not None:
        relay["guarantee"] = args.guarantee
    overrides: dict[str, Any] = {"relay": relay} if relay else {}
    if args.no_training:
        overrides["training"] = {"enabled": False}
    if args.no_registry:
        overrides["registry"] = {"enabled": False}
    if args.metrics_port is not None:
        overrides["metrics"] = {"port": args.metrics_port}
    return overrides


def cmd_run(args: argparse.Namespace) -> int:
    from sidecar.relay import service

    settings = configured_settings(args, **_relay_overrides(args))
    if settings.relay.workers > 1:
        argv = _without_option(args.argv, "--workers")
        if settings.metrics.port:
            # Worker i listens on port + i (its environment): a flag would give them all one.
            argv = _without_option(argv, "--metrics-port")
        return service.run_workers(argv, settings.relay.workers, settings.metrics.port)
    return service.run_relay(settings)


def _without_option(argv: Sequence[str], option: str) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == option:
            skip = True
        elif not arg.startswith(option + "="):
            out.append(arg)
    return out


def add_run(commands: Commands) -> None:
    width = min(shutil.get_terminal_size().columns - 2, _MAX_HELP_WIDTH)  # as argparse's own
    p = commands.add_parser(
        "run",
        help="relay input topics to compressed output topics (at least once)",
        epilog=environment_help(width),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--input-topic", action="append", metavar="TOPIC", help="repeatable")
    p.add_argument("--output-topic", metavar="NAME", help="default {topic}.zd")
    p.add_argument("--group-id", metavar="GROUP")
    p.add_argument("--create-topics", action="store_true", help="create missing output topics")
    p.add_argument(
        "--workers",
        type=setting_number(RelaySettings, "workers"),
        metavar="N",
        help="processes in the consumer group",
    )
    p.add_argument("--batch-size", type=setting_number(RelaySettings, "batch_size"), metavar="N")
    p.add_argument(
        "--metrics-port",
        type=setting_number(MetricsSettings, "port"),
        metavar="PORT",
        help="0 picks a free port",
    )
    p.add_argument("--pass-through", action="store_true", help="encode nothing (a cost baseline)")
    p.add_argument(
        "--mode",
        choices=get_args(RelayMode),
        help="encode (default) or decode: a compressed topic to {topic}.decoded",
    )
    p.add_argument(
        "--guarantee",
        choices=get_args(Guarantee),
        help="at-least-once (default), or exactly-once with Kafka transactions",
    )
    add_lifecycle_flags(p, "the relay")
    add_config_flags(p)
    p.set_defaults(func=cmd_run)
