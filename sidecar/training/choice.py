"""Training decisions: sample → candidates → held-out evaluation → choice → refit → decide.

Pure logic: no Kafka, no files. Given training and held-out values (the held-out part being the
sample's newest slice, `training.split`) it trains candidate dictionaries over a grid of sizes,
measures every affordable (size, level) pair on the held-out values one message at a time
(header bytes counted, pass-through applied as the encoder would), and chooses: the smallest
dictionary at the fastest level, unless a larger or slower one stores fewer bytes by more than
the noise of its gain along the held-out slice. Affordable means within the CPU budget by the
encode cost model (`training.cost`), never by timings, so the load of the machine cannot move
the pick. It then computes the break-even size, compares the result with no dictionary and with
the current champion on the same held-out set, and refits a promoted dictionary on every sample
but the newest held-out ones.
Last, for a promoted dictionary, the batch codec's level (`training.batch_level`: the zstd
level of the producer's batches, bytes against CPU per record within its budget) and the output
crossover (`training.crossover`): the batch fill from which raw values with producer batch
compression at that level store fewer bytes than its frames, measured with the dictionary as
stored on the newest held-out values, which the refit leaves out.

Held-out values never enter the dictionary the figures are measured with: every ratio this
module reports is an out-of-sample ratio, that of the dictionary as chosen (the refit one, which
did see them, is what is stored; the report says so).
"""

from __future__ import annotations

import itertools
import math
import re
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Final

import zstandard

from sidecar.codec import Encoder
from sidecar.dictionaries.model import MIN_DICT_ID, Dictionary, TrainingSample, build_dictionary
from sidecar.record_batch import producer_codecs
from sidecar.runtime import tune_gc
from sidecar.training.batch_level import BatchLevel, measure_batch_level
from sidecar.training.cost import encode_cost_ns
from sidecar.training.crossover import crossover_split, raw_crossovers
from sidecar.training.params import KIB, Decision, TrainingParams
from sidecar.training.split import MIN_HELDOUT, Span, TrainingSet

#: The held-out part must show the dictionary's gain over no dictionary this many standard
#: errors clear of zero (paired, per message), or it is too small to judge.
CONFIDENCE_Z: Final = 3.0
#: Passing small values through saves CPU; it may make the held-out output at most this share
#: larger than compressing every value would (bytes come first: the CPU is within budget).
BREAK_EVEN_BYTE_LOSS: Final = 0.001
#: When nothing fits the budget, the least relaxed budget (x2, x4, ...) something fits is used.
_RELAX: Final = 2.0
#: The held-out values are cut into this many consecutive chunks, oldest first, to see how much
#: a candidate's gain over another varies along the newest slice (`clearly_better`) ...
NOISE_CHUNKS: Final = 5
#: ... and a larger dictionary or a slower level must save more than this many standard errors
#: of its mean gain per chunk: more than its measurement noise. One, not more: a wider margin
#: keeps smaller dictionaries that store more on the stream's future (`bench choice` shows the
#: pick on its time-ordered split).
NOISE_Z: Final = 1.0
#: Values each timing run encodes (the fastest run counts); bytes are counted on all of them.
TIMING_VALUES: Final = 1000


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
    #: The cost model's CPU ns per message of the values' mean size: what the budget judges.
    cost_ns: float
    #: Measured CPU ns per message, the fastest of the timing runs (0: not timed). Reported only.
    encode_ns_per_message: float = 0.0
    encode_ns_min: float = 0.0
    encode_ns_max: float = 0.0
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
    #: Where the training and held-out parts lie in the stream (None: not known).
    span: Span | None = None
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
    #: `dictionary` was trained again once chosen, on every sample but the `crossover_count`
    #: newest held-out ones: the held-out figures are those of the dictionary as chosen,
    #: trained on the training part alone.
    refit: bool = False
    dictionary: bytes | None = field(default=None, repr=False)
    failures: list[str] = field(default_factory=list)
    #: Per producer batch codec, the fill (records per batch) from which raw values store fewer
    #: bytes than the stored dictionary's frames (None: frames win at every fill measured);
    #: measured on the `crossover_count` newest held-out values, which the stored dictionary
    #: did not see, for a promoted dictionary, else None.
    raw_crossover: dict[str, float | None] | None = None
    crossover_count: int = 0
    #: The producer's zstd batch level, chosen on the same newest held-out values, for a
    #: promoted dictionary, else None.
    batch_level: BatchLevel | None = None

    @property
    def heldout_ratio_of(self) -> str:
        """Which dictionary the held-out figures measure: `chosen_before_refit` (the stored one
        is the refit, which saw the held-out values) or `stored`."""
        return "chosen_before_refit" if self.refit else "stored"

    def split_fields(self) -> dict[str, Any]:
        """Where the two parts lie and which dictionary the held-out figures are of."""
        span = self.span.fields() if self.span is not None else {}
        return span | {"refit": self.refit, "heldout_ratio_of": self.heldout_ratio_of}

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
            **self.split_fields(),
            "heldout_ratio": ratio(chosen),
            "nodict_ratio": ratio(self.nodict),
            "champion_ratio": ratio(self.champion),
            "champion_id": self.champion_id,
            "dict_size": chosen.dict_size if chosen else None,
            # not "level": in a log line that is the log level
            "zstd_level": chosen.level if chosen else None,
            "break_even_size": self.break_even_size,
            "raw_crossover": self.raw_crossover,
            "batch_level": self.batch_level.level if self.batch_level else None,
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
            "split": self.split_fields(),
            "chosen": m(self.chosen),
            "nodict": m(self.nodict),
            "champion": m(self.champion),
            "champion_id": self.champion_id,
            "break_even_size": self.break_even_size,
            "raw_crossover": self.raw_crossover,
            "crossover_count": self.crossover_count,
            "batch_level": self.batch_level.to_dict() if self.batch_level else None,
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


