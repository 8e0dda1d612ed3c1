"""The `zdict-sidecar` command line: thin subcommands over the library modules.

Exit codes: 0 success; 1 an expected failure (the message names the cause); 2 bad usage or
configuration; 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from sidecar import __version__
from sidecar.bench.events import KINDS, generate
from sidecar.codec import Decoder, DictionaryResolver
from sidecar.config import Settings, load_settings
from sidecar.dictionaries.lifecycle import promote, sync_store
from sidecar.dictionaries.model import Dictionary, DictionaryMeta, validate_namespace
from sidecar.dictionaries.registry import Registry, RegistryResolver
from sidecar.dictionaries.store import DictionaryStore
from sidecar.dictionaries.training import (
    Decision,
    Measurement,
    TrainingReport,
    split_by_key,
    split_ordered,
    train,
)
from sidecar.errors import (
    ConfigError,
    DictionaryNotFound,
    InputError,
    MissingDependency,
    ZdictError,
)
from sidecar.tools.evaluation import Evaluation, evaluate
from sidecar.tools.tables import render

PROG = "zdict-sidecar"


# -- input ---------------------------------------------------------------------------------------


def read_lines(source: str) -> list[bytes]:
    """Messages from a file (or `-` for stdin), one per line, line endings removed."""
    if source == "-":
        data = sys.stdin.buffer.read()
        name = "standard input"
    else:
        path = Path(source)
        if path.is_dir():
            raise InputError(f"input {path} is a directory; give a file with one message per line")
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise InputError(f"input file {path} does not exist") from None
        except OSError as exc:
            raise InputError(f"cannot read input file {path}: {exc.strerror}") from None
        name = str(path)
    lines = [line.rstrip(b"\r") for line in data.split(b"\n")]
    if lines and not lines[-1]:
        lines.pop()  # the newline that ends the last line
    if not lines:
        raise InputError(f"input {name} is empty: give one message per line")
    return lines


# -- reports -------------------------------------------------------------------------------------


def _measurement_row(m: Measurement) -> list[object]:
    size = f"{m.dict_bytes // 1024} KiB" if m.dict_bytes else "-"
    return [
        m.label,
        size,
        m.level,
        round(m.ratio, 3),
        m.output_bytes,
        round(m.messages_per_second),
        "yes" if m.meets_budget else "no",
    ]


_MEASUREMENT_HEADERS = ("candidate", "size", "level", "ratio", "bytes", "msg/s", "in budget")


def format_training(report: TrainingReport, stored: Dictionary | None, activated: bool) -> str:
    """The human-readable report of one training run."""
    out = [
        f"namespace {report.namespace}: {report.train_count:,} training messages "
        f"({report.train_bytes:,} B), {report.heldout_count:,} held-out "
        f"({report.heldout_bytes:,} B)"
    ]
    if report.candidates:
        rows = [_measurement_row(c) for c in report.candidates]
        out += [
            "",
            render(_MEASUREMENT_HEADERS, rows, "candidates (held-out, header bytes counted)"),
        ]
    finals = [m for m in (report.chosen, report.nodict, report.champion) if m is not None]
    if finals:
        title = f"on all {report.heldout_count:,} held-out messages"
        out += ["", render(_MEASUREMENT_HEADERS, [_measurement_row(m) for m in finals], title)]
        out.append(f"break-even size: {report.break_even_size} B (smaller values pass through)")
        out.append(
            f"training {report.train_seconds:.2f} s, evaluation {report.eval_seconds:.2f} s, "
            f"speed budget {report.min_encode_rate:,.0f} msg/s"
        )
    out += ["", f"decision: {report.decision.value}: {report.reason}"]
    if stored is not None:
        state = "activated" if activated else "stored, not activated (--no-activate)"
        out.append(f"dictionary {stored.id} (version {stored.meta.version}) {state}")
    return "\n".join(out)


def format_evaluation(evaluation: Evaluation) -> str:
    """The human-readable `evaluate` report."""
    report = evaluation.training
    out = [format_training(report, None, False)]
    if evaluation.rows:
        rows = [[r.method, r.output_bytes, round(r.ratio, 3), r.note] for r in evaluation.rows]
        raw = evaluation.rows[0].raw_bytes
        title = f"what {report.heldout_count:,} held-out messages ({raw:,} B) would cost"
        out += ["", render(("method", "bytes", "ratio", "note"), rows, title)]
    if evaluation.frame_rows:
        count = max(1, report.heldout_count)
        rows = [
            [r.method, r.output_bytes, round(r.output_bytes / count, 2), r.note]
            for r in evaluation.frame_rows
        ]
        title = "frame options (frames only, every message compressed)"
        out += ["", render(("frame", "bytes", "B/message", "note"), rows, title)]
        med, lo, hi = evaluation.encode_ns
        dmed, dlo, dhi = evaluation.decode_ns
        out.append(
            f"\nencode {med / 1000:.2f} µs/message [{lo / 1000:.2f}-{hi / 1000:.2f}], "
            f"decode {dmed / 1000:.2f} µs/message [{dlo / 1000:.2f}-{dhi / 1000:.2f}] "
            "(one thread, median [min-max] of 3 runs after a warm-up)"
        )
    return "\n".join(out)


# -- commands ------------------------------------------------------------------------------------


def _settings(args: argparse.Namespace, **overrides: Any) -> Settings:
    """The validated settings; logging configured from them (always to stderr: stdout is for
    reports and records)."""
    from sidecar.logs import configure_logging

    if getattr(args, "dictionaries", None) is not None:
        overrides["dictionaries"] = args.dictionaries
    settings = load_settings(getattr(args, "config", None), **overrides)
    configure_logging(settings.log_format, settings.log_level)
    return settings


def cmd_generate(args: argparse.Namespace) -> int:
    out: BinaryIO = sys.stdout.buffer
    for event in generate(args.kind, args.count, seed=args.seed, drift_at=args.drift_at):
        out.write(event + b"\n")
    out.flush()
    return 0


def _training_overrides(args: argparse.Namespace) -> dict[str, Any]:
    training: dict[str, Any] = {}
    if args.min_encode_rate is not None:
        training["min_encode_rate"] = args.min_encode_rate
    return {"training": training} if training else {}


def cmd_train(args: argparse.Namespace) -> int:
    if args.namespace is None and args.topic is None:
        raise ConfigError("--namespace is required with --input (it is usually the topic name)")
    namespace = validate_namespace(args.namespace or args.topic)
    settings = _settings(args, **_training_overrides(args))
    if args.heldout_fraction is not None:
        heldout_fraction = args.heldout_fraction
    else:
        heldout_fraction = settings.training.heldout_fraction
    store = DictionaryStore(settings.dictionaries)
    registry = _open_registry(settings, "train") if args.publish else None
    try:
        if registry is not None:
            sync_store(registry, store, [namespace])
        champion = store.active(namespace)
        if args.topic:
            from sidecar.dictionaries.topic_sample import read_sample

            sample = read_sample(settings, args.topic, args.sample)
            records, window = sample.records, sample.window
        else:
            lines = read_lines(args.input)
            records = [(str(i).encode(), line) for i, line in enumerate(lines)]
            window = f"{args.input} lines 1-{len(lines)}"
        samples = split_by_key(records, heldout_fraction, window)
        params = settings.training.params(settings.codec)
        started = time.monotonic()
        report = train(samples, params, namespace=namespace, champion=champion)
        stored = None
        if report.decision is Decision.PROMOTED:
            stored = promote(
                store,
                registry,
                report,
                window=window,
                parent_id=champion.id if champion else None,
                activate=not args.no_activate,
            )
        summary = report.summary() | {
            "trigger": "manual",
            "finished_at": time.time(),
            "seconds": round(time.monotonic() - started, 3),
            "stored_id": stored.id if stored else None,
        }
        entry = report.to_dict() | summary
        store.record_training(namespace, entry)
        if registry is not None:
            registry.publish_training(namespace, summary)
    finally:
        if registry is not None:
            registry.close()
    if args.json:
        print(json.dumps(entry, indent=2))
    else:
        print(format_training(report, stored, stored is not None and not args.no_activate))
        if stored is not None and registry is not None:
            print(f"published to registry topic {registry.topic}")
    if report.decision is Decision.FAILED:
        print(f"{PROG}: training failed: {report.reason}", file=sys.stderr)
        return 1
    return 0


def _open_registry(settings: Settings, role: str) -> Registry:
    if not settings.registry.enabled:
        raise ConfigError(
            "the registry is disabled (ZDICT_REGISTRY__ENABLED=false); drop --publish/--registry "
            "or enable it"
        )
    return Registry.open(settings, role)


def cmd_evaluate(args: argparse.Namespace) -> int:
    settings = _settings(args, **_training_overrides(args))
    lines = read_lines(args.file)
    samples = split_ordered(lines, args.train_fraction, window=f"{args.file}")
    evaluation = evaluate(samples, settings.training.params(settings.codec))
    if args.json:
        print(json.dumps(evaluation.to_dict(), indent=2))
    else:
        print(format_evaluation(evaluation))
    if evaluation.training.decision is Decision.FAILED:
        print(f"{PROG}: evaluation failed: {evaluation.training.reason}", file=sys.stderr)
        return 1
    return 0


def _dict_rows(listed: list[tuple[DictionaryMeta, bool]]) -> list[list[object]]:
    return [
        [
            str(meta.id),
            meta.namespace,
            meta.version,
            meta.size,
            meta.level,
            meta.heldout_ratio,
            meta.break_even_size,
            meta.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            "*" if on else "",
        ]
        for meta, on in listed
    ]


def _print_dicts(listed: list[tuple[DictionaryMeta, bool]], as_json: bool, where: str) -> None:
    if as_json:
        entries = [meta.model_dump(mode="json") | {"active": on} for meta, on in listed]
        print(json.dumps(entries, indent=2))
    elif listed:
        print(render(_DICT_HEADERS, _dict_rows(listed)))
    else:
        print(f"no dictionaries in {where}")


def cmd_dicts(args: argparse.Namespace) -> int:
    settings = _settings(args)
    store = DictionaryStore(settings.dictionaries)
    if args.registry:
        registry = _open_registry(settings, "operator")
        try:
            return _dicts_in_registry(args, registry, store)
        finally:
            registry.close()
    if args.action == "list":
        namespaces = [validate_namespace(args.namespace)] if args.namespace else store.namespaces()
        listed = [
            (meta, meta.id == active)
            for ns in namespaces
            for active in [store.active_id(ns)]
            for meta in store.versions(ns)
        ]
        _print_dicts(listed, args.json, str(store.root))
        return 0
    if args.action == "show":
        print(store.get(args.id).meta.model_dump_json(indent=2))
        return 0
    namespace = validate_namespace(args.namespace)
    if args.action == "activate":
        dictionary = store.activate(namespace, args.id)
    else:
        dictionary = store.rollback(namespace)
    print(
        f"namespace {namespace}: dictionary {dictionary.id} "
        f"(version {dictionary.meta.version}) is active in {store.root}"
    )
    if settings.registry.enabled:
        print(
            f"{PROG}: note: only this store changed; a sidecar that follows the registry topic "
            f"({settings.registry.topic}) goes back to the registry's choice within seconds - "
            "add --registry to switch every sidecar",
            file=sys.stderr,
        )
    return 0


def _dicts_in_registry(args: argparse.Namespace, registry: Registry, store: DictionaryStore) -> int:
    """`dicts ... --registry`: the registry's view; activations are published to every host."""
    state = registry.state
    if args.action == "list":
        namespace = validate_namespace(args.namespace) if args.namespace else None
        listed = [
            (
                d.meta,
                state.activations.get(d.namespace) is not None
                and state.activations[d.namespace].dict_id == d.id,
            )
            for d in state.versions(namespace)
        ]
        _print_dicts(listed, args.json, f"registry topic {registry.topic}")
        return 0
    if args.action == "show":
        dictionary = state.dictionaries.get(args.id)
        if dictionary is None:
            raise DictionaryNotFound(
                f"dictionary {args.id} is not in registry topic {registry.topic}"
            )
        print(dictionary.meta.model_dump_json(indent=2))
        return 0
    namespace = validate_namespace(args.namespace)
    if args.action == "activate":
        activation = registry.publish_activation(namespace, args.id, "activate")
    else:
        activation = registry.rollback(namespace)
    sync_store(registry, store, [namespace])
    dictionary = state.dictionaries[activation.dict_id]
    print(
        f"namespace {namespace}: dictionary {dictionary.id} (version {dictionary.meta.version}) "
        f"is active, published to registry topic {registry.topic} for every sidecar"
    )
    return 0


