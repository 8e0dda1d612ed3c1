"""The reports `train` and `evaluate` print: the candidates measured, the decision, the bytes
as Kafka would store them and what compressing costs against sending raw."""

from __future__ import annotations

from typing import Final

from sidecar.dictionaries.model import Dictionary
from sidecar.record_batch import PRODUCER_ZSTD_LEVEL
from sidecar.tools.evaluation import Evaluation
from sidecar.tools.tables import render
from sidecar.training.batch_level import BatchLevel
from sidecar.training.choice import Measurement, TrainingReport

_MEASUREMENT_HEADERS: Final = (
    "candidate",
    "size",
    "level",
    "ratio",
    "bytes",
    "est. µs",
    "µs/message",
    "in budget",
)


def _measurement_row(m: Measurement) -> list[object]:
    size = f"{m.dict_bytes // 1024} KiB" if m.dict_bytes else "-"
    return [
        m.label,
        size,
        m.level,
        round(m.ratio, 3),
        m.output_bytes,
        round(m.cost_ns / 1000, 2),
        round(m.encode_ns_per_message / 1000, 2) if m.encode_ns_per_message else "-",
        "yes" if m.meets_budget else "no",
    ]


def format_training(report: TrainingReport, stored: Dictionary | None, activated: bool) -> str:
    """The human-readable report of one training run."""
    out = [
        f"namespace {report.namespace}: {report.train_count:,} training messages "
        f"({report.train_bytes:,} B), {report.heldout_count:,} held-out "
        f"({report.heldout_bytes:,} B)"
    ]
    if report.span is not None:
        out.append(report.span.sentence())
    if report.candidates:
        rows = [_measurement_row(c) for c in report.candidates]
        out += [
            "",
            render(
                _MEASUREMENT_HEADERS,
                rows,
                "candidates (held-out, header bytes counted; est. = the cost model, which the "
                "budget judges)",
            ),
        ]
    finals = [m for m in (report.chosen, report.nodict, report.champion) if m is not None]
    if finals:
        title = f"on all {report.heldout_count:,} held-out messages"
        out += ["", render(_MEASUREMENT_HEADERS, [_measurement_row(m) for m in finals], title)]
        out.append(f"break-even size: {report.break_even_size} B (smaller values pass through)")
        out.append(
            f"training {report.train_seconds:.2f} s, evaluation {report.eval_seconds:.2f} s, "
            f"CPU budget {report.budget_ns / 1000:.1f} µs per message of average size"
        )
    if report.refit:
        out.append(
            f"refit: the stored dictionary is trained again on "
            f"{report.train_count + report.heldout_count - report.crossover_count:,} samples "
            f"(all but the {report.crossover_count:,} newest, kept for the crossover); the "
            "held-out figures above are the dictionary as chosen, which did not see the "
            "held-out messages"
        )
    if report.raw_crossover is not None:
        never = "none (frames win at every fill measured)"
        fills = ", ".join(
            f"{codec} {never if fill is None else f'from {fill:g}'}"
            for codec, fill in report.raw_crossover.items()
        )
        out.append(
            f"output crossover (records per batch from which raw values with producer batch "
            f"compression store less than the stored dictionary's frames, on the "
            f"{report.crossover_count:,} newest held-out messages, which it did not see): {fills}"
        )
    if report.batch_level is not None:
        out.append(_batch_level_line(report.batch_level))
    out += ["", f"decision: {report.decision.value}: {report.reason}"]
    if stored is not None:
        state = "activated" if activated else "stored, not activated (--no-activate)"
        out.append(f"dictionary {stored.id} (version {stored.meta.version}) {state}")
    return "\n".join(out)


