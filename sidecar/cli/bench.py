"""`bench codec|relay|storage|lifecycle|producer|proxy` (and `bench choice|wire` from
bench_offline): the evidence, with the benchmarks' tables.

The benchmark modules are imported when their command runs: they pull in the Kafka clients,
matplotlib and the native zstd CLI's runner, which no other command needs.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from sidecar.bench.events import KINDS, generate
from sidecar.bench.perf_test import KAFKA_LOCAL
from sidecar.cli.bench_common import MAX_INT32, fills, rounds
from sidecar.cli.bench_lifecycle import add_bench_lifecycle
from sidecar.cli.bench_offline import add_bench_offline
from sidecar.cli.bench_registry import add_bench_registry
from sidecar.cli.bench_savings import add_bench_savings
from sidecar.cli.common import (
    bench_bootstrap,
    note_sample,
    number,
    output_file,
    png_file,
    read_lines,
    write_bench_results,
)
from sidecar.codec import DEFAULT_MAX_OUTPUT_SIZE
from sidecar.errors import ConfigError
from sidecar.tools.tables import render

if TYPE_CHECKING:
    from sidecar.bench.codec import CodecResult, RelayRun
    from sidecar.bench.relay import KindResults
    from sidecar.bench.storage import StorageResults, Variant
    from sidecar.cli.common import Commands


def package_checkout(text: str) -> Path:
    """`bench relay --baseline`: a directory holding the `sidecar` package (a checkout)."""
    path = Path(text)
    if not (path / "sidecar" / "__init__.py").is_file():
        raise argparse.ArgumentTypeError(
            f"expected a directory holding the sidecar package (a checkout of zdict-sidecar, "
            f"e.g. `git worktree add DIR main`), got {text!r}"
        )
    return path.resolve()


def latency_rates(text: str) -> list[float | None]:
    """`--latency-rate`'s offered loads, records/s; None for `max` (unthrottled); '' for none."""
    rates: list[float | None] = []
    rate = number(float, gt=0)
    for item in text.split(","):
        item = item.strip()
        if item == "max":
            rates.append(None)
        elif item:
            try:
                rates.append(rate(item))
            except argparse.ArgumentTypeError:
                raise argparse.ArgumentTypeError(
                    f"expected a comma list of rates > 0 (records/s) or max, got {text!r}"
                ) from None
    return rates


# -- bench codec ---------------------------------------------------------------------------------


def format_codec_speeds(results: Sequence[CodecResult], runs: int) -> str:
    """`bench codec`'s speed table: every path of every message set next to the zstd CLI."""
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
    return render(
        ("messages", "path", "msg/s median [min-max]", "x native"),
        rows,
        f"codec speed, one thread, {runs} runs after a warm-up",
    )