def _check_rounds(value: int, flag: str = "--runs") -> None:
    if value < 3:
        raise ConfigError(f"{flag} must be at least 3 (the median of fewer runs says little)")


def _bench_bootstrap() -> str:
    """The broker a benchmark runs against: $KAFKA_BOOTSTRAP_SERVERS, required."""
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not bootstrap:
        raise ConfigError("KAFKA_BOOTSTRAP_SERVERS is not set (make bench starts a local broker)")
    return bootstrap


def cmd_bench_relay(args: argparse.Namespace) -> int:
    from sidecar.bench import codec as bench
    from sidecar.bench import relay as bench_relay

    _check_rounds(args.runs)
    bootstrap = _bench_bootstrap()
    rates: list[float | None] = []
    for item in args.latency_rate.split(","):
        if item.strip() == "max":
            rates.append(None)
        elif item.strip():
            rates.append(float(item))
    kinds = args.kind or ["product_viewed", "order"]
    results = []
    for i, kind in enumerate(kinds):
        results.append(
            bench_relay.bench_kind(
                bootstrap,
                kind,
                args.count,
                args.partitions,
                args.runs,
                rates=rates if i == 0 or args.all_kinds else (),
                latency_seconds=args.latency_seconds,
                # Trainer on vs off is measured on the first kind (the default is on everywhere).
                saturation=[
                    v
                    for v in bench_relay.SATURATION
                    if i == 0 or args.all_kinds or v.training or v.pass_through
                ],
            )
        )
    for r in results:
        print()
        print(format_relay(r, args.runs))
    out = Path(args.json_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": "relay",
        "environment": bench.environment(),
        "settings": vars(args) | {"func": None, "argv": None},
        "results": [r.to_dict() for r in results],
    }
    out.write_text(json.dumps(payload, indent=2, default=str))
    print(f"\nwrote {out}")
    try:
        print(f"wrote {bench_relay.plot(results, Path(args.png))}")
    except MissingDependency as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
    return 0