def _batch_level_line(chosen: BatchLevel) -> str:
    """The producer's batch level and what it costs and saves against level 3."""
    default, picked = (
        chosen.at(PRODUCER_ZSTD_LEVEL, chosen.fill),
        chosen.at(chosen.level, chosen.fill),
    )
    extra = 0.0 if default is None or picked is None else picked.cost_ns - default.cost_ns
    budget = f"{chosen.budget_ns / 1000:.1f} µs" if chosen.budget_ns else "none"
    return (
        f"batch level (compression.level of the producer's zstd batches, at {chosen.fill} "
        f"records a batch): {chosen.level}, storing {chosen.saving:.3f}x level 3 for "
        f"{extra / 1000:+.2f} µs CPU per record (cost model; budget {budget})"
    )


def format_evaluation(evaluation: Evaluation) -> str:
    """The human-readable `evaluate` report: one screen to decide."""
    report = evaluation.training
    out = [format_training(report, None, False)]
    if evaluation.rows:
        rows = [[r.method, r.output_bytes, round(r.ratio, 3), r.note] for r in evaluation.rows]
        raw = evaluation.rows[0].raw_bytes
        title = (
            f"what the {evaluation.measured:,} later messages ({raw:,} B), which the choice did "
            "not see, would cost"
        )
        out += ["", render(("method", "bytes", "ratio", "note"), rows, title)]
    if evaluation.stored:
        out += ["", _format_stored(evaluation)]
    if evaluation.transport is not None:
        out += ["", _format_transport(evaluation)]
    return "\n".join(out)


def _format_stored(evaluation: Evaluation) -> str:
    names = list(evaluation.stored[0].bytes_per_record)
    raw = evaluation.stored[0].bytes_per_record["raw none"]
    rows = [
        [
            s.fill,
            *(f"{s.bytes_per_record[n]:.1f} ({raw / s.bytes_per_record[n]:.2f}x)" for n in names),
            f"{s.versus_producer:.3f}",
        ]
        for s in evaluation.stored
    ]
    at = (evaluation.training.raw_crossover or {}).get("zstd")
    table = render(
        ("records/batch", *names, "sidecar / raw zstd"),
        rows,
        "bytes per record as Kafka stores them (batch header and record framing counted, keys "
        "null), (x) = raw value bytes / stored; per record = this tool's compact frames; + zstd "
        f"and batch level: zstd at level {evaluation.batch_level}, chosen at training (raw zstd: "
        "the producer's default, 3); sidecar + zstd = frames below the dictionary's zstd "
        f"crossover ({_fill(at)}), raw values from it; sidecar / raw zstd = its stored bytes "
        "over producer zstd's alone",
    )
    lines = [table]
    last = evaluation.stored[-1].fill
    for pair, fill in evaluation.crossovers.items():
        theirs, ours = pair.split(" / ")
        where = (
            f"from ~{fill:.1f} records per batch" if fill is not None else f"never within {last}"
        )
        lines.append(f"{theirs} stores no more than {ours} {where} (on these later messages)")
    return "\n".join(lines)


def _fill(at: float | None) -> str:
    return "none: frames at every fill" if at is None else f"{at:g} records per batch"


def _format_transport(evaluation: Evaluation) -> str:
    transport = evaluation.transport
    assert transport is not None
    med, lo, hi = evaluation.encode_ns
    dmed, dlo, dhi = evaluation.decode_ns
    cpu = transport.cpu_seconds_per_gb_saved
    return "\n".join(
        [
            f"encode {med / 1000:.2f} µs/message [{lo / 1000:.2f}-{hi / 1000:.2f}], "
            f"decode {dmed / 1000:.2f} µs/message [{dlo / 1000:.2f}-{dhi / 1000:.2f}] "
            "(one thread, CPU time, median [min-max] of 3 runs after a warm-up)",
            f"transport: V = {transport.encode_mb_per_s:.1f} MB/s encoded per core, "
            f"r = {transport.ratio:.3f}, B* = V(r-1)/r = {transport.break_even_mb_per_s:.1f} "
            "MB/s: on a slower link, compressing before sending is faster than sending raw",
            "CPU per GB saved: "
            + ("-" if cpu is None else f"{cpu:.1f} s (one core; a GB is 10^9 bytes)"),
        ]
    )
