"""Training decisions: sample → candidates → held-out evaluation → promote or reject.

Pure logic: no Kafka, no files. Given training and held-out values it trains candidate
dictionaries over a grid of sizes, measures every (size, level) pair on the held-out values one
message at a time (header bytes counted, pass-through applied as the encoder would), picks the
smallest output whose encode speed meets the budget, computes the break-even size and compares
the result with the current champion on the same held-out set.

Held-out values never enter training: every ratio this module reports is an out-of-sample ratio.
"""

from __future__ import annotations

import hashlib
import re
import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any, Final

import zstandard

from sidecar.codec import Encoder, FrameOptions, looks_compressed
from sidecar.dictionaries.model import MIN_DICT_ID, Dictionary, TrainingSample, build_dictionary
from sidecar.runtime import tune_gc

KIB: Final = 1024
#: Default speed budget: messages/s one thread must encode (see README, "Choosing the level").
DEFAULT_MIN_ENCODE_RATE: Final = 300_000.0
#: Dictionary sizes tried by default (bytes): 4 KiB to 112 KiB, zstd's default being 112 KiB.
DEFAULT_DICT_SIZES: Final = (4 * KIB, 8 * KIB, 16 * KIB, 32 * KIB, 64 * KIB, 112 * KIB)
#: Levels tried by default. Negative levels are zstd's fast modes.
DEFAULT_LEVELS: Final = (-1, 1, 3, 6, 9, 12)
# zstd's trainer wants ~10x more sample bytes than dictionary bytes; below that it over-fits or
# fails, so larger candidates are not tried at all.
_MIN_SAMPLE_BYTES_PER_DICT_BYTE: Final = 10
# Break-even sizes are found over buckets of this width (bytes).
_BUCKET: Final = 16


class Decision(StrEnum):
    """The result of one training run; the metrics label `result`."""

    PROMOTED = "promoted"
    REJECTED = "rejected"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class TrainingParams:
    """Knobs of one training run (the `training` settings)."""

    dict_sizes: tuple[int, ...] = DEFAULT_DICT_SIZES
    levels: tuple[int, ...] = DEFAULT_LEVELS
    #: Fewer usable samples than this (train + held-out) and no training is attempted.
    min_samples: int = 1000
    #: The challenger must produce at least this fraction fewer bytes than the champion.
    promotion_margin: float = 0.02
    #: Encode speed every chosen (size, level) must reach, messages/s on one thread.
    min_encode_rate: float = DEFAULT_MIN_ENCODE_RATE
    #: The size x level grid is measured on at most this many held-out values (the chosen
    #: candidate is then measured on all of them).
    grid_eval_limit: int = 4000
    #: Timing runs per measurement after one discarded warm-up; the median is used.
    timing_runs: int = 3
    frame: FrameOptions = field(default_factory=FrameOptions)
    header_key: str = "zd"
    #: Regular expressions whose matches are removed from training values (never from held-out
    #: values: the ratio is measured on what the relay will really see).
    scrub: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TrainingSet:
    """Values split into training and held-out parts; `window` says where they came from."""

    train: list[bytes]
    heldout: list[bytes]
    window: str = ""

    @property
    def train_bytes(self) -> int:
        return sum(map(len, self.train))

    @property
    def heldout_bytes(self) -> int:
        return sum(map(len, self.heldout))


def usable(value: bytes | None) -> bool:
    """Whether a value can teach a dictionary anything: present, not empty, not compressed."""
    return bool(value) and value is not None and not looks_compressed(value)


def split_ordered(values: Iterable[bytes], train_fraction: float, window: str = "") -> TrainingSet:
    """Train on the first `train_fraction` of `values`, hold out the rest (a time split)."""
    if not 0.0 < train_fraction < 1.0:
        raise ValueError("train_fraction must be between 0 and 1 (exclusive)")
    kept = [v for v in values if usable(v)]
    cut = round(len(kept) * train_fraction)
    return TrainingSet(train=kept[:cut], heldout=kept[cut:], window=window)


def scrubbed(values: list[bytes], patterns: Sequence[str]) -> list[bytes]:
    """`values` with every match of `patterns` removed (a privacy filter for training samples).

    A dictionary holds verbatim fragments of what it was trained on; fields removed here never
    reach it. Values that become empty are dropped.
    """
    if not patterns:
        return values
    regex = re.compile(b"|".join(b"(?:" + p.encode() + b")" for p in patterns))
    out = [regex.sub(b"", v) for v in values]
    return [v for v in out if v]