def format_codec_ratios(results: Sequence[CodecResult]) -> str:
    """`bench codec`'s held-out ratio table, one row per message set."""
    rows: list[list[object]] = [
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
    return render(
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
        rows,
        "held-out ratio (trained on the first 20%)",
    )


def format_batch_table(result: CodecResult) -> str:
    """`bench codec`'s Kafka-style batch rows of one message set, the crossover and the oracle."""
    from sidecar.record_batch import crossover

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
        at = crossover(fills, ours, theirs)
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


def cmd_bench_codec(args: argparse.Namespace) -> int:
    from sidecar.bench import codec as bench_codec

    if args.input:
        lines = read_lines(
            args.input,
            max_lines=args.count,
            max_line_bytes=DEFAULT_MAX_OUTPUT_SIZE,
            line_cap="what a decoder takes by default",
        )
        note_sample(lines, "-n")
        sets = [(Path(args.input).name, lines.lines)]
    else:
        kinds = args.kind or ["product_viewed", "customer"]
        sets = [(kind, list(generate(kind, args.count, seed=args.seed))) for kind in kinds]
    results = [bench_codec.bench_codec(label, values, runs=args.runs) for label, values in sets]
    print(format_codec_speeds(results, args.runs))
    print()
    print(format_codec_ratios(results))
    for r in results:
        print()
        print(format_batch_table(r))
    write_bench_results(
        "codec",
        {"runs": args.runs, "count": args.count, "seed": args.seed},
        [bench_codec.result_dict(r) for r in results],
        args.json_out,
    )
    return 0


# -- bench relay ---------------------------------------------------------------------------------


def cmd_bench_relay(args: argparse.Namespace) -> int:
    from sidecar.bench import relay as bench_relay

    bootstrap = bench_bootstrap()
    rates = args.latency_rate
    kinds = args.kind or ["product_viewed", "order"]
    c_relay = shutil.which("kcat") is not None
    if not c_relay:
        print("zdict-sidecar: kcat is not installed: no C relay row", file=sys.stderr)
    results = []
    for i, kind in enumerate(kinds):
        # Settings apart from the defaults (trainer off, transactions) on the first kind only.
        saturation = [
            v for v in bench_relay.SATURATION if i == 0 or args.all_kinds or not v.first_kind_only
        ]
        results.append(
            bench_relay.bench_kind(
                bootstrap,
                kind,
                args.count,
                args.partitions,
                args.runs,
                rates=rates if i == 0 or args.all_kinds else (),
                latency_seconds=args.latency_seconds,
                saturation=bench_relay.with_baseline(saturation, args.baseline),
                latency=bench_relay.with_baseline(bench_relay.LATENCY, args.baseline),
                c_relay=c_relay,
            )
        )
    for r in results:
        print()
        print(format_relay(r, args.runs))
    write_bench_results(
        "relay",
        vars(args) | {"func": None, "argv": None},
        [r.to_dict() for r in results],
        args.json_out,
        partial(bench_relay.plot, results, Path(args.png)),
    )
    return 0


def format_relay(result: KindResults, runs: int) -> str:
    """`bench relay`'s tables for one kind: saturation, then latency at fixed loads."""
    out = [_format_saturation(result, runs)]
    if result.latency:
        out += ["", _format_latency(result)]
    return "\n".join(out)


def _format_saturation(result: KindResults, runs: int) -> str:
    from sidecar.bench import relay as bench_relay

    variants = {v.name: v for v in bench_relay.SATURATION}

    def median(name: str, measure: Callable[[RelayRun], float]) -> float | None:
        measured = result.saturation.get(name)
        return statistics.median(map(measure, measured)) if measured else None

    rate_base = median(bench_relay.PASS_THROUGH, lambda r: r.rate)
    cpu_base = median(bench_relay.C_RELAY, lambda r: r.cpu_us_per_record)
    rows: list[list[object]] = []
    for name, saturation_runs in result.saturation.items():
        rates = [r.rate for r in saturation_runs]
        cpu = [r.cpu_us_per_record for r in saturation_runs]
        variant = variants.get(bench_relay.base_name(name))
        rows.append(
            [
                name,
                variant.trainer if variant is not None else "-",
                bench_relay.median_range(rates),
                round(statistics.median(rates) / rate_base, 2) if rate_base else "-",
                bench_relay.median_range(cpu, "{:.2f}"),
                round(statistics.median(cpu) / cpu_base, 2) if cpu_base else "-",
                round(max(r.peak_rss_bytes for r in saturation_runs) / 2**20),
                sum(r.training_runs for r in saturation_runs),
            ]
        )
    return render(
        (
            "variant",
            "trainer",
            "msg/s median [min-max]",
            "x pass-through",
            "CPU us/record",
            "x C relay",
            "peak RSS MiB",
            "training runs",
        ),
        rows,
        f"relay over {result.count:,} pre-loaded {result.kind} events "
        f"({result.mean_bytes:.0f} B), {result.partitions} partitions, {runs} rounds after a "
        "warm-up round; CPU of the relay's processes per record from its first output record "
        "to its last (start-up excluded)",
    )


def _format_latency(result: KindResults) -> str:
    from sidecar.bench import relay as bench_relay

    variants = {v.name: v for v in bench_relay.LATENCY}
    rows: list[list[object]] = []
    for key, latency_runs in result.latency.items():
        name = bench_relay.base_name(key.split(" @ ")[0])
        rows.append(
            [
                key,
                variants[name].trainer,
                bench_relay.median_range([r.achieved_rate for r in latency_runs]),
                bench_relay.median_range([r.p50_ms for r in latency_runs], "{:.1f}"),
                bench_relay.median_range([r.p99_ms for r in latency_runs], "{:.1f}"),
                bench_relay.median_range([r.max_ms for r in latency_runs], "{:.0f}"),
            ]
        )
    return render(
        ("variant @ offered", "trainer", "msg/s through", "p50 ms", "p99 ms", "max ms"),
        rows,
        f"end-to-end latency (producer timestamp -> output consumer), {result.kind}, "
        f"{bench_relay.WARMUP_SECONDS:.0f} s warm-up per run not measured; max = as fast "
        "as one producer can (latency is then the queue)",
    )


# -- bench storage -------------------------------------------------------------------------------


def _broker_pid(args: argparse.Namespace) -> int | None:
    """`--broker-pid`, else the pid in `--broker-pid-file`; None when neither gives one."""
    pid: int | None = args.broker_pid
    if pid is not None or args.broker_pid_file is None:
        return pid
    try:
        return int(Path(args.broker_pid_file).read_text().strip())
    except (OSError, ValueError):
        return None  # the broker's CPU is then not reported


def _add_broker_pid(b: argparse.ArgumentParser) -> None:
    b.add_argument(
        "--broker-pid",
        type=number(int, ge=1, le=MAX_INT32),
        metavar="PID",
        help="the broker's pid (its CPU)",
    )
    b.add_argument("--broker-pid-file", metavar="FILE", help="a file holding the broker's pid")


def cmd_bench_storage(args: argparse.Namespace) -> int:
    from sidecar.bench import storage as bench_storage

    if args.data_dir is None:
        raise ConfigError(
            "--data-dir is required: the broker's log.dirs, whose segments are measured "
            "(make bench passes the local broker's, deploy/kafka/.cache/run/data)"
        )
    bootstrap = bench_bootstrap()
    results = bench_storage.bench_storage(
        bootstrap,
        Path(args.data_dir),
        pid=_broker_pid(args),
        kind=args.kind,
        count=args.count,
        partitions=args.partitions,
        runs=args.runs,
        fills=args.fills,
    )
    print()
    print(format_storage(results))
    write_bench_results(
        "storage",
        results.settings,
        results.to_dict(),
        args.json_out,
        partial(bench_storage.plot, results, Path(args.png)),
    )
    return 0


def format_storage(results: StorageResults) -> str:
    """`bench storage`'s tables: bytes per message by fill and variant, the sidecar's own
    output, the crossovers."""
    from sidecar.bench import storage as bench_storage

    n = results.messages
    mean = results.raw_bytes / n

    def cell(v: Variant) -> str:
        return f"{v.bytes_per_message:.1f} ({results.raw_bytes / v.stored_bytes:.2f}x)"

    def cpu(v: Variant) -> str:
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
    for codec in bench_storage.CODECS:
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


# -- bench producer ------------------------------------------------------------------------------


def cmd_bench_producer(args: argparse.Namespace) -> int:
    from sidecar.bench import producer as bench_producer

    bootstrap = bench_bootstrap()
    results = bench_producer.bench_producer(
        bootstrap, count=args.count, runs=args.runs, fills=args.fills
    )
    print()
    print(bench_producer.format_producer(results))
    write_bench_results("producer", results.settings, results.to_dict(), args.json_out)
    return 0


# -- bench proxy ---------------------------------------------------------------------------------


def cmd_bench_proxy(args: argparse.Namespace) -> int:
    from sidecar.bench import perf_test
    from sidecar.bench import proxy as bench

    # Before the broker is looked up: a missing tool is told without one.
    kafka_local = perf_test.kafka_local(Path(args.kafka_local))
    results = bench.bench_proxy(
        bench_bootstrap(),
        Path(args.data_dir) if args.data_dir else None,
        kind=args.kind,
        count=args.count,
        seconds=args.seconds,
        partitions=args.partitions,
        fills=args.fills or bench.FILLS,
        batches=args.batches or bench.BATCHES,
        runs=args.runs,
        kafka_local=kafka_local,
        broker_pid=_broker_pid(args),
        variants=bench.VARIANTS if args.variant is None else args.variant,
    )
    print()
    print(bench.format_results(results))
    write_bench_results("proxy", results.settings, results.to_dict(), args.json_out)
    return 0


def _add_bench_proxy(benches: Commands) -> None:
    b = benches.add_parser(
        "proxy",
        help="the proxy (zdict-sidecar proxy) next to the broker directly: produce and "
        "fetch speed with the proxy's CPU, latency, bytes stored",
    )
    b.add_argument("--kind", choices=KINDS, default="product_viewed")
    b.add_argument(
        "-n",
        "--count",
        type=number(int, ge=1),
        default=200_000,
        help="events per unthrottled produce run, and records read per fetch run",
    )
    b.add_argument(
        "--seconds", type=number(float, gt=0), default=10.0, help="seconds at 5,000 records/s"
    )
    b.add_argument("--partitions", type=number(int, ge=1, le=10_000), default=4)
    b.add_argument(
        "--runs", type=number(int, ge=1, le=100), default=3, help="measured rounds after a warm-up"
    )
    b.add_argument(
        "--fills",
        type=fills,
        help="client fills (records per batch) whose bytes stored are measured "
        "(default 1,4,16,64,512)",
    )
    b.add_argument(
        "--batches",
        type=number(int, ge=1, le=1000),
        help="batches per partition at each fill in the bytes part (default 2)",
    )
    b.add_argument("--data-dir", metavar="DIR", help="the broker's log.dirs (bytes stored)")
    b.add_argument(
        "--kafka-local",
        default=str(KAFKA_LOCAL),
        metavar="PATH",
        help=f"kafka-local, which runs Kafka's Java producer-perf-test (default: {KAFKA_LOCAL}, "
        "from the repository's root)",
    )
    _add_broker_pid(b)
    b.add_argument(
        "--variant",
        action="append",
        metavar="NAME=VALUE",
        help="one more proxy with this environment variable set, run in the Java part in the "
        "same rounds (repeat for more; default ZDICT_PURE_PYTHON=1: the compiled modules off)",
    )
    b.add_argument("--json-out", type=output_file, default="out/bench-proxy.json", metavar="FILE")
    b.set_defaults(func=cmd_bench_proxy)


# -- parsers -------------------------------------------------------------------------------------


def add_bench(commands: Commands) -> None:
    p = commands.add_parser("bench", help="benchmarks that print tables and write JSON")
    benches = p.add_subparsers(dest="bench", required=True, metavar="BENCH")
    _add_bench_codec(benches)
    _add_bench_relay(benches)
    _add_bench_storage(benches)
    add_bench_lifecycle(benches)
    _add_bench_producer(benches)
    _add_bench_proxy(benches)
    add_bench_offline(benches)
    add_bench_savings(benches)
    add_bench_registry(benches)


def _add_bench_codec(benches: Commands) -> None:
    b = benches.add_parser("codec", help="codec speed and ratio next to the native zstd CLI")
    b.add_argument("--kind", action="append", choices=KINDS, help="repeatable; default two kinds")
    b.add_argument("--input", metavar="FILE", help="benchmark these messages instead")
    b.add_argument(
        "-n",
        "--count",
        type=number(int, ge=1),
        default=100_000,
        help="events generated, or a uniform sample of at most N lines of --input (100000)",
    )
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--runs", type=rounds, default=3, help="measured runs after one warm-up (>= 3)")
    b.add_argument("--json-out", type=output_file, default="out/bench-codec.json", metavar="FILE")
    b.set_defaults(func=cmd_bench_codec, kind=None)


def _add_bench_relay(benches: Commands) -> None:
    b = benches.add_parser("relay", help="the relay on a real broker: compress vs pass-through")
    b.add_argument(
        "--kind", action="append", choices=KINDS, help="repeatable; default product_viewed, order"
    )
    b.add_argument(
        "-n", "--count", type=number(int, ge=1), default=1_000_000, help="pre-loaded events"
    )
    b.add_argument("--partitions", type=number(int, ge=1, le=MAX_INT32), default=4)
    b.add_argument(
        "--runs", type=rounds, default=3, help="measured rounds after one warm-up (>= 3)"
    )
    b.add_argument(
        "--latency-rate",
        type=latency_rates,
        default="20000,max",
        metavar="RATES",
        help="offered loads (records/s, comma list; max: unthrottled); '' for none",
    )
    b.add_argument(
        "--latency-seconds",
        type=number(float, gt=0),
        default=6.0,
        help="measured seconds per run",
    )
    b.add_argument(
        "--all-kinds",
        action="store_true",
        help="latency and the --no-training and exactly-once variants for every kind "
        "(default: the first only)",
    )
    b.add_argument(
        "--baseline",
        type=package_checkout,
        metavar="DIR",
        help="also run every sidecar variant from the package in DIR (another checkout, e.g. "
        "of main), right after its own run: before/after in one run",
    )
    b.add_argument("--json-out", type=output_file, default="out/bench-relay.json", metavar="FILE")
    b.add_argument("--png", type=png_file, default="out/bench-relay.png", metavar="FILE")
    b.set_defaults(func=cmd_bench_relay)


def _add_bench_storage(benches: Commands) -> None:
    b = benches.add_parser(
        "storage", help="bytes as a real broker stores them: producer zstd/lz4 vs the sidecar"
    )
    b.add_argument("--kind", choices=KINDS, default="product_viewed")
    b.add_argument(
        "-n",
        "--count",
        type=number(int, ge=1),
        default=4096,
        help="events (a multiple of partitions x fills)",
    )
    b.add_argument("--partitions", type=number(int, ge=1, le=MAX_INT32), default=8)
    b.add_argument("--runs", type=rounds, default=3, help="measured runs after a warm-up (>= 3)")
    b.add_argument(
        "--fills", type=fills, default="1,2,4,8,16,128", help="records per batch (comma list)"
    )
    b.add_argument("--data-dir", metavar="DIR", help="the broker's log.dirs (segments measured)")
    _add_broker_pid(b)
    b.add_argument("--json-out", type=output_file, default="out/bench-storage.json", metavar="FILE")
    b.add_argument("--png", type=png_file, default="out/bench-storage.png", metavar="FILE")
    b.set_defaults(func=cmd_bench_storage)


def _add_bench_producer(benches: Commands) -> None:
    b = benches.add_parser(
        "producer",
        help="in-process compression: µs added to produce(), bytes stored vs producer zstd",
    )
    b.add_argument(
        "-n",
        "--count",
        type=number(int, ge=1000, le=MAX_INT32),
        default=50_000,
        help="records per measured round and record size (default 50000)",
    )
    b.add_argument("--runs", type=rounds, default=5, help="measured rounds after a warm-up (>= 3)")
    b.add_argument(
        "--fills", type=fills, default="1,2,4,8,16", help="records per batch (comma list)"
    )
    b.add_argument(
        "--json-out", type=output_file, default="out/bench-producer.json", metavar="FILE"
    )
    b.set_defaults(func=cmd_bench_producer)
