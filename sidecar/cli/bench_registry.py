"""`bench registry`: what a registry reader's start costs as the registry grows."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from sidecar.cli.bench_common import rounds
from sidecar.cli.common import bench_bootstrap, number, output_file, write_bench_results

if TYPE_CHECKING:
    from sidecar.cli.common import Commands


def levels(text: str) -> list[int]:
    """`--levels`: registry sizes, a comma list of ascending integers >= 1."""
    size = number(int, ge=1, le=1_000_000)
    try:
        values = [size(item.strip()) for item in text.split(",")]
    except argparse.ArgumentTypeError:
        values = []
    if not values or values != sorted(set(values)):
        raise argparse.ArgumentTypeError(
            f"expected a comma list of ascending dictionary counts >= 1, got {text!r}"
        )
    return values


def cmd_bench_registry(args: argparse.Namespace) -> int:
    from sidecar.bench import registry as bench
    from sidecar.bench.registry_tables import registry_tables

    bootstrap = bench_bootstrap()
    results = bench.bench_registry(
        bootstrap, levels=args.levels, namespaces=args.namespaces, size=args.size, runs=args.runs
    )
    document = {"settings": results.settings, "results": bench.results_dict(results)}
    # The JSON's numbers as FIGURES.md reads them: a round trip, not the dataclasses.
    print("\n" + "\n".join(registry_tables(json.loads(json.dumps(document)))))
    write_bench_results("registry", results.settings, document["results"], args.json_out)
    return 0


def add_bench_registry(benches: Commands) -> None:
    b = benches.add_parser(
        "registry", help="a registry reader's start (proxy, consumer, dicts list) at N dictionaries"
    )
    b.add_argument(
        "--levels",
        type=levels,
        default=[100, 1_000, 10_000],
        help="dictionaries in the registry, ascending (default 100,1000,10000)",
    )
    b.add_argument(
        "--namespaces", type=number(int, ge=1, le=1000), default=100, help="(default 100)"
    )
    b.add_argument(
        "--size",
        type=number(int, ge=1024, le=1024 * 1024),
        default=64 * 1024,
        help="bytes of the trained dictionaries (default 65536)",
    )
    b.add_argument("--runs", type=rounds, default=3, help="runs per size (>= 3)")
    b.add_argument(
        "--json-out", type=output_file, default="out/bench-registry.json", metavar="FILE"
    )
    b.set_defaults(func=cmd_bench_registry)
