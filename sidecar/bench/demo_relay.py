"""`zdict-sidecar demo --relay`: the relay's story on a local broker, in about a minute and a half.

1. create an input topic (3 partitions) and start the sidecar on it (`zdict-sidecar run`, a real
   subprocess) with no dictionary, a registry topic of its own and training on;
2. produce generated events at a steady rate; the sidecar samples them, trains a first
   dictionary, publishes it to the registry and switches to it;
3. halfway, the events' schema changes: the ratio drops, the sidecar notices (drift),
   retrains and switches again;
4. stop producing, let the sidecar catch up, stop it (SIGTERM), read the output back, decode
   every record with a decoder that knows only the registry topic, and print what was saved.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from sidecar.bench.workload import DriftRun, SidecarProcess, drift_run
from sidecar.tools.tables import render


def _progress() -> Any:
    shown = {"points": 0, "events": 0}

    def show(run: DriftRun, sidecar: SidecarProcess) -> None:
        for event in sidecar.events()[shown["events"] :]:
            shown["events"] += 1
            name = event.get("event")
            if name == "training_finished":
                print(
                    f"  sidecar: training ({event.get('trigger')}) {event.get('decision')}: "
                    f"{event.get('reason')}"
                )
            elif name == "dictionary_loaded":
                print(f"  sidecar: now compressing with dictionary {event.get('dict_id')}")
        ratios = run.ratios()
        if len(run.points) - shown["points"] >= 5 and ratios:
            shown["points"] = len(run.points)
            point = run.points[-1]
            phase = "after the schema change" if point.t >= run.drift_at else "steady"
            print(
                f"t={point.t:4.0f} s  relayed {point.messages:9,.0f}  ratio (last 5 s) "
                f"{ratios[-1][1]:.2f}  dictionary {point.dict_id or '-'}  ({phase})"
            )

    return show


def main(bootstrap: str, duration: float = 60.0, rate: int = 5000) -> int:
    work = Path(tempfile.mkdtemp(prefix="zdict-demo-"))
    drift_after = round(duration / 2)
    print(
        f"demo on {bootstrap}: {rate:,} product_viewed events/s for {duration:.0f} s, the schema "
        f"changes after {drift_after} s; sidecar log and store in {work}"
    )
    run = drift_run(
        bootstrap,
        work,
        rate=rate,
        seconds=duration,
        drift_after=drift_after,
        progress=_progress(),
    )

    def at(t: float | None) -> str:
        return "-" if t is None else f"{t:.1f} s"

    def ratio(r: float | None) -> str:
        return "-" if r is None else f"{r:.2f}"

    raw, out = run.raw_bytes, run.output_bytes
    rows: list[list[object]] = [
        ["first dictionary active", at(run.first_dictionary)],
        ["schema change", at(run.drift_at)],
        ["drift detected, retraining", at(run.detected)],
        ["retrained dictionary active", at(run.switched)],
        ["ratio back to its level before the change", at(run.recovered)],
        [
            "ratio before / lowest after / at the end (5 s windows)",
            f"{ratio(run.pre_ratio)} / {ratio(run.dip_ratio)} / {ratio(run.post_ratio)}",
        ],
        ["messages produced / relayed", f"{run.produced:,} / {run.relayed:,}"],
        [
            "decoded byte-exact from the registry alone",
            f"{run.decoded:,} ({run.mismatched} mismatched)",
        ],
        ["raw value bytes / output bytes (values + zd headers)", f"{raw:,} / {out:,}"],
        ["ratio over the whole run", f"{raw / out:.3f}" if out else "-"],
        ["bytes saved", f"{raw - out:,} ({1 - out / raw:.1%})" if raw and out else "-"],
        ["sidecar exit code after SIGTERM", run.exit_code],
    ]
    print()
    print(render(("", "value"), rows, "demo: what the sidecar did (seconds since the start)"))
    ok = (
        run.exit_code == 0
        and run.relayed == run.produced
        and run.decoded == run.produced
        and not run.mismatched
    )
    return 0 if ok else 1
