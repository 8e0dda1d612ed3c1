"""`demo`: where the sidecar wins and where it steps aside, on a local broker (`make demo`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sidecar.cli.common import bench_bootstrap, number

if TYPE_CHECKING:
    from sidecar.cli.common import Commands


def cmd_demo(args: argparse.Namespace) -> int:
    bootstrap = bench_bootstrap()
    if args.relay:
        from sidecar.bench import demo_relay

        return demo_relay.main(bootstrap, duration=args.duration, rate=args.rate or 5000)
    from sidecar.bench import demo

    return demo.main(bootstrap, seconds=args.duration, rate=args.rate or demo.RATE)


def add_demo(commands: Commands) -> None:
    p = commands.add_parser(
        "demo", help="the proxy next to a producer, in bytes the broker stores (make demo)"
    )
    p.add_argument(
        "--duration",
        type=number(float, ge=20),
        default=70.0,
        metavar="S",
        help="seconds of small-batch traffic (the relay's story: of traffic)",
    )
    p.add_argument(
        "--rate",
        type=number(int, ge=100),
        metavar="N",
        help="events per second (default 2,000; the relay's story 5,000)",
    )
    p.add_argument(
        "--relay",
        action="store_true",
        help="the relay's story instead: zdict-sidecar run under a schema drift",
    )
    p.set_defaults(func=cmd_demo)
