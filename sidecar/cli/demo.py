"""`demo`: the whole job on a local broker (`make demo`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sidecar.cli.common import bench_bootstrap, number

if TYPE_CHECKING:
    from sidecar.cli.common import Commands


def cmd_demo(args: argparse.Namespace) -> int:
    from sidecar.bench import demo

    bench_bootstrap()
    return demo.main(duration=args.duration, rate=args.rate)


def add_demo(commands: Commands) -> None:
    p = commands.add_parser("demo", help="the whole job on a local broker (make demo)")
    p.add_argument(
        "--duration",
        type=number(float, gt=0),
        default=60.0,
        metavar="S",
        help="seconds of traffic",
    )
    p.add_argument(
        "--rate", type=number(int, ge=1), default=5000, metavar="N", help="events per second"
    )
    p.set_defaults(func=cmd_demo)
