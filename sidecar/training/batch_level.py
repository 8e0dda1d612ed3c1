"""The batch codec's level: the zstd `compression.level` of the producer batches the sidecar
writes, chosen at training by measurement, like the dictionary's level (`training.choice`).

Where batches fill, the sidecar writes raw values and the batch codec does the work: at
librdkafka's default level (3) that stores what producer zstd stores. A higher level stores
less, at a CPU price: on the real corpora of this machine level 9 stores 3-10 % fewer bytes
than level 3 at 512 records a batch (up to 22 % on kilobyte documents at 128), for 0.5 µs
(50-100 B records) to 8 µs (850 B) more CPU per record (`bench savings`, its level table).
So the held-out values are grouped into batches of `fills` records as Kafka frames them
(`record_batch`), compressed at every level of `levels` as librdkafka writes zstd
(`record_batch.producer_zstd`), and the level that stores the fewest bytes at the largest fill
is chosen among those whose extra CPU per record over level 3 fits the budget
(`training.batch_level_budget_us`); a costlier level must store `MIN_GAIN` fewer bytes than the
pick so far to replace it. The largest fill: the level matters where raw values
are written, which is where batches fill (`codec.output_mode`).

CPU is judged on a cost model (`batch_cost_ns`), not on timings, for the reason `training.cost`
gives: the same values give the same level on every run and every load. How it was measured:
zstd's streaming compression as librdkafka uses it (no pledged size, one context reused), one
thread, CPU time, the fastest of 3 runs after a warm-up, batches of 16, 128 and 512 records of
the 13 corpora of `bench savings` (32 B to 11 KB a record); a fixed cost per batch and a cost
per byte fitted by relative least squares; within 0.5-2x of the measurement on those corpora.
`bench savings` prints the measured CPU next to it.

librdkafka accepts `compression.level` up to 12 (`dictionaries.model.MAX_BATCH_LEVEL`): level 19,
which stores 5-17 % less again at 20-50 µs per 70 B record, is measured by the bench only.

Pure: values in, figures out; no Kafka, no I/O.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from sidecar.record_batch import PRODUCER_ZSTD_LEVEL, producer_zstd
from sidecar.wire.record_batch import BATCH_HEADER_BYTES, Record, records_section

#: Levels chosen among: librdkafka's default and the levels it accepts above it.
BATCH_LEVELS: Final = (3, 6, 9, 12)
#: Records per batch measured: from where raw values win on most corpora to a saturated
#: producer's batches.
BATCH_FILLS: Final = (16, 64, 256, 512)
#: A costlier level replaces the pick only when it stores at least this share fewer bytes: a
#: smaller gain is not worth its CPU, and is within what the stream's next values move.
MIN_GAIN: Final = 0.01
#: Per level: (CPU ns per batch, CPU ns per byte of its records section); see the module.
_BATCH_COST: Final[dict[int, tuple[float, float]]] = {
    1: (4000.0, 1.6),
    3: (4000.0, 2.0),
    6: (6240.0, 6.85),
    9: (7170.0, 9.77),
    12: (10090.0, 16.8),
    19: (10090.0, 232.0),
}
_COSTED: Final = sorted(_BATCH_COST)


def batch_cost_ns(level: int, section_bytes: float, records: int) -> float:
    """Estimated CPU ns per record to compress a batch of `records` records whose records
    section is `section_bytes` long at zstd `level` (a level between two modelled ones costs
    what the next slower one does; past the end, what the end does)."""
    slower = next((m for m in _COSTED if m >= level), _COSTED[-1])
    per_batch, per_byte = _BATCH_COST[slower]
    return (per_batch + per_byte * section_bytes) / max(1, records)


@dataclass(frozen=True, slots=True)
class LevelFigure:
    """One level at one fill: what the batches of the values store, and their CPU per record."""

    level: int
    fill: int
    records: int
    #: Bytes the batches store: headers, record framing, the compressed records.
    stored_bytes: int
    #: The cost model's CPU ns per record: what the budget judges.
    cost_ns: float
    #: Measured CPU ns per record, the fastest of the timing runs (0: not timed). Reported only.
    cpu_ns: float = 0.0

    @property
    def bytes_per_record(self) -> float:
        return self.stored_bytes / max(1, self.records)


@dataclass(frozen=True, slots=True)
class BatchLevel:
    """The level chosen, the fill and the budget it was judged at, and every figure measured."""

    level: int
    fill: int
    #: Extra CPU ns per record over level 3 the level may take (0: no budget).
    budget_ns: float
    figures: tuple[LevelFigure, ...]

    def at(self, level: int, fill: int) -> LevelFigure | None:
        """The figure of `level` at `fill`, if measured."""
        return next((f for f in self.figures if (f.level, f.fill) == (level, fill)), None)

    @property
    def saving(self) -> float:
        """The chosen level's stored bytes over level 3's, at the fill judged (1.0: level 3)."""
        chosen, default = self.at(self.level, self.fill), self.at(PRODUCER_ZSTD_LEVEL, self.fill)
        if chosen is None or default is None or not default.stored_bytes:
            return 1.0
        return chosen.stored_bytes / default.stored_bytes

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the pick and a row per (level, fill)."""
        return {
            "level": self.level,
            "fill": self.fill,
            "budget_ns_per_record": round(self.budget_ns),
            "stored_vs_level_3": round(self.saving, 4),
            "figures": [
                {
                    "level": f.level,
                    "fill": f.fill,
                    "records": f.records,
                    "stored_bytes": f.stored_bytes,
                    "bytes_per_record": round(f.bytes_per_record, 2),
                    "cost_ns_per_record": round(f.cost_ns),
                    "cpu_ns_per_record": round(f.cpu_ns),
                }
                for f in self.figures
            ],
        }