def format_relay(result: Any, runs: int) -> str:
    """`bench relay`'s tables for one kind: saturation, then latency at fixed loads."""
    from sidecar.bench import relay as bench_relay

    variants = {v.name: v for v in (*bench_relay.SATURATION, *bench_relay.LATENCY)}
    names = list(result.saturation)
    base = statistics.median(r.rate for r in result.saturation[names[0]]) if names else 1.0
    rows: list[list[object]] = []
    for name, runs_ in result.saturation.items():
        rates = [r.rate for r in runs_]
        med = statistics.median(rates)
        cpu = [r.cpu_seconds / (result.count / 1e6) for r in runs_]
        rows.append(
            [
                name,
                variants[name].trainer,
                bench_relay.median_range(rates),
                round(med / base, 2),
                bench_relay.median_range(cpu, "{:.1f}"),
                round(max(r.peak_rss_bytes for r in runs_) / 2**20),
                sum(r.training_runs for r in runs_),
            ]
        )
    out = [
        render(
            (
                "variant",
                "trainer",
                "msg/s median [min-max]",
                "x pass-through",
                "CPU s / M msgs",
                "peak RSS MiB",
                "training runs",
            ),
            rows,
            f"relay over {result.count:,} pre-loaded {result.kind} events "
            f"({result.mean_bytes:.0f} B), {result.partitions} partitions, {runs} rounds after a "
            "warm-up round",
        )
    ]
    if result.latency:
        lat_rows: list[list[object]] = []
        for key, runs_ in result.latency.items():
            name = key.split(" @ ")[0]
            lat_rows.append(
                [
                    key,
                    variants[name].trainer,
                    bench_relay.median_range([r.achieved_rate for r in runs_]),
                    bench_relay.median_range([r.p50_ms for r in runs_], "{:.1f}"),
                    bench_relay.median_range([r.p99_ms for r in runs_], "{:.1f}"),
                    bench_relay.median_range([r.max_ms for r in runs_], "{:.0f}"),
                ]
            )
        out += [
            "",
            render(
                ("variant @ offered", "trainer", "msg/s through", "p50 ms", "p99 ms", "max ms"),
                lat_rows,
                f"end-to-end latency (producer timestamp -> output consumer), {result.kind}, "
                f"{bench_relay.WARMUP_SECONDS:.0f} s warm-up per run not measured; max = as fast "
                "as one producer can (latency is then the queue)",
            ),
        ]
    return "\n".join(out)