def train_dictionary(size: int, values: list[bytes]) -> bytes:
    """zstd's dictionary of `size` bytes (at most) for `values`: the same bytes for the same
    values on every run and every load.

    Called without `k`, `d`, `steps` or `threads` on purpose: that is zstd's own default
    (`ZDICT_trainFromBuffer`: fastCover with its fixed search, on one thread). With threads, the
    search keeps the first best result to finish, and which finishes first depends on the
    machine's load; and given `threads` at all, python-zstandard switches to a wider search, a
    dozen times slower here (0.5 s instead of 0.04 s for 16 KiB from 800 orders).

    Raises:
        zstandard.ZstdError: zstd could not train one (too few or too uniform values).
    """
    # The zstandard stub's element type.
    sample: list[bytes | bytearray | memoryview] = list(values)
    return zstandard.train_dictionary(size, sample).as_bytes()


def _time_encode(encoder: Encoder, values: list[bytes], runs: int) -> list[float]:
    """CPU ns per message of `encode_batch` over `values`: one warm-up, then `runs` runs.

    Timed with the garbage-collector settings the relay runs with. The clock is this thread's
    CPU time, not the wall clock: training runs beside a busy relay (at a lower priority).
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


def _mean_bytes(values: Sequence[bytes]) -> float:
    return sum(map(len, values)) / max(1, len(values))


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
    timed: bool = False,
) -> Measurement:
    """Measure one configuration on `values` exactly as the relay would encode them.

    Values shorter than `min_size` pass through, as the encoder's threshold makes them; every
    other value is tried. The budget (`budget_ns`, 0: none) judges the cost model's estimate at
    the values' mean size; `timed`: the encode time is measured too, for the report (the
    fastest of `timing_runs` runs over at most `TIMING_VALUES` of the values).
    """
    encoder = _encoder(dictionary, level, params, min_size)
    results = encoder.encode_batch([(v, None) for v in values])
    costs = tuple(r.output_bytes for r in results)
    timings = _time_encode(encoder, values[:TIMING_VALUES], params.timing_runs) if timed else []
    cost_ns = encode_cost_ns(level, _mean_bytes(values))
    return Measurement(
        label=label,
        dict_size=dict_size,
        dict_bytes=0 if dictionary is None else dictionary.meta.size,
        level=level,
        raw_bytes=sum(r.input_bytes for r in results),
        output_bytes=sum(costs),
        compressed_share=sum(r.outcome == "compressed" for r in results) / max(1, len(results)),
        cost_ns=cost_ns,
        encode_ns_per_message=min(timings, default=0.0),
        encode_ns_min=min(timings, default=0.0),
        encode_ns_max=max(timings, default=0.0),
        meets_budget=not budget_ns or cost_ns <= budget_ns,
        costs=costs,
    )


def relaxed_budget(costs: Sequence[float], budget_ns: float) -> float:
    """The least relaxed budget (`budget_ns` x2, x4, ...) that one of `costs` (ns per message,
    none within `budget_ns`, at least one) fits; no budget (0) relaxes to no limit."""
    if budget_ns <= 0 or not costs:
        return math.inf
    limit = budget_ns * _RELAX
    while not any(c <= limit for c in costs):
        limit *= _RELAX
    return limit


def affordable_levels(levels: Sequence[int], mean_bytes: float, budget_ns: float) -> list[int]:
    """The levels whose estimated cost at `mean_bytes` fits `budget_ns` (0: every level); when
    none does, those within the least relaxed budget one fits. Ascending."""
    ordered = sorted(set(levels))
    if not budget_ns:
        return ordered
    cost = {level: encode_cost_ns(level, mean_bytes) for level in ordered}
    limit = budget_ns
    if not any(c <= budget_ns for c in cost.values()):
        limit = relaxed_budget(list(cost.values()), budget_ns)
    return [level for level in ordered if cost[level] <= limit]


def measure_grid(
    trained: dict[int, bytes],
    values: list[bytes],
    params: TrainingParams,
    namespace: str,
    budget_ns: float,
) -> list[Measurement]:
    """Every trained size at every affordable level (`affordable_levels`), bytes only, on
    `values`; in (size, level) order."""
    levels = affordable_levels(params.levels, _mean_bytes(values), budget_ns)
    return [
        measure(
            f"dict {size // KIB} KiB",
            candidate_dictionary(trained[size], level, namespace),
            level,
            values,
            params,
            size,
            budget_ns=budget_ns,
        )
        for size in sorted(trained)
        for level in levels
    ]


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


def clearly_better(
    baseline: Sequence[int],
    challenger: Sequence[int],
    chunks: int = NOISE_CHUNKS,
    z: float = NOISE_Z,
) -> bool:
    """Whether `challenger` stores fewer bytes than `baseline` by more than the noise of its gain
    along the values (paired per-message costs, in stream order).

    The values are cut into `chunks` consecutive chunks (at least 2 values each; fewer chunks
    when there are too few values, and no verdict of "better" under 2): the mean of the
    per-chunk relative savings must be positive and more than `z` standard errors of it. The
    spread between chunks is how much the gain moves along the stream, which is the noise that
    matters for the stream's future; per-message noise alone would understate it.
    """
    n = min(len(baseline), len(challenger))
    k = min(chunks, n // 2)
    if k < 2:
        return False
    bounds = [i * n // k for i in range(k + 1)]
    gains = []
    for start, end in itertools.pairwise(bounds):
        base = sum(baseline[start:end])
        gains.append((base - sum(challenger[start:end])) / base if base else 0.0)
    mean = statistics.fmean(gains)
    return mean > 0 and mean > z * statistics.stdev(gains) / math.sqrt(k)


def choose(candidates: list[Measurement], budget_ns: float) -> Measurement:
    """The pick among the affordable `candidates` (within the budget; when none is, within the
    least relaxed budget one fits): in (size, level) order, each replaces the pick so far only
    when it stores `clearly_better`; ties go to the smaller dictionary and the faster level.

    Bytes and the cost model decide, never a timing: the same candidates give the same pick.
    """
    within = [c for c in candidates if c.meets_budget]
    if not within:
        limit = relaxed_budget([c.cost_ns for c in candidates], budget_ns)
        within = [c for c in candidates if c.cost_ns <= limit]
    ordered = sorted(within, key=lambda c: (c.dict_size, c.level))
    pick = ordered[0]
    for challenger in ordered[1:]:
        if clearly_better(pick.costs, challenger.costs):
            pick = challenger
    return pick


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
    """Train, evaluate on the held-out values, choose, decide and refit. Never raises for bad
    samples; the same samples and params give the same report (timings and seconds aside)
    and the same dictionary bytes.

    Steps:
    1. refuse too few usable samples (decision FAILED, with the counts);
    2. train one dictionary per candidate size the sample can fill;
    3. measure every size at every affordable level (`affordable_levels`) on the newest (up to
       `grid_eval_limit`) held-out values and `choose`;
    4. measure the pick with its break-even size, no dictionary and the champion (with its
       own threshold, as it runs) on all held-out values;
    5. promote if there is no champion, or the pick beats it by `promotion_margin`, and it beats
       compressing without a dictionary clearly on this held-out set; otherwise reject. The
       numbers are kept either way;
    6. a promoted dictionary is trained again at its size on every sample but the newest
       held-out ones the crossover is measured on (`params.refit`, `crossover_split`): the
       held-out figures stay those of the dictionary as chosen;
    7. a promoted dictionary's batch level is chosen on those newest held-out values
       (`training.batch_level`), and its output crossover measured on them at that level
       (`training.crossover`), encoded as the relay will encode them with the stored bytes.
    """
    report = TrainingReport(
        namespace=namespace,
        decision=Decision.FAILED,
        reason="",
        train_count=len(samples.train),
        train_bytes=samples.train_bytes,
        heldout_count=len(samples.heldout),
        heldout_bytes=samples.heldout_bytes,
        span=samples.span,
        budget_ns=params.budget_ns(_mean_bytes(samples.heldout)),
        champion_id=champion.id if champion else None,
    )
    total = len(samples.train) + len(samples.heldout)
    if (
        total < params.min_samples
        or len(samples.train) < MIN_HELDOUT
        or len(samples.heldout) < MIN_HELDOUT
    ):
        report.reason = (
            f"too few usable samples: {len(samples.train)} training + {len(samples.heldout)} "
            f"held-out, at least {params.min_samples} needed (and {MIN_HELDOUT} on each side); "
            "records keep flowing without a dictionary meanwhile"
        )
        return report

    started = time.perf_counter()
    training = scrubbed(samples.train, params.scrub)
    trained = _train_candidates(training, params, report)
    report.train_seconds = time.perf_counter() - started
    if not trained:
        report.reason = (
            "zstd could not train any dictionary from these samples "
            f"({'; '.join(report.failures)}); they may be too uniform or too few"
        )
        return report

    started = time.perf_counter()
    grid_values = samples.heldout[-params.grid_eval_limit :]
    report.candidates = measure_grid(trained, grid_values, params, namespace, report.budget_ns)
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
        timed=True,
    )
    # The budget verdict is the grid's (on its values' mean size), which made the pick.
    report.chosen = replace(chosen, meets_budget=best.meets_budget)
    report.nodict = measure("no dictionary", None, 3, samples.heldout, params, timed=True)
    if champion is not None:
        report.champion = measure(
            f"champion {champion.id}",
            champion,
            champion.meta.level,
            samples.heldout,
            params,
            champion.meta.size,
            min_size=champion.meta.break_even_size,
            timed=True,
        )
    report.eval_seconds = time.perf_counter() - started
    report.dictionary = chosen_dict.data
    _decide(report, params)
    refit_too, crossover_values = crossover_split(samples.heldout)
    if report.decision is Decision.PROMOTED and params.refit:
        started = time.perf_counter()
        _refit(report, training + scrubbed(refit_too, params.scrub), best.dict_size)
        report.train_seconds += time.perf_counter() - started
    if report.decision is Decision.PROMOTED:
        report.batch_level = measure_batch_level(
            crossover_values, params.batch_level_budget_us * 1000.0
        )
        report.raw_crossover = _raw_crossover(report, crossover_values, params, namespace)
        report.crossover_count = len(crossover_values)
    return report


def _raw_crossover(
    report: TrainingReport, values: list[bytes], params: TrainingParams, namespace: str
) -> dict[str, float | None]:
    """The stored dictionary's output crossover per batch codec, on `values` (held-out values it
    did not see, unscrubbed: what the relay will write), encoded at the chosen level and
    break-even size, both modes' batches compressed at the chosen batch level."""
    assert report.chosen is not None and report.dictionary is not None
    assert report.batch_level is not None
    level = report.chosen.level
    dictionary = candidate_dictionary(report.dictionary, level, namespace)
    encoder = _encoder(dictionary, level, params, report.break_even_size)
    encoded = encoder.encode_batch([(v, None) for v in values])
    codecs = producer_codecs(report.batch_level.level)
    return raw_crossovers(values, [(e.value, e.headers or ()) for e in encoded], codecs)


