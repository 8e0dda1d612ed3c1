"""`bench lifecycle`: drift → retrain → recovery, and the relay's speed while training."""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from sidecar.cli.bench_common import MAX_INT32, median_range, rounds
from sidecar.cli.common import (
    bench_bootstrap,
    number,
    output_file,
    png_file,
    write_bench_results,
)
from sidecar.errors import ConfigError
from sidecar.tools.tables import render

if TYPE_CHECKING:
    from sidecar.bench.lifecycle import LifecycleResults
    from sidecar.cli.common import Commands


def cmd_bench_lifecycle(args: argparse.Namespace) -> int:
    from sidecar.bench import lifecycle as bench_lifecycle

    if not args.drift_after < args.seconds:
        raise ConfigError("--drift-after must be within --seconds")
    bootstrap = bench_bootstrap()
    results = bench_lifecycle.bench_lifecycle(
        bootstrap,
        drift_runs=args.runs,
        rate=args.rate,
        seconds=args.seconds,
        drift_after=args.drift_after,
        cost_rounds=args.cost_rounds,
        cost_messages=args.cost_messages,
    )
    print()
    print(format_lifecycle(results, args.rate, args.seconds, args.drift_after))
    write_bench_results(
        "lifecycle",
        results.settings,
        bench_lifecycle.results_dict(results),
        args.json_out,
        partial(bench_lifecycle.plot, results, Path(args.png)),
    )
    return 0


def format_lifecycle(
    results: LifecycleResults, rate: int, seconds: float, drift_after: float
) -> str:
    """`bench lifecycle`'s tables: every drift run and its milestones, the training runs beside
    the relay, then what a busy trainer costs the relay."""
    return "\n".join(
        [
            _format_drift(results, rate, seconds, drift_after),
            "",
            _format_trainings(results),
            "",
            _format_cost(results),
        ]
    )


def _format_drift(results: LifecycleResults, rate: int, seconds: float, drift_after: float) -> str:
    def at(t: float | None) -> str:
        return "-" if t is None else f"{t:.1f}"

    def since(t: float | None, start: float) -> float | None:
        return None if t is None else t - start

    rows: list[list[object]] = []
    for i, run in enumerate(results.drift, 1):
        rows.append(
            [
                i,
                at(run.first_dictionary),
                at(run.drift_at),
                at(since(run.detected, run.drift_at)),
                at(since(run.switched, run.drift_at)),
                at(since(run.recovered, run.drift_at)),
                " / ".join(
                    "-" if r is None else f"{r:.2f}"
                    for r in (run.heldout_ratio, run.pre_ratio, run.dip_ratio, run.post_ratio)
                ),
                f"{run.decoded:,}/{run.produced:,}",
            ]
        )
    recover = [r.recovered - r.drift_at for r in results.drift if r.recovered is not None]
    rows.append(["median", "", "", "", "", median_range(recover, "{:.1f}"), "", ""])
    return render(
        (
            "run",
            "first dict (s)",
            "change at (s)",
            "detected +s",
            "retrained active +s",
            "ratio back +s",
            "ratio held-out / before / low / end",
            "decoded from registry",
        ),
        rows,
        f"drift: {rate:,} product_viewed events/s for {seconds:.0f} s, schema "
        f"change after {drift_after:.0f} s (+s: seconds after the change)",
    )


def _format_trainings(results: LifecycleResults) -> str:
    trainings = [e for run in results.drift for e in run.trainings]
    seconds = [float(e["seconds"]) for e in trainings]
    cpu = [float(e["cpu_seconds"]) for e in trainings if e.get("cpu_seconds")]
    return (
        f"training runs beside the relay: {len(trainings)}, wall "
        f"{median_range(seconds, '{:.1f}')} s, CPU {median_range(cpu, '{:.1f}')} s "
        "(median [min-max])"
    )


def _format_cost(results: LifecycleResults) -> str:
    cost = results.cost
    rows = [
        ["msg/s while a training run is under way", median_range([r.active_rate for r in cost])],
        ["msg/s while none is", median_range([r.idle_rate for r in cost])],
        ["ratio active / idle (within each run)", median_range([r.ratio for r in cost], "{:.2f}")],
        [
            "training share of the sidecar's CPU",
            median_range([100 * r.cpu_share for r in cost], "{:.1f}%"),
        ],
        [
            "training run, wall seconds",
            median_range([s for r in cost for s in r.training_seconds], "{:.1f}"),
        ],
        ["training runs per round", median_range([r.training_runs for r in cost], "{:.0f}")],
    ]
    return render(
        ("", "median [min-max]"),
        rows,
        f"cost: relay over {results.cost_messages:,} pre-loaded events while the trainer "
        f"retrains every 5 s, {len(cost)} rounds after a warm-up",
    )


def add_bench_lifecycle(benches: Commands) -> None:
    b = benches.add_parser(
        "lifecycle", help="drift → retrain → recovery, and the relay's speed while training"
    )
    b.add_argument(
        "--runs", type=number(int, ge=1, le=MAX_INT32), default=3, help="drift runs (default 3)"
    )
    b.add_argument(
        "--rate", type=number(int, ge=1), default=5000, help="events/s in the drift runs"
    )
    b.add_argument(
        "--seconds", type=number(float, gt=0), default=90.0, help="length of one drift run"
    )
    b.add_argument(
        "--drift-after",
        type=number(float, gt=0),
        default=45.0,
        help="seconds before the change (within --seconds)",
    )
    b.add_argument(
        "--cost-rounds", type=rounds, default=3, help="measured rounds after a warm-up (>= 3)"
    )
    b.add_argument("--cost-messages", type=number(int, ge=1), default=2_000_000)
    b.add_argument(
        "--json-out", type=output_file, default="out/bench-lifecycle.json", metavar="FILE"
    )
    b.add_argument("--png", type=png_file, default="out/bench-lifecycle.png", metavar="FILE")
    b.set_defaults(func=cmd_bench_lifecycle)
