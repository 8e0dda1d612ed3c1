"""`bench savings`: through the proxy and the relay, on every real corpus, the broker's stored
bytes against the better of frames and producer zstd (`sidecar/bench/savings.py`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from sidecar.cli.bench_common import fills
from sidecar.cli.bench_offline import corpora_of
from sidecar.cli.common import bench_bootstrap, number, output_file, write_bench_results
from sidecar.errors import ConfigError

if TYPE_CHECKING:
    from sidecar.cli.common import Commands


def cmd_bench_savings(args: argparse.Namespace) -> int:
    from sidecar.bench import savings
    from sidecar.bench.savings_tables import savings_tables

    if args.data_dir is None:
        raise ConfigError(
            "--data-dir is required: the broker's log.dirs, whose segments are measured "
            "(the local broker's is deploy/kafka/.cache/run/data)"
        )
    corpora = corpora_of(args)
    bootstrap = bench_bootstrap()
    results = savings.bench_savings(bootstrap, Path(args.data_dir), corpora, fills=args.fills)
    document = [r.to_dict() for r in results]
    settings = {
        "corpora": args.corpus,
        "limit": args.limit,
        "fills": list(args.fills),
        "sample": savings.SAMPLE,
        "batches": savings.BATCHES,
        "min_records": savings.MIN_RECORDS,
        "target": savings.TARGET,
        "data_dir": args.data_dir,
    }
    print()
    print("\n".join(savings_tables({"settings": settings, "results": document})))
    write_bench_results("savings", settings, document, args.json_out)
    return 0


def add_bench_savings(benches: Commands) -> None:
    b = benches.add_parser(
        "savings",
        help="through the proxy and the relay on real corpora: stored bytes vs frames and "
        "producer zstd",
    )
    b.add_argument("--corpus", action="append", metavar="NAME", help="repeatable; default all")
    b.add_argument("--limit", type=number(int, ge=1), default=20_000, help="messages per corpus")
    b.add_argument(
        "--fills", type=fills, default="1,4,16,32,64,128,512", help="records per batch (comma list)"
    )
    b.add_argument("--data-dir", metavar="DIR", help="the broker's log.dirs (segments measured)")
    b.add_argument("--json-out", type=output_file, default="out/bench-savings.json", metavar="FILE")
    b.set_defaults(func=cmd_bench_savings)