def _train_candidates(
    training: list[bytes], params: TrainingParams, report: TrainingReport
) -> dict[int, bytes]:
    """Dictionary bytes per candidate size; failures are noted in `report`."""
    trained: dict[int, bytes] = {}
    for size in _candidate_sizes(params, sum(map(len, training))):
        try:
            trained[size] = train_dictionary(size, training)
        except zstandard.ZstdError as exc:
            report.failures.append(f"{size}-byte dictionary: zstd training failed: {exc}")
    return trained


def _refit(report: TrainingReport, values: list[bytes], size: int) -> None:
    """The chosen size trained again on `values` (every sample); if zstd cannot, the
    dictionary as chosen stays, and the failure is noted."""
    try:
        report.dictionary = train_dictionary(size, values)
    except zstandard.ZstdError as exc:
        report.failures.append(f"refit of the {size}-byte dictionary failed: {exc}")
        return
    report.refit = True


def _decide(report: TrainingReport, params: TrainingParams) -> None:
    chosen, nodict, champion = report.chosen, report.nodict, report.champion
    assert chosen is not None and nodict is not None
    speed = (
        ""
        if chosen.meets_budget
        else (
            f" (no level fits the budget of {report.budget_ns / 1000:.1f} µs per message by the "
            "cost model; the pick was made within the least relaxed budget one fits)"
        )
    )
    if report.heldout_count < params.min_heldout:
        report.decision = Decision.REJECTED
        report.reason = (
            f"{report.heldout_count} held-out messages are too few to judge a dictionary on: "
            f"at least {params.min_heldout} are needed (ZDICT_TRAINING__MIN_HELDOUT); give more "
            "messages (--sample, a longer input, ZDICT_SAMPLING__MIN_MESSAGES)"
        )
    elif chosen.output_bytes >= nodict.output_bytes:
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