def level_figures(
    values: Sequence[bytes],
    levels: Sequence[int] = BATCH_LEVELS,
    fills: Sequence[int] = BATCH_FILLS,
    *,
    timing_runs: int = 0,
) -> list[LevelFigure]:
    """Every level at every fill the values hold one whole batch of (at least the smallest
    fill, as one batch of them all): `values` cut into consecutive batches of the fill (whole
    batches only), each compressed on its own as librdkafka does. `timing_runs` > 0: the CPU
    is measured too (one warm-up, then the fastest of that many runs)."""
    records: list[Record] = [(v, ()) for v in values]
    measured = [f for f in fills if f <= len(records)] or [max(1, len(records))]
    out: list[LevelFigure] = []
    for fill in measured:
        whole = len(records) - len(records) % fill
        sections = [records_section(records[i : i + fill]) for i in range(0, whole, fill)]
        section_bytes = sum(map(len, sections)) / max(1, len(sections))
        for level in levels:
            compress = producer_zstd(level)
            stored = sum(BATCH_HEADER_BYTES + min(len(s), len(compress(s))) for s in sections)
            cpu = _timed(compress, sections, timing_runs) / max(1, whole) if timing_runs else 0.0
            out.append(
                LevelFigure(
                    level=level,
                    fill=fill,
                    records=whole,
                    stored_bytes=stored,
                    cost_ns=batch_cost_ns(level, section_bytes, fill),
                    cpu_ns=cpu,
                )
            )
    return out


def _timed(compress: Any, sections: Sequence[bytes], runs: int) -> float:
    """CPU ns of the fastest of `runs` passes over `sections`, after a warm-up pass."""
    best = float("inf")
    for run in range(runs + 1):
        started = time.thread_time_ns()
        for section in sections:
            compress(section)
        elapsed = time.thread_time_ns() - started
        if run:
            best = min(best, elapsed)
    return best


def choose_batch_level(figures: Sequence[LevelFigure], fill: int, budget_ns: float) -> int:
    """The level among `figures` at `fill` (see the module): the fewest bytes among the levels
    whose cost model's extra CPU per record over level 3 fits `budget_ns` (0: no budget), a
    costlier level replacing the pick only for `MIN_GAIN` fewer bytes. Level 3 when nothing
    else fits, or when `fill` was not measured."""
    at_fill = sorted((f for f in figures if f.fill == fill), key=lambda f: f.cost_ns)
    default = next((f for f in at_fill if f.level == PRODUCER_ZSTD_LEVEL), None)
    if default is None:
        return PRODUCER_ZSTD_LEVEL
    pick = default
    for figure in at_fill:
        if budget_ns and figure.cost_ns - default.cost_ns > budget_ns:
            continue
        if figure.stored_bytes <= pick.stored_bytes * (1.0 - MIN_GAIN):
            pick = figure
    return pick.level


def measure_batch_level(
    values: Sequence[bytes],
    budget_ns: float,
    levels: Sequence[int] = BATCH_LEVELS,
    fills: Sequence[int] = BATCH_FILLS,
) -> BatchLevel:
    """The batch level of `values` (held-out values, as the producer will batch them) within
    `budget_ns` extra CPU ns per record, judged at the largest fill they hold (see the module).

    Raises:
        ValueError: no values, or level 3 not among `levels` (the baseline every level is
            judged against).
    """
    if not values:
        raise ValueError("the batch level needs at least one value")
    if PRODUCER_ZSTD_LEVEL not in levels:
        raise ValueError(f"levels must include {PRODUCER_ZSTD_LEVEL}, the producer's default")
    figures = level_figures(values, levels, fills)
    fill = max(f.fill for f in figures)
    level = choose_batch_level(figures, fill, budget_ns)
    return BatchLevel(level=level, fill=fill, budget_ns=budget_ns, figures=tuple(figures))