def heldout_by_key(key: bytes, heldout_fraction: float) -> bool:
    """Deterministic split: True if the record with `key` (e.g. topic/partition/offset) is held out.

    A hash rather than a counter, so the same record lands on the same side on every host and
    after every restart.
    """
    digest = hashlib.blake2b(key, digest_size=8).digest()
    return int.from_bytes(digest, "big") < heldout_fraction * 2**64


def split_by_key(
    records: Iterable[tuple[bytes, bytes]], heldout_fraction: float, window: str = ""
) -> TrainingSet:
    """Split `(key, value)` pairs with `heldout_by_key`; unusable values are dropped."""
    if not 0.0 < heldout_fraction < 1.0:
        raise ValueError("heldout_fraction must be between 0 and 1 (exclusive)")
    train: list[bytes] = []
    heldout: list[bytes] = []
    for key, value in records:
        if usable(value):
            (heldout if heldout_by_key(key, heldout_fraction) else train).append(value)
    return TrainingSet(train=train, heldout=heldout, window=window)


@dataclass(frozen=True, slots=True)
class Measurement:
    """One configuration measured on held-out values, per message, header bytes counted."""

    label: str
    dict_size: int  # requested size, bytes (0: no dictionary)
    dict_bytes: int  # actual size, bytes; zstd may return less than requested
    level: int
    raw_bytes: int
    output_bytes: int
    compressed_share: float  # fraction of messages that were worth compressing
    encode_ns_per_message: float  # median over the timing runs
    encode_ns_min: float
    encode_ns_max: float
    meets_budget: bool = True

    @property
    def ratio(self) -> float:
        return self.raw_bytes / self.output_bytes if self.output_bytes else 1.0

    @property
    def messages_per_second(self) -> float:
        return 1e9 / self.encode_ns_per_message if self.encode_ns_per_message else 0.0


