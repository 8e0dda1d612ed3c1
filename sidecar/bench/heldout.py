"""How many held-out messages a dictionary's held-out ratio needs before it can be trusted, on
the real corpora of this machine (`sidecar.bench.corpora`): the measurement behind
`training.min_heldout`.

Per corpus: a dictionary is trained on its first `TRAIN` usable messages (16 KiB, level 3,
measured as the relay encodes: header bytes counted, `training.choice.measure`). A held-out part
is the newest slice of a sample, and its ratio stands for what the dictionary will do next: so
for each size `n` of `SIZES`, `WINDOWS` windows of `n` consecutive later messages are measured,
each against the `FUTURE` messages that follow it; a window's error is how far its ratio is from
theirs, relatively. A size is stable enough when, in every corpus, the 90th percentile of its
windows' errors is within `TOLERANCE` (absolute) of the largest size's: more held-out messages
would not make the judgement much better. A corpus whose error at the largest size is above
`DRIFTING` changes faster than any held-out part can follow (its error is the stream's drift,
not the held-out size's): it is shown, and left out of the choice.

Run: `.venv/bin/python -m sidecar.bench.heldout` (prints a table; `--limit N` messages per
corpus).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import sysconfig
from dataclasses import dataclass
from typing import Final

from sidecar.bench.corpora import Corpus, collect_all
from sidecar.tools.tables import render
from sidecar.training.choice import candidate_dictionary, measure, train_dictionary
from sidecar.training.params import TrainingParams
from sidecar.training.split import usable

#: Messages the dictionary is trained on, the first of each corpus.
TRAIN: Final = 4000
#: Held-out sizes measured.
SIZES: Final = (10, 20, 50, 100, 200, 500, 1000)
#: Windows measured per size.
WINDOWS: Final = 40
#: Messages after a window whose ratio the window's must predict: what the relay encodes next.
FUTURE: Final = 1000
#: A size whose error is within this of the largest size's is stable enough.
TOLERANCE: Final = 0.05
#: An error above this at the largest size is the stream's drift (see the module).
DRIFTING: Final = 0.2
DICT_SIZE: Final = 16 * 1024
LEVEL: Final = 3


@dataclass(frozen=True, slots=True)
class Stability:
    """One corpus: its reference ratio and, per size, the 90th percentile of the windows'
    relative errors."""

    corpus: str
    later: int
    reference: float
    p90: dict[int, float]


def stability(corpus: Corpus, params: TrainingParams) -> Stability | None:
    """The measurement of one corpus (None: too short for `TRAIN` messages, then the largest
    window and its `FUTURE`)."""
    values = [m for m in corpus.messages if usable(m)]
    train, later = values[:TRAIN], values[TRAIN:]
    if len(later) < max(SIZES) + FUTURE:
        return None
    dictionary = candidate_dictionary(train_dictionary(DICT_SIZE, train), LEVEL, corpus.name)

    def ratio(part: list[bytes]) -> float:
        return measure("", dictionary, LEVEL, part, params).ratio

    p90: dict[int, float] = {}
    for size in SIZES:
        # Window starts spread evenly, each followed by its `FUTURE` messages.
        last = len(later) - size - FUTURE
        starts = sorted({round(last * k / (WINDOWS - 1)) for k in range(WINDOWS)})
        errors = [
            abs(ratio(later[i : i + size]) / ratio(later[i + size : i + size + FUTURE]) - 1)
            for i in starts
        ]
        p90[size] = statistics.quantiles(errors, n=10)[-1]
    return Stability(corpus.name, len(later), ratio(later), p90)


def stable_size(results: list[Stability]) -> int | None:
    """The smallest size stable enough in every corpus that does not drift (see the module)."""
    largest = max(SIZES)
    judged = [r for r in results if r.p90[largest] <= DRIFTING]
    for size in SIZES:
        if judged and all(r.p90[size] <= r.p90[largest] + TOLERANCE for r in judged):
            return size
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sidecar.bench.heldout", description=__doc__)
    parser.add_argument("--limit", type=int, default=20_000, help="messages per corpus")
    args = parser.parse_args(argv)
    corpora, missing = collect_all(sysconfig.get_paths()["purelib"], args.limit)
    if missing:
        print(f"corpora not on this machine: {', '.join(missing)}", file=sys.stderr)
    params = TrainingParams()
    results = [r for c in corpora if (r := stability(c, params)) is not None]
    rows = [
        [r.corpus, r.later, round(r.reference, 3), *(f"{r.p90[s]:.1%}" for s in SIZES)]
        for r in results
    ]
    title = (
        f"held-out ratio error: 90th percentile of {WINDOWS} windows of n consecutive messages, "
        f"each against the ratio of the {FUTURE} messages after it (dictionary of "
        f"{DICT_SIZE // 1024} KiB trained on the first {TRAIN}, level {LEVEL}; ratio: on all "
        "later messages)"
    )
    print(render(("corpus", "later", "ratio", *(f"n={s}" for s in SIZES)), rows, title))
    size = stable_size(results)
    drifting = [r.corpus for r in results if r.p90[max(SIZES)] > DRIFTING]
    print(
        f"smallest held-out size within {TOLERANCE:.0%} of n={max(SIZES)}'s error in every "
        f"corpus (drifting past {DRIFTING:.0%}, left out: {', '.join(drifting) or 'none'}): "
        + ("none measured" if size is None else str(size))
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