def _median_range(values: Sequence[float], fmt: str = "{:,.0f}") -> str:
    if not values:
        return "-"
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{fmt.format(mid)} [{fmt.format(low)}-{fmt.format(high)}]"


def cmd_bench_storage(args: argparse.Namespace) -> int:
    from sidecar.bench import codec as bench
    from sidecar.bench import storage as bench_storage

    _check_rounds(args.runs)
    bootstrap = _bench_bootstrap()
    if args.data_dir is None:
        raise ConfigError(
            "--data-dir is required: the broker's log.dirs, whose segments are measured "
            "(make bench passes the local broker's, deploy/kafka/.cache/run/data)"
        )
    pid = args.broker_pid
    if pid is None and args.broker_pid_file is not None:
        try:
            pid = int(Path(args.broker_pid_file).read_text().strip())
        except (OSError, ValueError):
            pid = None  # the broker's CPU is then not reported
    fills = tuple(int(f) for f in args.fills.split(","))
    results = bench_storage.bench_storage(
        bootstrap,
        Path(args.data_dir),
        pid=pid,
        kind=args.kind,
        count=args.count,
        partitions=args.partitions,
        runs=args.runs,
        fills=fills,
    )
    print()
    print(format_storage(results))
    out = Path(args.json_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": "storage",
        "environment": bench.environment(),
        "settings": results.settings,
        "results": results.to_dict(),
    }
    out.write_text(json.dumps(payload, indent=2, default=str))
    print(f"\nwrote {out}")
    try:
        print(f"wrote {bench_storage.plot(results, Path(args.png))}")
    except MissingDependency as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
    return 0


def format_storage(results: Any) -> str:
    """`bench storage`'s tables: bytes per message by fill and variant, the sidecar's own
    output, the crossovers."""
    from sidecar.bench import storage as bench_storage

    n = results.messages
    mean = results.raw_bytes / n

    def cell(v: Any) -> str:
        return f"{v.bytes_per_message:.1f} ({results.raw_bytes / v.stored_bytes:.2f}x)"

    def cpu(v: Any) -> str:
        value = bench_storage.median_cpu(v, v.messages)
        return "-" if value is None else f"{value:.1f}"

    rows: list[list[object]] = []
    for fill in results.fills():
        for src in ("raw", "sidecar"):
            variants = [results.find(src, c, fill) for c in bench_storage.CODECS]
            none = variants[0]
            exact = "yes" if none.predicted_bytes == none.stored_bytes else "NO"
            rows.append(
                [
                    fill,
                    src,
                    *(cell(v) for v in variants),
                    " / ".join(f"{v.fill:.1f}" for v in variants),
                    " / ".join(cpu(v) for v in variants),
                    exact,
                ]
            )
    title = (
        f"bytes per message as the broker stores them ({n:,} {results.kind} events of {mean:.1f} "
        "B, log segments: batch headers and record framing included); (x) = raw value bytes / "
        "stored bytes"
    )
    out = [
        render(
            (
                "fill",
                "records",
                "none",
                "zstd",
                "lz4",
                "achieved fill n/z/l",
                "broker CPU s/M n/z/l",
                "none = format",
            ),
            rows,
            title,
        )
    ]
    own_rows: list[list[object]] = []
    for codec in ("none", "zstd"):
        v = results.find("sidecar", codec, None)
        own_rows.append(
            [f"sidecar output, its producer, {codec}", cell(v), f"{v.fill:.1f}", cpu(v)]
        )
    out += [
        "",
        render(
            ("variant", "B/message (x)", "achieved fill", "broker CPU s/M"),
            own_rows,
            "through the sidecar (zdict-sidecar run over the same events, training off)",
        ),
        "",
    ]
    own = results.find("sidecar", "none", None)
    for codec in ("zstd", "lz4"):
        for label, ours in (("at the same fill", None), ("as its own producer writes", own)):
            at = results.crossover(codec, ours)
            where = f"~{at:.1f} records per batch" if at is not None else "never within the fills"
            out.append(f"crossover, producer {codec} vs the sidecar's records {label}: {where}")
    return "\n".join(out)


def cmd_bench_lifecycle(args: argparse.Namespace) -> int:
    from sidecar.bench import codec as bench
    from sidecar.bench import lifecycle as bench_lifecycle

    _check_rounds(args.cost_rounds, "--cost-rounds")
    if not 0 < args.drift_after < args.seconds:
        raise ConfigError("--drift-after must be within --seconds")
    bootstrap = _bench_bootstrap()
    results = bench_lifecycle.bench_lifecycle(
        bootstrap,
        drift_runs=args.runs,
        rate=args.rate,
        seconds=args.seconds,
        drift_after=args.drift_after,
        cost_rounds=args.cost_rounds,
        cost_messages=args.cost_messages,
    )

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
    rows.append(["median", "", "", "", "", _median_range(recover, "{:.1f}"), "", ""])
    print()
    print(
        render(
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
            f"drift: {args.rate:,} product_viewed events/s for {args.seconds:.0f} s, schema "
            f"change after {args.drift_after:.0f} s (+s: seconds after the change)",
        )
    )
    trainings = [e for run in results.drift for e in run.trainings]
    seconds = [float(e["seconds"]) for e in trainings]
    cpu = [float(e["cpu_seconds"]) for e in trainings if e.get("cpu_seconds")]
    print(
        f"\ntraining runs beside the relay: {len(trainings)}, wall "
        f"{_median_range(seconds, '{:.1f}')} s, CPU {_median_range(cpu, '{:.1f}')} s "
        "(median [min-max])"
    )
    cost = results.cost
    cost_rows = [
        ["msg/s while a training run is under way", _median_range([r.active_rate for r in cost])],
        ["msg/s while none is", _median_range([r.idle_rate for r in cost])],
        ["ratio active / idle (within each run)", _median_range([r.ratio for r in cost], "{:.2f}")],
        [
            "training share of the sidecar's CPU",
            _median_range([100 * r.cpu_share for r in cost], "{:.1f}%"),
        ],
        [
            "training run, wall seconds",
            _median_range([s for r in cost for s in r.training_seconds], "{:.1f}"),
        ],
        ["training runs per round", _median_range([r.training_runs for r in cost], "{:.0f}")],
    ]
    print()
    print(
        render(
            ("", "median [min-max]"),
            cost_rows,
            f"cost: relay over {args.cost_messages:,} pre-loaded events while the trainer "
            f"retrains every 5 s, {len(cost)} rounds after a warm-up",
        )
    )
    out = Path(args.json_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": "lifecycle",
        "environment": bench.environment(),
        "settings": results.settings,
        "results": bench_lifecycle.results_dict(results),
    }
    out.write_text(json.dumps(payload, indent=2, default=str))
    print(f"\nwrote {out}")
    try:
        print(f"wrote {bench_lifecycle.plot(results, Path(args.png))}")
    except MissingDependency as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
    return 0