@dataclass(slots=True)
class TrainingReport:
    """Everything one training run measured and decided; what `train --json` prints."""

    namespace: str
    decision: Decision
    reason: str
    train_count: int = 0
    train_bytes: int = 0
    heldout_count: int = 0
    heldout_bytes: int = 0
    candidates: list[Measurement] = field(default_factory=list)
    chosen: Measurement | None = None
    nodict: Measurement | None = None
    champion: Measurement | None = None
    champion_id: int | None = None
    break_even_size: int = 0
    train_seconds: float = 0.0
    eval_seconds: float = 0.0
    min_encode_rate: float = 0.0
    dictionary: bytes | None = field(default=None, repr=False)
    failures: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """The headline numbers, flat (a log line, the registry's training entry)."""

        def ratio(m: Measurement | None) -> float | None:
            return None if m is None else round(m.ratio, 4)

        chosen = self.chosen
        return {
            "namespace": self.namespace,
            "decision": self.decision.value,
            "reason": self.reason,
            "train_count": self.train_count,
            "heldout_count": self.heldout_count,
            "heldout_ratio": ratio(chosen),
            "nodict_ratio": ratio(self.nodict),
            "champion_ratio": ratio(self.champion),
            "champion_id": self.champion_id,
            "dict_size": chosen.dict_size if chosen else None,
            # not "level": in a log line that is the log level
            "zstd_level": chosen.level if chosen else None,
            "break_even_size": self.break_even_size,
            "train_seconds": round(self.train_seconds, 3),
            "eval_seconds": round(self.eval_seconds, 3),
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; ratios and speeds included, dictionary bytes left out."""

        def m(x: Measurement | None) -> dict[str, Any] | None:
            if x is None:
                return None
            rate = round(x.messages_per_second)
            return {**asdict(x), "ratio": round(x.ratio, 4), "messages_per_second": rate}

        return {
            "namespace": self.namespace,
            "decision": self.decision.value,
            "reason": self.reason,
            "train": {"count": self.train_count, "bytes": self.train_bytes},
            "heldout": {"count": self.heldout_count, "bytes": self.heldout_bytes},
            "chosen": m(self.chosen),
            "nodict": m(self.nodict),
            "champion": m(self.champion),
            "champion_id": self.champion_id,
            "break_even_size": self.break_even_size,
            "train_seconds": round(self.train_seconds, 3),
            "eval_seconds": round(self.eval_seconds, 3),
            "min_encode_rate": self.min_encode_rate,
            "candidates": [m(c) for c in self.candidates],
            "failures": self.failures,
        }


def candidate_dictionary(data: bytes, level: int, namespace: str) -> Dictionary:
    """A stand-in Dictionary for measuring trained bytes before the store gives them an id.

    It carries a representative id from the bottom of our range, so the frame's dictionary-id
    field and the header value have the size real records will have (2 and 5 bytes).
    """
    return build_dictionary(
        namespace,
        data,
        dict_id=MIN_DICT_ID,
        version=1,
        level=level,
        heldout_ratio=0.0,
        nodict_ratio=0.0,
        break_even_size=0,
        training=TrainingSample(count=0, bytes=0, heldout_count=0, heldout_bytes=0),
    )


def _time_encode(encoder: Encoder, values: list[bytes], runs: int) -> list[float]:
    """CPU ns per message of `encode_batch` over `values`: one warm-up, then `runs` runs.

    Timed with the garbage-collector settings the relay runs with, so the speed budget is
    checked against the speed the relay will see. The clock is this thread's CPU time, not the
    wall clock: training runs beside a busy relay (at a lower priority), and being preempted
    must not make a level look slow.
    """
    records: list[tuple[bytes | None, None]] = [(v, None) for v in values]
    timings: list[float] = []
    with tune_gc():
        for run in range(runs + 1):
            start = time.thread_time_ns()
            encoder.encode_batch(records)
            elapsed = time.thread_time_ns() - start
            if run:  # run 0 is the warm-up
                timings.append(elapsed / max(1, len(values)))
    return timings


def measure(
    label: str,
    dictionary: Dictionary | None,
    level: int,
    values: list[bytes],
    params: TrainingParams,
    dict_size: int = 0,
) -> tuple[Measurement, list[tuple[int, bool]]]:
    """Measure one configuration on `values` exactly as the relay would encode them.

    Returns the measurement and, per value, `(raw size, shrank?)` for the break-even analysis.
    The encoder runs with no size threshold, so every value is tried.
    """
    encoder = Encoder(
        dictionary, level=level, min_size=0, header_key=params.header_key, frame=params.frame
    )
    results = encoder.encode_batch([(v, None) for v in values])
    shrank = [(r.input_bytes, r.output_bytes < r.input_bytes) for r in results]
    timings = _time_encode(encoder, values, params.timing_runs)
    median = statistics.median(timings)
    measurement = Measurement(
        label=label,
        dict_size=dict_size,
        dict_bytes=0 if dictionary is None else dictionary.meta.size,
        level=level,
        raw_bytes=sum(r.input_bytes for r in results),
        output_bytes=sum(r.output_bytes for r in results),
        compressed_share=sum(s for _, s in shrank) / max(1, len(shrank)),
        encode_ns_per_message=median,
        encode_ns_min=min(timings),
        encode_ns_max=max(timings),
        meets_budget=1e9 / median >= params.min_encode_rate if median else True,
    )
    return measurement, shrank


def break_even_size(shrank: Sequence[tuple[int, bool]]) -> int:
    """Smallest size (bytes) from which most messages of every larger size bucket shrink.

    Messages are grouped into buckets of 16 bytes; the break-even size is the lower edge of the
    first bucket from which every non-empty bucket has at least half of its messages shrinking.
    If no bucket qualifies, it is one byte above the largest message (nothing is worth it).
    """
    buckets: dict[int, list[bool]] = {}
    for size, ok in shrank:
        buckets.setdefault(size // _BUCKET, []).append(ok)
    if not buckets:
        return 0
    edge = max(buckets) + 1
    for bucket in sorted(buckets, reverse=True):
        outcomes = buckets[bucket]
        if sum(outcomes) * 2 < len(outcomes):
            break
        edge = bucket
    if edge > max(buckets):
        return max(size for size, _ in shrank) + 1
    return edge * _BUCKET


def _candidate_sizes(params: TrainingParams, train_bytes: int) -> list[int]:
    sizes = sorted(set(params.dict_sizes))
    fitting = [s for s in sizes if s * _MIN_SAMPLE_BYTES_PER_DICT_BYTE <= train_bytes]
    return fitting or sizes[:1]


def _pick(candidates: list[Measurement]) -> Measurement:
    """The smallest output among candidates within the speed budget, else the fastest."""
    within = [c for c in candidates if c.meets_budget]
    if within:
        return min(within, key=lambda c: (c.output_bytes, c.encode_ns_per_message))
    return min(candidates, key=lambda c: c.encode_ns_per_message)


def train(
    samples: TrainingSet,
    params: TrainingParams = TrainingParams(),
    *,
    namespace: str,
    champion: Dictionary | None = None,
) -> TrainingReport:
    """Train, evaluate on the held-out values and decide. Never raises for bad samples.

    Steps:
    1. refuse too few usable samples (decision FAILED, with the counts);
    2. train one dictionary per candidate size that the sample can support;
    3. measure every size x level on (up to `grid_eval_limit`) held-out values, and pick the
       smallest output within the speed budget;
    4. measure the pick, no dictionary and the champion on all held-out values;
    5. promote if there is no champion, or the pick beats it by `promotion_margin`, and it beats
       compressing without a dictionary; otherwise reject. The numbers are kept either way.
    """
    report = TrainingReport(
        namespace=namespace,
        decision=Decision.FAILED,
        reason="",
        train_count=len(samples.train),
        train_bytes=samples.train_bytes,
        heldout_count=len(samples.heldout),
        heldout_bytes=samples.heldout_bytes,
        min_encode_rate=params.min_encode_rate,
        champion_id=champion.id if champion else None,
    )
    total = len(samples.train) + len(samples.heldout)
    if total < params.min_samples or len(samples.train) < 10 or len(samples.heldout) < 10:
        report.reason = (
            f"too few usable samples: {len(samples.train)} training + {len(samples.heldout)} "
            f"held-out, at least {params.min_samples} needed (and 10 on each side); "
            "records keep flowing without a dictionary meanwhile"
        )
        return report

    started = time.perf_counter()
    trained: dict[int, bytes] = {}
    # The zstandard stub's element type; scrubbing applies to what trains, nothing else.
    sample: list[bytes | bytearray | memoryview] = list(scrubbed(samples.train, params.scrub))
    for size in _candidate_sizes(params, samples.train_bytes):
        try:
            trained[size] = zstandard.train_dictionary(size, sample).as_bytes()
        except zstandard.ZstdError as exc:
            report.failures.append(f"{size}-byte dictionary: zstd training failed: {exc}")
    report.train_seconds = time.perf_counter() - started
    if not trained:
        report.reason = (
            "zstd could not train any dictionary from these samples "
            f"({'; '.join(report.failures)}); they may be too uniform or too few"
        )
        return report

    started = time.perf_counter()
    grid_values = samples.heldout[: params.grid_eval_limit]
    for size, data in trained.items():
        for level in params.levels:
            dictionary = candidate_dictionary(data, level, namespace)
            label = f"dict {size // KIB} KiB"
            measurement, _ = measure(label, dictionary, level, grid_values, params, size)
            report.candidates.append(measurement)
    best = _pick(report.candidates)
    chosen_dict = candidate_dictionary(trained[best.dict_size], best.level, namespace)
    chosen, shrank = measure(
        best.label, chosen_dict, best.level, samples.heldout, params, best.dict_size
    )
    # The budget verdict is the grid's: it decided the pick, and one more timing run on a busy
    # machine must not contradict the reason printed for it.
    report.chosen = replace(chosen, meets_budget=best.meets_budget)
    report.break_even_size = break_even_size(shrank)
    report.nodict, _ = measure("no dictionary", None, 3, samples.heldout, params)
    if champion is not None:
        report.champion, _ = measure(
            f"champion {champion.id}",
            champion,
            champion.meta.level,
            samples.heldout,
            params,
            champion.meta.size,
        )
    report.eval_seconds = time.perf_counter() - started
    report.dictionary = chosen_dict.data
    _decide(report, params)
    return report


def _decide(report: TrainingReport, params: TrainingParams) -> None:
    chosen, nodict, champion = report.chosen, report.nodict, report.champion
    assert chosen is not None and nodict is not None
    speed = (
        ""
        if chosen.meets_budget
        else (f" (no candidate reached {params.min_encode_rate:,.0f} msg/s; the fastest was taken)")
    )
    if chosen.output_bytes >= nodict.output_bytes:
        report.decision = Decision.REJECTED
        report.reason = (
            f"the dictionary does not beat compressing without one on held-out data "
            f"(ratio {chosen.ratio:.3f} vs {nodict.ratio:.3f})"
        )
    elif champion is None:
        report.decision = Decision.PROMOTED
        report.reason = f"first dictionary: held-out ratio {chosen.ratio:.3f}{speed}"
    elif chosen.output_bytes <= champion.output_bytes * (1.0 - params.promotion_margin):
        report.decision = Decision.PROMOTED
        report.reason = (
            f"held-out ratio {chosen.ratio:.3f} beats champion {report.champion_id} "
            f"({champion.ratio:.3f}) by more than {params.promotion_margin:.1%}{speed}"
        )
    else:
        report.decision = Decision.REJECTED
        report.reason = (
            f"held-out ratio {chosen.ratio:.3f} does not beat champion {report.champion_id} "
            f"({champion.ratio:.3f}) by the {params.promotion_margin:.1%} margin"
        )
