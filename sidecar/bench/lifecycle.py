"""`zdict-sidecar bench lifecycle`: what keeping dictionaries fresh costs and gains, on a broker.

Part 1, **drift**: generated events at a steady rate through a fresh sidecar (training on, no
dictionary at the start, its own registry topic); the schema changes partway. The sidecar is
scraped every second. Per run: when the first dictionary was active, when the drift was
detected, when the retrained dictionary was active and when the ratio was back to its level
before the change; the ratio over time goes to the PNG.

Part 2, **cost**: the relay at full speed over a pre-loaded topic (starting with a published
dictionary) while the trainer retrains on a short schedule, so that training runs alternate with
idle periods within one run. Messages/s while a training run is under way are compared with
messages/s while none is, in the same run; the training process's share of the sidecar's CPU
(relay process + training process) comes from the sidecar's own counters.

Method: part 2 discards a warm-up round and reports the median [min-max] of the
measured rounds; part 1 reports every run and the median of its milestones.
"""

from __future__ import annotations

import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from sidecar.bench.codec import preload
from sidecar.bench.workload import DEMO_SETTINGS, DriftRun, SidecarProcess, drift_run

#: Part 2: how often the trainer may start a run (seconds), so active and idle periods alternate.
COST_SCHEDULE: Final = {
    "ZDICT_TRAINING__RETRAIN_INTERVAL": "5",
    "ZDICT_TRAINING__MIN_INTERVAL": "5",
}
#: Part 2: seconds between scrapes of the relay's counters.
SCRAPE_EVERY: Final = 0.5


@dataclass(slots=True)
class CostRound:
    """One relay run with a busy trainer: rates while training vs idle, CPU shares."""

    messages: int
    seconds: float
    training_runs: int
    training_seconds: list[float] = field(default_factory=list)
    active_rates: list[float] = field(default_factory=list)
    idle_rates: list[float] = field(default_factory=list)
    relay_cpu_seconds: float = 0.0
    training_cpu_seconds: float = 0.0
    series: list[tuple[float, float]] = field(default_factory=list)  # (t, msg/s)
    windows: list[tuple[float, float]] = field(default_factory=list)  # training (start, end)

    @property
    def active_rate(self) -> float:
        return statistics.median(self.active_rates) if self.active_rates else 0.0

    @property
    def idle_rate(self) -> float:
        return statistics.median(self.idle_rates) if self.idle_rates else 0.0

    @property
    def ratio(self) -> float:
        return self.active_rate / self.idle_rate if self.idle_rate else 0.0

    @property
    def cpu_share(self) -> float:
        total = self.relay_cpu_seconds + self.training_cpu_seconds
        return self.training_cpu_seconds / total if total else 0.0


def _metric(scrape: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str) -> float:
    return sum(v for (n, _), v in scrape.items() if n == name)


def cost_round(
    bootstrap: str, topic: str, messages: int, registry: str, work: Path, label: str
) -> CostRound:
    """Relay the pre-loaded `topic` once into a fresh output topic while the trainer is busy."""
    run_id = uuid.uuid4().hex[:8]
    env = {
        **COST_SCHEDULE,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "ZDICT_REGISTRY__TOPIC": registry,
        "ZDICT_REGISTRY__FOLLOW_INTERVAL": "1",
    }
    sidecar = SidecarProcess(
        [
            *("--input-topic", topic, "--output-topic", f"{topic}.{run_id}"),
            *("--group-id", f"bench-{run_id}", "--create-topics"),
            *("--dictionaries", str(work / run_id)),
        ],
        env,
        work / f"{label}-{run_id}.log",
    )
    points: list[tuple[float, float]] = []
    last: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    deadline = time.monotonic() + 900
    try:
        while time.monotonic() < deadline:
            if not sidecar.running():
                raise RuntimeError(f"the sidecar exited; see {sidecar.log_path}")
            scrape = sidecar.metrics()
            if scrape:
                last = scrape
                done = _metric(scrape, "zdict_records_total")
                points.append((time.time(), done))
                if done >= messages:
                    break
            time.sleep(SCRAPE_EVERY)
    finally:
        sidecar.stop()
    starts = sorted(e["t"] for e in sidecar.events("training_started"))
    finished = sidecar.events("training_finished")
    ends = sorted(e["t"] for e in finished)
    # Each run from its start to its end; one still under way when the round ended counts as
    # active up to the end (it was using CPU all along).
    round_end = points[-1][0] if points else 0.0
    windows = [(t, ends[i] if i < len(ends) else round_end) for i, t in enumerate(starts)]
    moving = [(t, n) for t, n in points if n > 0]
    result = CostRound(
        messages=messages,
        seconds=moving[-1][0] - moving[0][0] if len(moving) > 1 else 0.0,
        training_runs=len(finished),
        training_seconds=[float(e["seconds"]) for e in finished],
        relay_cpu_seconds=_metric(last, "process_cpu_seconds_total"),
        training_cpu_seconds=_metric(last, "zdict_training_cpu_seconds_total"),
        windows=[(a - moving[0][0], b - moving[0][0]) for a, b in windows] if moving else [],
    )
    # Rates between consecutive scrapes while records moved; the first and last intervals are
    # the ramp-up and the tail.
    for (t0, n0), (t1, n1) in itertools.pairwise(moving[1:-1]):
        rate = (n1 - n0) / (t1 - t0)
        result.series.append((t1 - moving[0][0], rate))
        inside = any(a <= t0 and t1 <= b for a, b in windows)
        outside = all(t1 <= a or b <= t0 for a, b in windows)
        if inside:
            result.active_rates.append(rate)
        elif outside:
            result.idle_rates.append(rate)
    return result


