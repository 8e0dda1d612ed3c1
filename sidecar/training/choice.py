"""Training decisions: sample → candidates → held-out evaluation → promote or reject.

Pure logic: no Kafka, no files. Given training and held-out values it trains candidate
dictionaries over a grid of sizes, measures every (size, level) pair on the held-out values one
message at a time (header bytes counted, pass-through applied as the encoder would), picks the
smallest output whose encode time fits the CPU budget (which scales with message size),
computes the break-even size and compares the result with no dictionary and with the current
champion on the same held-out set.

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

from sidecar.codec import (
    DEFAULT_HEADER_KEY,
    DEFAULT_WIRE_FORMAT,
    Encoder,
    FrameOptions,
    WireFormat,
    looks_compressed,
)
from sidecar.dictionaries.model import MIN_DICT_ID, Dictionary, TrainingSample, build_dictionary
from sidecar.runtime import tune_gc

KIB: Final = 1024
#: CPU budget of one message's encoding, the part every message gets whatever its size (µs):
#: about what the relay's own Kafka path costs per record from Python (`bench relay`), and
#: enough that level 3 on ~100-byte events (2-3 µs here) stays in budget on a busy machine.
DEFAULT_BUDGET_US_PER_MESSAGE: Final = 4.0
#: ... plus this much time per byte, as a throughput (MB/s of input on one core). Together:
#: 5 µs (~200,000 messages/s) at 100 B, 14 µs at 1 KB, 60 µs at 5.6 KB (~94 MB/s).
DEFAULT_BUDGET_MB_PER_S: Final = 100.0
#: Dictionary sizes tried by default (bytes): 2 KiB to 112 KiB, zstd's default being 112 KiB.
#: Sizes the training sample cannot fill are skipped; held-out data picks among the rest.
DEFAULT_DICT_SIZES: Final = (
    2 * KIB,
    4 * KIB,
    8 * KIB,
    16 * KIB,
    32 * KIB,
    64 * KIB,
    112 * KIB,
)
#: Levels tried by default. Negative levels are zstd's fast modes.
DEFAULT_LEVELS: Final = (-1, 1, 3, 6, 9, 12)
#: Share of a sample held out of training to measure the candidates on.
DEFAULT_HELDOUT_FRACTION: Final = 0.2
#: Fewer usable samples than this (train + held-out) and no training is attempted. It is only a
#: floor: 160 package descriptions of 8 KB, or a few hundred log lines, already train a
#: dictionary worth having (`zdict-sidecar bench choice`), and whether the held-out part is
#: large enough to trust is judged on the evidence itself (`gain_is_clear`).
DEFAULT_MIN_SAMPLES: Final = 50
#: The held-out part must show the dictionary's gain over no dictionary this many standard
#: errors clear of zero (paired, per message), or it is too small to judge.
CONFIDENCE_Z: Final = 3.0
#: Passing small values through saves CPU; it may make the held-out output at most this share
#: larger than compressing every value would (bytes come first: the CPU is within budget).
BREAK_EVEN_BYTE_LOSS: Final = 0.001
#: A candidate whose encode time is within this factor of the budget is affordable when
#: nothing fits the budget itself; the factor doubles until something fits.
_RELAX: Final = 2.0
#: A level over the budget by less than this factor is timed again (`measure_grid`).
_NEAR_MISS: Final = 2.0
#: Values each timing run encodes (the fastest run counts); bytes are counted on all of them.
TIMING_VALUES: Final = 1000


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
    min_samples: int = DEFAULT_MIN_SAMPLES
    #: The challenger must produce at least this fraction fewer bytes than the champion.
    promotion_margin: float = 0.02
    #: CPU budget per message: `budget_us_per_message` µs plus the message's bytes at
    #: `budget_mb_per_s` (one thread, measured with the relay's encoder path).
    budget_us_per_message: float = DEFAULT_BUDGET_US_PER_MESSAGE
    budget_mb_per_s: float = DEFAULT_BUDGET_MB_PER_S
    #: The size x level grid is measured on at most this many held-out values (the chosen
    #: candidate is then measured on all of them).
    grid_eval_limit: int = 4000
    #: Timing runs per measurement after one discarded warm-up. The fastest is used: on a busy
    #: machine other work only ever adds time, so the minimum is the stable estimate.
    timing_runs: int = 3

    def budget_ns(self, mean_bytes: float) -> float:
        """The CPU time one message of `mean_bytes` may take to encode (ns); 0: no budget."""
        if self.budget_us_per_message <= 0 and self.budget_mb_per_s <= 0:
            return 0.0
        per_byte = 1000.0 / self.budget_mb_per_s if self.budget_mb_per_s > 0 else 0.0
        return self.budget_us_per_message * 1000.0 + mean_bytes * per_byte

    frame: FrameOptions = field(default_factory=FrameOptions)
    wire: WireFormat = DEFAULT_WIRE_FORMAT
    header_key: str = DEFAULT_HEADER_KEY
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
    encode_ns_per_message: float  # CPU ns, the fastest of the timing runs
    encode_ns_min: float
    encode_ns_max: float
    meets_budget: bool = True
    #: Bytes per message, the value plus our header, of every measured message (in order):
    #: what paired comparisons between two configurations use. Not reported.
    costs: tuple[int, ...] = field(default=(), repr=False, compare=False)

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
    #: CPU ns one held-out message of average size may take to encode (the budget).
    budget_ns: float = 0.0
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
            fields = asdict(x)
            del fields["costs"]
            return {**fields, "ratio": round(x.ratio, 4), "messages_per_second": rate}

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
            "budget_ns_per_message": round(self.budget_ns),
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

    Timed with the garbage-collector settings the relay runs with, so the budget is checked
    against the speed the relay will see. The clock is this thread's CPU time, not the wall
    clock: training runs beside a busy relay (at a lower priority), and being preempted must
    not make a level look slow.
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


def _encoder(
    dictionary: Dictionary | None, level: int, params: TrainingParams, min_size: int
) -> Encoder:
    return Encoder(
        dictionary,
        level=level,
        min_size=min_size,
        header_key=params.header_key,
        frame=params.frame,
        wire=params.wire,
    )


def measure(
    label: str,
    dictionary: Dictionary | None,
    level: int,
    values: list[bytes],
    params: TrainingParams,
    dict_size: int = 0,
    *,
    min_size: int = 0,
    budget_ns: float = 0.0,
) -> Measurement:
    """Measure one configuration on `values` exactly as the relay would encode them.

    Values shorter than `min_size` pass through, as the encoder's threshold makes them; every
    other value is tried. Encode time is the fastest of `timing_runs` runs over (at most)
    `TIMING_VALUES` of the values, checked against `budget_ns` (0: no budget).
    """
    encoder = _encoder(dictionary, level, params, min_size)
    results = encoder.encode_batch([(v, None) for v in values])
    costs = tuple(r.output_bytes for r in results)
    timings = _time_encode(encoder, values[:TIMING_VALUES], params.timing_runs)
    fastest = min(timings)
    raw = sum(r.input_bytes for r in results)
    return Measurement(
        label=label,
        dict_size=dict_size,
        dict_bytes=0 if dictionary is None else dictionary.meta.size,
        level=level,
        raw_bytes=raw,
        output_bytes=sum(costs),
        compressed_share=sum(r.outcome == "compressed" for r in results) / max(1, len(results)),
        encode_ns_per_message=fastest,
        encode_ns_min=fastest,
        encode_ns_max=max(timings),
        meets_budget=not budget_ns or fastest <= budget_ns,
        costs=costs,
    )


def retimed(
    measured: Measurement,
    dictionary: Dictionary | None,
    values: list[bytes],
    params: TrainingParams,
    budget_ns: float,
) -> Measurement:
    """`measured` with `timing_runs` more timing runs (no minimum size, as in the grid): the
    fastest of all its runs is its time, and decides the budget verdict again."""
    encoder = _encoder(dictionary, measured.level, params, 0)
    timings = _time_encode(encoder, values[:TIMING_VALUES], params.timing_runs)
    fastest = min(measured.encode_ns_per_message, *timings)
    return replace(
        measured,
        encode_ns_per_message=fastest,
        encode_ns_min=fastest,
        encode_ns_max=max(measured.encode_ns_max, *timings),
        meets_budget=not budget_ns or fastest <= budget_ns,
    )


def measure_grid(
    trained: dict[int, bytes],
    values: list[bytes],
    params: TrainingParams,
    namespace: str,
    budget_ns: float,
) -> list[Measurement]:
    """Every trained size x level on `values`, levels in ascending order up to the first one
    over the budget (higher levels only cost more); when none fits it, up to the first one over
    the least relaxed budget something fits (`relaxed_budget`, as `choose` picks).

    A level over the budget by less than `_NEAR_MISS` is timed again once the rest of the grid is
    measured, and the size's higher levels are measured if it now fits: on a shared machine a
    burst of other work (or of the hypervisor's) can slow every run of one measurement, and a
    verdict from that burst would make the pick depend on when training ran.
    """
    levels = sorted(params.levels)
    grid: dict[int, list[Measurement]] = {size: [] for size in trained}

    def dictionary(size: int, level: int) -> Dictionary:
        return candidate_dictionary(trained[size], level, namespace)

    def extend(size: int, limit_ns: float) -> None:
        """Measure the size's next levels up to the first one over `limit_ns` (0: none)."""
        done = grid[size]
        for level in levels[len(done) :]:
            label = f"dict {size // KIB} KiB"
            measured = measure(
                label, dictionary(size, level), level, values, params, size, budget_ns=budget_ns
            )
            done.append(measured)
            if limit_ns and measured.encode_ns_per_message > limit_ns:
                return

    for size in trained:
        extend(size, budget_ns)
    # Each pass re-times the near misses of the previous one, after the others' measurements.
    seen: set[tuple[int, int]] = set()
    while near := [
        (size, done[-1])
        for size, done in grid.items()
        if not done[-1].meets_budget
        and (size, done[-1].level) not in seen
        and done[-1].encode_ns_per_message <= budget_ns * _NEAR_MISS
    ]:
        for size, missed in near:
            seen.add((size, missed.level))
            again = retimed(missed, dictionary(size, missed.level), values, params, budget_ns)
            grid[size][-1] = again
            if again.meets_budget:
                extend(size, budget_ns)
    measured = [m for done in grid.values() for m in done]
    if budget_ns and not any(m.meets_budget for m in measured):
        # Nothing fits (a slow machine, tiny values): `choose` picks within the least relaxed
        # budget something fits, so the levels above each size's first miss are measured
        # against that budget too. Else the pick is the lowest level by default, which can
        # cost little less time than the next one and lose bytes to a naive dictionary.
        limit = relaxed_budget(measured, budget_ns)
        for size, done in grid.items():
            if done[-1].encode_ns_per_message <= limit:
                extend(size, limit)
        measured = [m for done in grid.values() for m in done]
    return measured


def break_even_size(sizes: Sequence[int], costs: Sequence[int]) -> int:
    """Size (bytes) below which values pass through without being tried.

    Passing a value through saves the CPU of compressing it; it loses what compressing would
    have saved. The threshold is the largest size such that the values below it would have
    saved at most `BREAK_EVEN_BYTE_LOSS` of the output (one outlier cannot move it, unlike a
    rule over size buckets). `costs[i]` is what value `i` costs when tried (never more
    than its size: a value that does not shrink passes through). Past the largest value when
    nothing shrinks; 0 when nothing is ever worth skipping.
    """
    savings = sorted((size, max(0, size - cost)) for size, cost in zip(sizes, costs, strict=True))
    if not savings:
        return 0
    if not any(saved for _, saved in savings):
        return savings[-1][0] + 1
    allowed = BREAK_EVEN_BYTE_LOSS * sum(costs)
    lost = 0
    threshold = 0
    for i, (size, saved) in enumerate(savings):
        if lost + saved > allowed:
            break
        lost += saved
        if i + 1 == len(savings) or savings[i + 1][0] != size:
            threshold = size + 1  # every value of this size and below is skipped
    return threshold


def _candidate_sizes(params: TrainingParams, train_bytes: int) -> list[int]:
    """Dictionary sizes the sample can fill (the smallest always): held-out data picks."""
    sizes = sorted(set(params.dict_sizes))
    fitting = [s for s in sizes if s <= train_bytes]
    return fitting or sizes[:1]


def with_monotone_budget(candidates: list[Measurement]) -> list[Measurement]:
    """Per dictionary size, a level is within budget only if every lower level is too.

    Encoding never gets cheaper with a higher level on the same dictionary; a timing that says
    otherwise is noise, and acting on it would make the pick depend on the machine's load.
    """
    out: list[Measurement] = []
    by_size: dict[int, list[Measurement]] = {}
    for c in candidates:
        by_size.setdefault(c.dict_size, []).append(c)
    for group in by_size.values():
        ok = True
        for c in sorted(group, key=lambda m: m.level):
            ok = ok and c.meets_budget
            out.append(c if c.meets_budget == ok else replace(c, meets_budget=ok))
    return out


def relaxed_budget(candidates: Sequence[Measurement], budget_ns: float) -> float:
    """The least relaxed budget (`budget_ns` x2, x4, ...) that one of `candidates` (none within
    `budget_ns`, at least one) fits, in ns per message."""
    limit = budget_ns * _RELAX
    while not any(c.encode_ns_per_message <= limit for c in candidates):
        limit *= _RELAX
    return limit


def choose(candidates: list[Measurement], budget_ns: float) -> Measurement:
    """The smallest output within the budget; when nothing fits, within the least relaxed
    budget (x2, x4, ...) that something fits: the best ratio the relay can afford."""
    within = [c for c in candidates if c.meets_budget]
    if not within:
        limit = relaxed_budget(candidates, budget_ns)
        within = [c for c in candidates if c.encode_ns_per_message <= limit]
    return min(within, key=lambda c: (c.output_bytes, c.encode_ns_per_message))


def gain_is_clear(baseline: Sequence[int], challenger: Sequence[int], z: float) -> bool:
    """Whether `challenger` costs fewer bytes than `baseline` beyond doubt on this sample:
    the mean per-message saving is more than `z` standard errors above zero (paired)."""
    diffs = [b - c for b, c in zip(baseline, challenger, strict=True)]
    n = len(diffs)
    if n < 2:
        return False
    mean = statistics.fmean(diffs)
    sd = statistics.stdev(diffs)
    return mean > 0 and mean > z * sd / n**0.5


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
    2. train one dictionary per candidate size the sample can fill;
    3. measure every size x level on (up to `grid_eval_limit`) held-out values, levels in
       ascending order up to the first one over the CPU budget (`measure_grid`), and pick the
       smallest output within the budget (or the least relaxed budget something fits);
    4. measure the pick with its break-even size, no dictionary and the champion (with its
       own threshold, as it runs) on all held-out values;
    5. promote if there is no champion, or the pick beats it by `promotion_margin`, and it beats
       compressing without a dictionary clearly on this held-out set; otherwise reject. The
       numbers are kept either way.
    """
    report = TrainingReport(
        namespace=namespace,
        decision=Decision.FAILED,
        reason="",
        train_count=len(samples.train),
        train_bytes=samples.train_bytes,
        heldout_count=len(samples.heldout),
        heldout_bytes=samples.heldout_bytes,
        budget_ns=params.budget_ns(samples.heldout_bytes / max(1, len(samples.heldout))),
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
    trained = _train_candidates(samples, params, report)
    report.train_seconds = time.perf_counter() - started
    if not trained:
        report.reason = (
            "zstd could not train any dictionary from these samples "
            f"({'; '.join(report.failures)}); they may be too uniform or too few"
        )
        return report

    started = time.perf_counter()
    grid_values = samples.heldout[: params.grid_eval_limit]
    report.candidates = with_monotone_budget(
        measure_grid(trained, grid_values, params, namespace, report.budget_ns)
    )
    best = choose(report.candidates, report.budget_ns)
    chosen_dict = candidate_dictionary(trained[best.dict_size], best.level, namespace)
    tried = measure(best.label, chosen_dict, best.level, samples.heldout, params, best.dict_size)
    report.break_even_size = break_even_size(list(map(len, samples.heldout)), tried.costs)
    chosen = measure(
        best.label,
        chosen_dict,
        best.level,
        samples.heldout,
        params,
        best.dict_size,
        min_size=report.break_even_size,
    )
    # The budget verdict is the grid's: it decided the pick, and one more timing run on a busy
    # machine must not contradict the reason printed for it.
    report.chosen = replace(chosen, meets_budget=best.meets_budget)
    report.nodict = measure("no dictionary", None, 3, samples.heldout, params)
    if champion is not None:
        report.champion = measure(
            f"champion {champion.id}",
            champion,
            champion.meta.level,
            samples.heldout,
            params,
            champion.meta.size,
            min_size=champion.meta.break_even_size,
        )
    report.eval_seconds = time.perf_counter() - started
    report.dictionary = chosen_dict.data
    _decide(report, params)
    return report


def _train_candidates(
    samples: TrainingSet, params: TrainingParams, report: TrainingReport
) -> dict[int, bytes]:
    """Dictionary bytes per candidate size; failures are noted in `report`."""
    trained: dict[int, bytes] = {}
    # The zstandard stub's element type; scrubbing applies to what trains, nothing else.
    sample: list[bytes | bytearray | memoryview] = list(scrubbed(samples.train, params.scrub))
    for size in _candidate_sizes(params, samples.train_bytes):
        try:
            trained[size] = zstandard.train_dictionary(size, sample).as_bytes()
        except zstandard.ZstdError as exc:
            report.failures.append(f"{size}-byte dictionary: zstd training failed: {exc}")
    return trained


def _decide(report: TrainingReport, params: TrainingParams) -> None:
    chosen, nodict, champion = report.chosen, report.nodict, report.champion
    assert chosen is not None and nodict is not None
    speed = (
        ""
        if chosen.meets_budget
        else (
            f" (no candidate fits the budget of {report.budget_ns / 1000:.1f} µs per message; "
            "the best ratio within the least relaxed budget was taken)"
        )
    )
    if chosen.output_bytes >= nodict.output_bytes:
        report.decision = Decision.REJECTED
        report.reason = (
            f"the dictionary does not beat compressing without one on held-out data "
            f"(ratio {chosen.ratio:.3f} vs {nodict.ratio:.3f})"
        )
    elif not gain_is_clear(nodict.costs, chosen.costs, CONFIDENCE_Z):
        report.decision = Decision.REJECTED
        report.reason = (
            f"the held-out part ({report.heldout_count} messages) is too small or too varied to "
            f"judge: the dictionary's ratio {chosen.ratio:.3f} vs {nodict.ratio:.3f} without one "
            f"is within {CONFIDENCE_Z:g} standard errors; more samples are needed"
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
