"""A training sample split in two: the older part trains, the newest slice is held out.

The held-out part is what the candidates are measured on, so it is the most recent slice of the
sample, per partition by offset (by line for a file, whose line order is its time order): what
a dictionary will face is the stream's future, and a slice drawn from the same period as the
training part rewards what fits the sample rather than what lasts. `Span` says where the two
parts lie in the stream and how far apart they are.

Pure: values, positions and partitions in, lists out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from sidecar.codec import looks_compressed
from sidecar.training.params import DEFAULT_HELDOUT_FRACTION

#: A smaller sample holds out a larger share, so that at least this many values (at most half
#: the sample) judge the candidates: the promoted dictionary is refit on the older half of the
#: held-out values too (the newest measure its crossover), so a larger share costs it little.
#: With 32 package descriptions of 8 KB (`bench choice`, python-metadata) a fifth would be 6,
#: too few to judge anything.
MIN_HELDOUT: Final = 10

Unit = Literal["offset", "line"]
#: (partition, position, value) of one sampled record: its offset in the partition, or the line
#: number (from 1) of a file, whose partition is 0.
Positioned = tuple[int, int, bytes]
#: Per partition: the first and last position of one part.
Ranges = dict[int, tuple[int, int]]


@dataclass(frozen=True, slots=True)
class Span:
    """Where the two parts of a sample lie in the stream, per partition (positions inclusive)."""

    unit: Unit
    train: Ranges = field(default_factory=dict)
    heldout: Ranges = field(default_factory=dict)

    @property
    def gap(self) -> int | None:
        """Positions between the newest training value and the oldest held-out one, the least
        over the partitions that have both (0: adjacent); None when none has both."""
        gaps = [self.heldout[p][0] - self.train[p][1] - 1 for p in self.heldout if p in self.train]
        return min(gaps) if gaps else None

    def describe(self, ranges: Ranges) -> str:
        """`first-last` (one partition), else `p<partition> first-last` per partition."""
        if len(ranges) == 1:
            ((first, last),) = ranges.values()
            return f"{first}-{last}"
        return ", ".join(f"p{p} {first}-{last}" for p, (first, last) in sorted(ranges.items()))

    def fields(self) -> dict[str, Any]:
        """The flat form for a report or a log line."""
        return {
            "split_unit": self.unit,
            "train_range": self.describe(self.train),
            "heldout_range": self.describe(self.heldout),
            "heldout_gap": self.gap,
        }

    def sentence(self) -> str:
        """One line for a human-readable report."""
        units = f"{self.unit}s"
        gap = self.gap
        apart = (
            ""
            if gap is None
            else " (adjacent)"
            if gap == 0
            else f" ({gap:,} {units if gap > 1 else self.unit} between them)"
        )
        return (
            f"held out: the newest {units} {self.describe(self.heldout)}; trained on {units} "
            f"{self.describe(self.train)}{apart}"
        )


@dataclass(frozen=True, slots=True)
class TrainingSet:
    """Values split into training and held-out parts, each in the sample's order; `window`
    says where they came from, `span` where the parts lie (None: not known)."""

    train: list[bytes]
    heldout: list[bytes]
    window: str = ""
    span: Span | None = None

    @property
    def train_bytes(self) -> int:
        return sum(map(len, self.train))

    @property
    def heldout_bytes(self) -> int:
        return sum(map(len, self.heldout))


def usable(value: bytes | None) -> bool:
    """Whether a value can teach a dictionary anything: present, not empty, not compressed."""
    return bool(value) and value is not None and not looks_compressed(value)


def _ranges(entries: Sequence[Positioned]) -> Ranges:
    ranges: Ranges = {}
    for partition, position, _ in entries:
        first, last = ranges.get(partition, (position, position))
        ranges[partition] = (min(first, position), max(last, position))
    return ranges


def split_newest(
    entries: Iterable[Positioned],
    heldout_fraction: float = DEFAULT_HELDOUT_FRACTION,
    window: str = "",
    unit: Unit = "offset",
) -> TrainingSet:
    """Hold out the newest `heldout_fraction` of every partition's usable values (by position),
    train on the rest; both parts keep the order of `entries` (a reservoir's: arrival order).

    Unusable values are dropped first. The share rises for a small sample to hold out
    `MIN_HELDOUT` values (at most half of them). A partition holds out `round(n * share)` of its
    `n` values, so one with a single value only trains.
    """
    if not 0.0 < heldout_fraction < 1.0:
        raise ValueError("heldout_fraction must be between 0 and 1 (exclusive)")
    kept = [e for e in entries if usable(e[2])]
    share = max(heldout_fraction, min(0.5, MIN_HELDOUT / max(1, len(kept))))
    positions: dict[int, list[int]] = {}
    for partition, position, _ in kept:
        positions.setdefault(partition, []).append(position)
    # Per partition, the position from which values are held out.
    cut: dict[int, float] = {}
    for partition, seen in positions.items():
        held = round(len(seen) * share)
        cut[partition] = sorted(seen)[len(seen) - held] if held else float("inf")
    train = [e for e in kept if e[1] < cut[e[0]]]
    heldout = [e for e in kept if e[1] >= cut[e[0]]]
    return TrainingSet(
        train=[v for _, _, v in train],
        heldout=[v for _, _, v in heldout],
        window=window,
        span=Span(unit, _ranges(train), _ranges(heldout)),
    )


def split_ordered(values: Iterable[bytes], train_fraction: float, window: str = "") -> TrainingSet:
    """Train on the first `train_fraction` of `values`, hold out the rest (a time split); the
    span counts lines from 1, unusable values included."""
    if not 0.0 < train_fraction < 1.0:
        raise ValueError("train_fraction must be between 0 and 1 (exclusive)")
    kept = [(0, line, v) for line, v in enumerate(values, 1) if usable(v)]
    cut = round(len(kept) * train_fraction)
    return TrainingSet(
        train=[v for _, _, v in kept[:cut]],
        heldout=[v for _, _, v in kept[cut:]],
        window=window,
        span=Span("line", _ranges(kept[:cut]), _ranges(kept[cut:])),
    )