def format_batch_table(result: Any) -> str:
    """`bench codec`'s Kafka-style batch rows of one message set, the crossover and the oracle."""
    from sidecar.bench import codec as bench

    rows: list[list[object]] = []
    variants = list(result.batches[0].bytes_per_message) if result.batches else []
    codecs = list(result.batches[0].speeds) if result.batches else []
    for row in result.batches:
        base = row.bytes_per_message["raw none"]
        cells: list[object] = [row.fill]
        for v in variants:
            b = row.bytes_per_message[v]
            cells.append(f"{b:.1f} ({base / b:.2f}x)")
        cells += [str(row.speeds[c]) for c in codecs]
        rows.append(cells)
    headers = ["fill", *variants, *(f"{c} msg/s" for c in codecs)]
    title = (
        f"{result.label}: bytes per message stored in record batches of `fill` records (Kafka v2 "
        "format, exact; key null, headers counted), (x) = raw none / variant at that fill; "
        "sidecar = the encoder's output records"
    )
    out = [render(headers, rows, title)]
    fills = [row.fill for row in result.batches]
    ours = [row.bytes_per_message["sidecar none"] for row in result.batches]
    for codec in codecs:
        theirs = [row.bytes_per_message[f"raw {codec}"] for row in result.batches]
        at = bench.crossover(fills, ours, theirs)
        where = f"at ~{at:.1f} records per batch" if at is not None else f"not within {fills[-1]}"
        out.append(
            f"crossover: producer {codec} stores fewer bytes than the sidecar (compression none) "
            f"{where}"
        )
    oracle = ", ".join(f"level {lvl}: {b:.1f} B/message" for lvl, b in result.oracle.items())
    out.append(f"whole held-out stream as one zstd frame (the oracle): {oracle}")
    out.append(
        f"encode_batch / multi_compress_to_buffer speed: {result.encode_vs_batch_api:.2f} "
        "(target: within 2x, i.e. >= 0.50)"
    )
    return "\n".join(out)


