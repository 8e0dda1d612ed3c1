"""The `zdict-sidecar` command line: thin subcommands over the library modules.

Exit codes: 0 success; 1 an expected failure (the message names the cause); 2 bad usage or
configuration; 130 interrupted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from sidecar import __version__
from sidecar.config import Settings, load_settings
from sidecar.dictionaries.lifecycle import store_trained
from sidecar.dictionaries.model import Dictionary, validate_namespace
from sidecar.dictionaries.store import DictionaryStore
from sidecar.dictionaries.training import (
    Decision,
    Measurement,
    TrainingReport,
    split_by_key,
    split_ordered,
    train,
)
from sidecar.errors import ConfigError, InputError, ZdictError
from sidecar.evaluation import Evaluation, evaluate
from sidecar.generate import KINDS, generate
from sidecar.tables import render

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
    if getattr(args, "dictionaries", None) is not None:
        overrides["dictionaries"] = args.dictionaries
    return load_settings(getattr(args, "config", None), **overrides)


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
    champion = store.active(namespace)
    if args.topic:
        from sidecar.topic_sample import read_sample

        sample = read_sample(settings, args.topic, args.sample)
        records, window = sample.records, sample.window
    else:
        lines = read_lines(args.input)
        records = [(str(i).encode(), line) for i, line in enumerate(lines)]
        window = f"{args.input} lines 1-{len(lines)}"
    samples = split_by_key(records, heldout_fraction, window)
    params = settings.training.params(settings.codec)
    report = train(samples, params, namespace=namespace, champion=champion)
    stored = None
    if report.decision is Decision.PROMOTED:
        stored = store_trained(
            store,
            report,
            window=window,
            parent_id=champion.id if champion else None,
            activate=not args.no_activate,
        )
    entry = report.to_dict() | {"stored_id": stored.id if stored else None}
    store.record_training(namespace, entry)
    if args.json:
        print(json.dumps(entry, indent=2))
    else:
        print(format_training(report, stored, stored is not None and not args.no_activate))
    if report.decision is Decision.FAILED:
        print(f"{PROG}: training failed: {report.reason}", file=sys.stderr)
        return 1
    return 0


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


def cmd_dicts(args: argparse.Namespace) -> int:
    store = DictionaryStore(_settings(args).dictionaries)
    if args.action == "list":
        namespaces = [validate_namespace(args.namespace)] if args.namespace else store.namespaces()
        listed = [
            (meta, meta.id == active)
            for ns in namespaces
            for active in [store.active_id(ns)]
            for meta in store.versions(ns)
        ]
        if args.json:
            entries = [meta.model_dump(mode="json") | {"active": on} for meta, on in listed]
            print(json.dumps(entries, indent=2))
        elif listed:
            rows: list[list[object]] = [
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
            print(render(_DICT_HEADERS, rows))
        else:
            print(f"no dictionaries in {store.root}")
        return 0
    if args.action == "show":
        dictionary = store.get(args.id)
        print(dictionary.meta.model_dump_json(indent=2))
        return 0
    namespace = validate_namespace(args.namespace)
    if args.action == "activate":
        dictionary = store.activate(namespace, args.id)
    else:
        dictionary = store.rollback(namespace)
    print(
        f"namespace {namespace}: dictionary {dictionary.id} "
        f"(version {dictionary.meta.version}) is active"
    )
    return 0


def cmd_bench_relay(args: argparse.Namespace) -> int:
    import os

    from sidecar import bench

    if args.runs < 3:
        raise ConfigError("--runs must be at least 3 (the median of fewer runs says little)")
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not bootstrap:
        raise ConfigError("KAFKA_BOOTSTRAP_SERVERS is not set (make bench starts a local broker)")
    results, raw = bench.bench_relay(bootstrap, args.kind, args.count, args.partitions, args.runs)
    base = statistics.median(r.rate for r in results[bench.RELAY_VARIANTS[0][0]])
    rows: list[list[object]] = []
    for name, runs in results.items():
        rates = [r.rate for r in runs]
        med = statistics.median(rates)
        cpu = statistics.median(r.cpu_seconds for r in runs) / (args.count / 1e6)
        rss = max(r.peak_rss_bytes for r in runs) / 2**20
        rows.append(
            [
                name,
                f"{med:,.0f} [{min(rates):,.0f}-{max(rates):,.0f}]",
                round(med / base, 2),
                round(cpu, 1),
                round(rss),
            ]
        )
    title = (
        f"relay over {args.count:,} pre-loaded {args.kind} events ({raw / args.count:.0f} B), "
        f"{args.partitions} partitions, {args.runs} runs after a warm-up round"
    )
    print(
        render(
            (
                "variant",
                "msg/s median [min-max]",
                "x pass-through",
                "CPU s / M msgs",
                "peak RSS MiB",
            ),
            rows,
            title,
        )
    )
    out = Path(args.json_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": "relay",
        "environment": bench.environment(),
        "settings": vars(args) | {"func": None, "argv": None},
        "results": {k: [dataclasses.asdict(r) for r in v] for k, v in results.items()},
    }
    out.write_text(json.dumps(payload, indent=2, default=str))
    print(f"\nwrote {out}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from sidecar import bench  # imported on use: it is the only command that needs the zstd CLI

    if args.runs < 3:
        raise ConfigError("--runs must be at least 3 (the median of fewer runs says little)")
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
    from sidecar.logs import configure_logging

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
    overrides: dict[str, Any] = {"relay": relay} if relay else {}
    if args.metrics_port is not None:
        overrides["metrics"] = {"port": args.metrics_port}
    settings = _settings(args, **overrides)
    configure_logging(settings.log_format, settings.log_level)
    if settings.relay.workers > 1:
        argv = _without_option(args.argv, "--workers")
        return service.run_workers(argv, settings.relay.workers, settings.metrics.port)
    return service.run_relay(settings)


def cmd_report(args: argparse.Namespace) -> int:
    from sidecar import report

    report.require_matplotlib()
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


def cmd_demo(args: argparse.Namespace) -> int:
    from sidecar import demo

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
  ZDICT_METRICS__HOST, __PORT       /metrics /healthz /readyz, default 0.0.0.0:9400
  ZDICT_DICTIONARIES                the dictionary store
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
    _common(p)
    p.set_defaults(func=cmd_run)

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
    b.add_argument("--kind", choices=KINDS, default="product_viewed")
    b.add_argument("-n", "--count", type=int, default=1_000_000)
    b.add_argument("--partitions", type=int, default=4)
    b.add_argument("--runs", type=int, default=3, help="measured rounds after one warm-up (>= 3)")
    b.add_argument("--json-out", default="out/bench-relay.json", metavar="FILE")
    b.set_defaults(func=cmd_bench_relay)

    p = sub.add_parser("dicts", help="list, show, activate or roll back stored dictionaries")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    a = actions.add_parser("list", help="every dictionary, * marks the active one")
    a.add_argument("--namespace")
    a.add_argument("--json", action="store_true")
    _common(a)
    a = actions.add_parser("show", help="metadata of one dictionary")
    a.add_argument("id", type=int)
    _common(a)
    a = actions.add_parser("activate", help="make a stored dictionary the active one")
    a.add_argument("--namespace", required=True)
    a.add_argument("id", type=int)
    _common(a)
    a = actions.add_parser("rollback", help="re-activate the previously active dictionary")
    a.add_argument("--namespace", required=True)
    _common(a)
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
