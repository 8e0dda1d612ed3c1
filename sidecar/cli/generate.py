"""`generate`: deterministic sample events, one per line on stdout."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, BinaryIO

from sidecar.bench.events import KINDS, generate
from sidecar.cli.common import number

if TYPE_CHECKING:
    from sidecar.cli.common import Commands


def cmd_generate(args: argparse.Namespace) -> int:
    out: BinaryIO = sys.stdout.buffer
    events = generate(args.kind, args.count, seed=args.seed, drift_at=args.drift_at)
    out.writelines(event + b"\n" for event in events)
    out.flush()
    return 0


def add_generate(commands: Commands) -> None:
    p = commands.add_parser("generate", help="print deterministic sample events, one per line")
    p.add_argument("--kind", choices=KINDS, default="product_viewed")
    p.add_argument(
        "-n", "--count", type=number(int, ge=0), default=10_000, help="events (default 10000)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--drift-at", type=number(int, ge=0), metavar="K", help="change the schema after K events"
    )
    p.set_defaults(func=cmd_generate)