def cmd_bench(args: argparse.Namespace) -> int:
    from sidecar.bench import (
        codec as bench,  # imported on use: it is the only command that needs the zstd CLI
    )

    _check_rounds(args.runs)
    if args.input:
        sets = [(Path(args.input).name, read_lines(args.input))]
    else:
        kinds = args.kind or ["product_viewed", "customer"]
        sets = [(kind, list(generate(kind, args.count, seed=args.seed))) for kind in kinds]
    results = [bench.bench_codec(label, values, runs=args.runs) for label, values in sets]
    rows: list[list[object]] = []
    for r in results:
        native = r.native["compress_msg_per_s"]
        for path, speed in r.speeds.items():
            rows.append([r.label, path, str(speed), round(speed.median / native, 2)])
        rows.append([r.label, "zstd -b (native, same messages)", f"{native:,.0f}", 1.0])
        rows.append(
            [
                r.label,
                "zstd -d (native decompress)",
                f"{r.native['decompress_msg_per_s']:,.0f}",
                "-",
            ]
        )
    print(
        render(
            ("messages", "path", "msg/s median [min-max]", "x native"),
            rows,
            f"codec speed, one thread, {args.runs} runs after a warm-up",
        )
    )
    summary = [
        [
            r.label,
            r.messages,
            round(r.mean_size, 1),
            f"{r.dict_bytes // 1024} KiB",
            r.level,
            round(r.ratio_with_header, 3),
            round(r.ratio_frames_only, 3),
            round(r.nodict_ratio, 3),
        ]
        for r in results
    ]
    print()
    print(
        render(
            (
                "messages",
                "held-out",
                "mean B",
                "dict",
                "level",
                "ratio (with header)",
                "ratio (frames)",
                "no dict",
            ),
            summary,
            "held-out ratio (trained on the first 20%)",
        )
    )
    for r in results:
        print()
        print(format_batch_table(r))
    out = Path(args.json_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": "codec",
        "environment": bench.environment(),
        "settings": {"runs": args.runs, "count": args.count, "seed": args.seed},
        "results": [bench.result_dict(r) for r in results],
    }
    out.write_text(json.dumps(payload, indent=2))
    print(f"\nwrote {out}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from sidecar import service

    relay: dict[str, Any] = {}
    if args.input_topic:
        relay["input_topics"] = tuple(args.input_topic)
    for key in ("output_topic", "group_id", "batch_size", "workers"):
        if getattr(args, key) is not None:
            relay[key] = getattr(args, key)
    if args.create_topics:
        relay["create_topics"] = True
    if args.pass_through:
        relay["compress"] = False
    if args.mode is not None:
        relay["mode"] = args.mode
    if args.guarantee is not None:
        relay["guarantee"] = args.guarantee
    overrides: dict[str, Any] = {"relay": relay} if relay else {}
    if args.no_training:
        overrides["training"] = {"enabled": False}
    if args.no_registry:
        overrides["registry"] = {"enabled": False}
    if args.metrics_port is not None:
        overrides["metrics"] = {"port": args.metrics_port}
    settings = _settings(args, **overrides)
    if settings.relay.workers > 1:
        argv = _without_option(args.argv, "--workers")
        if settings.metrics.port:
            # Worker i listens on port + i (its environment): a flag would give them all one.
            argv = _without_option(argv, "--metrics-port")
        return service.run_workers(argv, settings.relay.workers, settings.metrics.port)
    return service.run_relay(settings)


def cmd_cat(args: argparse.Namespace) -> int:
    import signal

    from sidecar.tools.cat import CatOptions, cat

    settings = _settings(args)
    options = CatOptions(
        topic=args.topic,
        partitions=args.partition,
        offset=args.offset,
        count=args.count,
        exit_at_end=args.exit,
        key=args.key,
        headers=args.headers,
        json=args.json,
        delimiter=args.delimiter.encode().decode("unicode_escape").encode(),
    )
    decoder = _decoder(settings, args.no_registry, "cat")
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    try:
        cat(settings, decoder, options, sys.stdout.buffer, stop=lambda: stopping)
    finally:
        decoder.close()
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from sidecar.tools import report
    from sidecar.tools.charts import require_matplotlib

    require_matplotlib()
    if args.prometheus:
        window = report.parse_duration(args.rate_window) if args.rate_window else None
        data = report.from_prometheus(
            args.prometheus, args.namespace, report.parse_duration(args.range), window
        )
    else:
        data = report.from_metrics(args.metrics, args.namespace)
    out = Path(args.out)
    report.write_png(data, out)
    if args.json:
        print(json.dumps(data.summary.to_dict() | {"png": str(out)}, indent=2))
    else:
        print(report.format_summary(data.summary, out))
    return 0


def _decoder(settings: Settings, no_registry: bool, role: str) -> Decoder:
    """A decoder over the registry (or, offline, the local store) of `settings`."""
    resolver: DictionaryResolver = DictionaryStore(settings.dictionaries)
    if settings.registry.enabled and not no_registry:
        registry = _open_registry(settings, role)
        resolver = RegistryResolver(registry, settings.registry.follow_interval)
    return Decoder(
        resolver,
        max_output_size=settings.codec.max_output_size,
        header_key=settings.codec.header_key,
    )


def cmd_verify(args: argparse.Namespace) -> int:
    from sidecar.tools.verify import verify

    settings = _settings(args)
    output = args.output or settings.relay.output_for(args.input)
    with _decoder(settings, args.no_registry, "verify") as decoder:
        report = verify(settings, decoder, args.input, output, exactly_once=args.exactly_once)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        rows: list[list[object]] = [
            ["input records", f"{report.inputs:,}"],
            ["output records", f"{report.outputs:,}"],
            ["lost", f"{report.lost:,}"],
            ["duplicated", f"{report.duplicated:,}"],
            ["corrupted (do not decode)", f"{report.corrupted:,}"],
            ["unseen (decode to no input)", f"{report.unseen:,}"],
        ]
        scope = "per partition" if report.per_partition else "over the whole topic"
        title = f"verify {report.input_topic} → {report.output_topic} ({scope})"
        print(render(("", "count"), rows, title))
        for example in report.examples:
            print(f"  {example}")
        verdict = "ok" if report.ok else "NOT OK"
        wanted = "exactly once" if args.exactly_once else "at least once"
        print(f"{verdict}: {wanted} ({report.seconds:.1f} s)")
    return 0 if report.ok else 1


def cmd_demo(args: argparse.Namespace) -> int:
    from sidecar.bench import demo

    return demo.main(duration=args.duration, rate=args.rate)


def _without_option(argv: Sequence[str], option: str) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == option:
            skip = True
        elif not arg.startswith(option + "="):
            out.append(arg)
    return out


_RUN_EPILOG = """\
environment (every setting has one; see the README, Configuration):
  ZDICT_RELAY__INPUT_TOPICS         JSON list of input topics
  ZDICT_RELAY__OUTPUT_TOPIC         output topic name, default {topic}.zd
  ZDICT_RELAY__GROUP_ID             consumer group, default zdict-sidecar
  ZDICT_RELAY__WORKERS              processes in the group
  ZDICT_RELAY__CREATE_TOPICS        create missing output topics (true/false)
  ZDICT_RELAY__UNREACHABLE_TIMEOUT  seconds without a broker before exiting 1
  ZDICT_RELAY__MODE                 encode (default) or decode (output default {topic}.decoded)
  ZDICT_RELAY__GUARANTEE            at-least-once (default) or exactly-once (transactions)
  ZDICT_RELAY__DEAD_LETTER_TOPIC    set records that cannot be processed aside ({topic}.dlq)
  ZDICT_METRICS__HOST, __PORT       /metrics /healthz /readyz, default 0.0.0.0:9400
  ZDICT_DICTIONARIES                the dictionary store (a cache of the registry)
  ZDICT_REGISTRY__TOPIC             registry topic, default _zdict_dictionaries
  ZDICT_REGISTRY__ENABLED           false: the local store alone (one host, offline)
  ZDICT_TRAINING__ENABLED           false: never train in this process (still follows)
  ZDICT_TRAINING__RETRAIN_INTERVAL  seconds between scheduled training runs, default 3600
  ZDICT_TRAINING__DRIFT_TOLERANCE   retrain early this fraction below the reference ratio
  ZDICT_TRAINING__DRIFT_WINDOW      seconds the live ratio is judged over, default 300
  ZDICT_SAMPLING__MAX_BYTES         training reservoir per namespace, default 8 MiB
  ZDICT_KAFKA__<PROPERTY>           any librdkafka property, '_' for '.'
                                    (e.g. ZDICT_KAFKA__SASL_PASSWORD; never logged)
  ZDICT_CONSUMER__<PROPERTY>        consumer-only properties; ZDICT_PRODUCER__ likewise
  KAFKA_BOOTSTRAP_SERVERS           used when ZDICT_KAFKA__BOOTSTRAP_SERVERS is not set
  ZDICT_LOG_FORMAT, ZDICT_LOG_LEVEL auto|json|console, debug|info|warning|error
"""


_DICT_HEADERS = (
    "id",
    "namespace",
    "version",
    "bytes",
    "level",
    "held-out ratio",
    "break-even",
    "created (UTC)",
    "active",
)


# -- parser --------------------------------------------------------------------------------------


def _common(parser: argparse.ArgumentParser, store: bool = True) -> None:
    parser.add_argument("--config", metavar="FILE", help="TOML config file (see README)")
    if store:
        parser.add_argument(
            "--dictionaries",
            metavar="DIR",
            help="dictionary store (env ZDICT_DICTIONARIES; default ./dictionaries)",
        )


def _dicts_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--registry",
        action="store_true",
        help="the registry topic (every sidecar follows it) instead of the local store",
    )
    _common(parser)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Per-message zstd compression with trained, versioned dictionaries for Kafka.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("generate", help="print deterministic sample events, one per line")
    p.add_argument("--kind", choices=KINDS, default="product_viewed")
    p.add_argument("-n", "--count", type=int, default=10_000, help="events (default 10000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--drift-at", type=int, metavar="K", help="change the schema after K events")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser(
        "train", help="train a dictionary from messages, store it, activate if better"
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", metavar="FILE", help="one message per line; - for stdin")
    source.add_argument("--topic", metavar="TOPIC", help="sample the latest records of a topic")
    p.add_argument(
        "--sample", type=int, default=20_000, metavar="N", help="records to read with --topic"
    )
    p.add_argument("--namespace", help="default: the --topic name (required with --input)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--heldout-fraction", type=float, metavar="F", help="default 0.2")
    p.add_argument("--min-encode-rate", type=float, metavar="MSG_PER_S", help="speed budget")
    p.add_argument(
        "--no-activate", action="store_true", help="store a winner without activating it"
    )
    p.add_argument(
        "--publish",
        action="store_true",
        help="against the registry: its champion, and a winner published to every sidecar",
    )
    _common(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("evaluate", help="what would I save on my data? (nothing is stored)")
    p.add_argument("file", metavar="FILE", help="one message per line; - for stdin")
    p.add_argument("--train-fraction", type=float, default=0.2, metavar="F", help="default 0.2")
    p.add_argument("--json", action="store_true")
    p.add_argument("--min-encode-rate", type=float, metavar="MSG_PER_S", help="speed budget")
    _common(p, store=False)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser(
        "run",
        help="relay input topics to compressed output topics (at least once)",
        epilog=_RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--input-topic", action="append", metavar="TOPIC", help="repeatable")
    p.add_argument("--output-topic", metavar="NAME", help="default {topic}.zd")
    p.add_argument("--group-id", metavar="GROUP")
    p.add_argument("--create-topics", action="store_true", help="create missing output topics")
    p.add_argument("--workers", type=int, metavar="N", help="processes in the consumer group")
    p.add_argument("--batch-size", type=int, metavar="N")
    p.add_argument("--metrics-port", type=int, metavar="PORT", help="0 picks a free port")
    p.add_argument("--pass-through", action="store_true", help="encode nothing (a cost baseline)")
    p.add_argument(
        "--mode",
        choices=("encode", "decode"),
        help="encode (default) or decode: a compressed topic to {topic}.decoded",
    )
    p.add_argument(
        "--guarantee",
        choices=("at-least-once", "exactly-once"),
        help="at-least-once (default), or exactly-once with Kafka transactions",
    )
    p.add_argument("--no-training", action="store_true", help="never train inside the relay")
    p.add_argument(
        "--no-registry",
        action="store_true",
        help="the local store only: no registry topic (offline; one host)",
    )
    _common(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("cat", help="print a topic's records decoded, like kcat -C")
    p.add_argument("--topic", "-t", required=True)
    p.add_argument("--partition", "-p", type=int, action="append", help="repeatable; default all")
    p.add_argument(
        "--offset",
        "-o",
        default="beginning",
        help="beginning (default), end, an offset, or -N (N records before the end)",
    )
    p.add_argument("--count", "-c", type=int, metavar="N", help="stop after N records")
    p.add_argument("--exit", "-e", action="store_true", help="stop at the end of every partition")
    p.add_argument("--key", "-K", action="store_true", help="print the key before the value")
    p.add_argument("--headers", action="store_true", help="print the headers (k=v,...) first")
    p.add_argument("--json", action="store_true", help="one JSON object per record")
    p.add_argument("--delimiter", "-D", default="\\n", help="after each record (default \\n)")
    p.add_argument("--no-registry", action="store_true", help="decode with the local store only")
    _common(p)
    p.set_defaults(func=cmd_cat)

    p = sub.add_parser(
        "verify", help="did every input record reach the output once, intact? (exit 1 if not)"
    )
    p.add_argument("--input", "-i", required=True, metavar="TOPIC")
    p.add_argument("--output", "-o", metavar="TOPIC", help="default: the relay's output name")
    p.add_argument("--exactly-once", action="store_true", help="duplicates count as a failure too")
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-registry", action="store_true", help="decode with the local store only")
    _common(p)
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("report", help="a PNG of the savings, from Prometheus or a /metrics URL")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--prometheus", metavar="URL", help="e.g. http://localhost:9090")
    source.add_argument("--metrics", metavar="URL", help="a sidecar's /metrics: since it started")
    p.add_argument("--namespace", metavar="REGEX", help="default: every namespace")
    p.add_argument("--range", default="1h", metavar="DURATION", help="with --prometheus; 1h")
    p.add_argument("--rate-window", metavar="DURATION", help="default max(4 steps, 1m)")
    p.add_argument("--out", required=True, metavar="FILE.png")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("demo", help="the whole job on a local broker (make demo)")
    p.add_argument("--duration", type=float, default=60.0, metavar="S", help="seconds of traffic")
    p.add_argument("--rate", type=int, default=5000, metavar="N", help="events per second")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("bench", help="benchmarks that print tables and write JSON")
    kinds = p.add_subparsers(dest="bench", required=True, metavar="BENCH")
    b = kinds.add_parser("codec", help="codec speed and ratio next to the native zstd CLI")
    b.add_argument("--kind", action="append", choices=KINDS, help="repeatable; default two kinds")
    b.add_argument("--input", metavar="FILE", help="benchmark these messages instead")
    b.add_argument("-n", "--count", type=int, default=100_000)
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--runs", type=int, default=3, help="measured runs after one warm-up (>= 3)")
    b.add_argument("--json-out", default="out/bench-codec.json", metavar="FILE")
    b.set_defaults(func=cmd_bench, kind=None)
    b = kinds.add_parser("relay", help="the relay on a real broker: compress vs pass-through")
    b.add_argument(
        "--kind", action="append", choices=KINDS, help="repeatable; default product_viewed, order"
    )
    b.add_argument("-n", "--count", type=int, default=1_000_000, help="pre-loaded events")
    b.add_argument("--partitions", type=int, default=4)
    b.add_argument("--runs", type=int, default=3, help="measured rounds after one warm-up (>= 3)")
    b.add_argument(
        "--latency-rate",
        default="20000,max",
        metavar="RATES",
        help="offered loads (records/s, comma list; max: unthrottled); '' for none",
    )
    b.add_argument("--latency-seconds", type=float, default=6.0, help="measured seconds per run")
    b.add_argument(
        "--all-kinds",
        action="store_true",
        help="latency and the --no-training variant for every kind (default: the first only)",
    )
    b.add_argument("--json-out", default="out/bench-relay.json", metavar="FILE")
    b.add_argument("--png", default="out/bench-relay.png", metavar="FILE")
    b.set_defaults(func=cmd_bench_relay)
    b = kinds.add_parser(
        "storage", help="bytes as a real broker stores them: producer zstd/lz4 vs the sidecar"
    )
    b.add_argument("--kind", choices=KINDS, default="product_viewed")
    b.add_argument(
        "-n", "--count", type=int, default=4096, help="events (a multiple of partitions x fills)"
    )
    b.add_argument("--partitions", type=int, default=8)
    b.add_argument("--runs", type=int, default=3, help="measured runs after a warm-up (>= 3)")
    b.add_argument("--fills", default="1,2,4,8,16,128", help="records per batch (comma list)")
    b.add_argument("--data-dir", metavar="DIR", help="the broker's log.dirs (segments measured)")
    b.add_argument("--broker-pid", type=int, metavar="PID", help="the broker's pid (its CPU)")
    b.add_argument("--broker-pid-file", metavar="FILE", help="a file holding the broker's pid")
    b.add_argument("--json-out", default="out/bench-storage.json", metavar="FILE")
    b.add_argument("--png", default="out/bench-storage.png", metavar="FILE")
    b.set_defaults(func=cmd_bench_storage)
    b = kinds.add_parser(
        "lifecycle", help="drift → retrain → recovery, and the relay's speed while training"
    )
    b.add_argument("--runs", type=int, default=3, help="drift runs (default 3)")
    b.add_argument("--rate", type=int, default=5000, help="events/s in the drift runs")
    b.add_argument("--seconds", type=float, default=90.0, help="length of one drift run")
    b.add_argument("--drift-after", type=float, default=45.0, help="seconds before the change")
    b.add_argument("--cost-rounds", type=int, default=3, help="measured rounds after a warm-up")
    b.add_argument("--cost-messages", type=int, default=2_000_000)
    b.add_argument("--json-out", default="out/bench-lifecycle.json", metavar="FILE")
    b.add_argument("--png", default="out/bench-lifecycle.png", metavar="FILE")
    b.set_defaults(func=cmd_bench_lifecycle)

    p = sub.add_parser("dicts", help="list, show, activate or roll back stored dictionaries")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    a = actions.add_parser("list", help="every dictionary, * marks the active one")
    a.add_argument("--namespace")
    a.add_argument("--json", action="store_true")
    _dicts_common(a)
    a = actions.add_parser("show", help="metadata of one dictionary")
    a.add_argument("id", type=int)
    _dicts_common(a)
    a = actions.add_parser("activate", help="make a stored dictionary the active one")
    a.add_argument("--namespace", required=True)
    a.add_argument("id", type=int)
    _dicts_common(a)
    a = actions.add_parser("rollback", help="re-activate the previously active dictionary")
    a.add_argument("--namespace", required=True)
    _dicts_common(a)
    p.set_defaults(func=cmd_dicts)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(argv) if argv is not None else sys.argv[1:]
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except ConfigError as exc:
        print(f"{PROG}: configuration error: {exc}", file=sys.stderr)
        return 2
    except ZdictError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`generate | head`); nothing is lost that anyone wanted.
        sys.stderr.close()
        return 0