def publish_first_dictionary(bootstrap: str, topic: str, registry: str, work: Path) -> None:
    """`zdict-sidecar train --topic --publish`: the cost runs start with a champion."""
    env = {"KAFKA_BOOTSTRAP_SERVERS": bootstrap, "ZDICT_REGISTRY__TOPIC": registry}
    result = subprocess.run(
        [
            *(sys.executable, "-m", "sidecar", "train", "--topic", topic, "--publish"),
            *("--sample", "20000", "--dictionaries", str(work / "trained")),
        ],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"training the first dictionary failed: {result.stderr[-2000:]}")


@dataclass(slots=True)
class LifecycleResults:
    drift: list[DriftRun]
    cost: list[CostRound]
    cost_messages: int
    settings: dict[str, Any]


def bench_lifecycle(
    bootstrap: str,
    *,
    drift_runs: int,
    rate: int,
    seconds: float,
    drift_after: float,
    cost_rounds: int,
    cost_messages: int,
    progress: Any = print,
) -> LifecycleResults:
    """Run part 1 `drift_runs` times and part 2 `cost_rounds` times after a warm-up round."""
    work = Path(tempfile.mkdtemp(prefix="zdict-bench-lifecycle-"))
    drift: list[DriftRun] = []
    for i in range(drift_runs):
        progress(f"drift run {i + 1}/{drift_runs}: {rate:,}/s for {seconds:.0f} s ...")
        run = drift_run(
            bootstrap, work, rate=rate, seconds=seconds, drift_after=drift_after, verify=True
        )
        drift.append(run)
    topic = f"bench-lifecycle-{uuid.uuid4().hex[:6]}"
    registry = f"_zdict_dictionaries-{topic}"
    progress(f"cost: pre-loading {cost_messages:,} events into {topic} ...")
    preload(bootstrap, topic, "product_viewed", cost_messages, 4)
    publish_first_dictionary(bootstrap, topic, registry, work)
    cost: list[CostRound] = []
    for i in range(cost_rounds + 1):
        label = "warm-up" if i == 0 else f"round {i}/{cost_rounds}"
        progress(f"cost {label}: relaying {cost_messages:,} records with a busy trainer ...")
        result = cost_round(bootstrap, topic, cost_messages, registry, work, f"cost-{i}")
        if i:
            cost.append(result)
    settings = {
        "drift": {"rate": rate, "seconds": seconds, "drift_after": drift_after, **DEMO_SETTINGS},
        "cost": {"messages": cost_messages, "partitions": 4, **COST_SCHEDULE},
        "work_dir": str(work),
    }
    return LifecycleResults(drift, cost, cost_messages, settings)


def results_dict(results: LifecycleResults) -> dict[str, Any]:
    return {
        "drift": [run.to_dict() for run in results.drift],
        "cost": [
            {
                **{k: v for k, v in asdict(r).items() if k != "series"},
                "active_rate": r.active_rate,
                "idle_rate": r.idle_rate,
                "ratio": r.ratio,
                "cpu_share": r.cpu_share,
                "series": [[round(t, 2), round(v)] for t, v in r.series],
            }
            for r in results.cost
        ],
        "settings": results.settings,
    }


def plot(results: LifecycleResults, path: Path) -> Path:
    """Two panels: the ratio through the drift (every run), and the relay's msg/s with the
    training runs shaded (the median cost round)."""
    from sidecar.tools.charts import figure

    fig = figure(figsize=(10, 8), layout="constrained")
    top, bottom = fig.subplots(2, 1)
    for i, run in enumerate(results.drift):
        ts = [t for t, _ in run.ratios()]
        top.plot(ts, [r for _, r in run.ratios()], label=f"run {i + 1}", linewidth=1.2)
    first = results.drift[0]
    top.axvline(first.drift_at, color="black", linestyle="--", linewidth=1)
    top.annotate("schema change", (first.drift_at, top.get_ylim()[1]), ha="right", va="top")
    for run in results.drift:
        for t in (run.detected, run.switched):
            if t is not None:
                top.axvline(t, color="grey", linestyle=":", linewidth=0.8)
        if run.first_dictionary is not None:
            top.axvline(run.first_dictionary, color="green", linestyle=":", linewidth=0.8)
    top.set_title(
        f"compression ratio (input / output bytes, 5 s windows) at {first.rate:,} events/s; "
        "dotted: first dictionary (green), drift detected, retrained dictionary active",
        fontsize=9,
    )
    top.set_xlabel("seconds since the start")
    top.set_ylabel("ratio")
    top.legend(loc="lower right")
    top.grid(alpha=0.3)
    if results.cost:
        middle = sorted(results.cost, key=lambda r: r.ratio)[len(results.cost) // 2]
        bottom.plot([t for t, _ in middle.series], [v for _, v in middle.series], linewidth=1)
        for a, b in middle.windows:
            bottom.axvspan(a, b, color="orange", alpha=0.25)
        bottom.set_title(
            f"relay msg/s over {results.cost_messages:,} pre-loaded events; shaded: a training "
            f"run under way (active/idle = {middle.ratio:.2f} in this round)",
            fontsize=9,
        )
        bottom.set_xlabel("seconds since the first record")
        bottom.set_ylabel("messages/s")
        bottom.grid(alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path
