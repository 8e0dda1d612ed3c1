"""`run`, and the commands that look at what it did: `cat` (its topics decoded), `verify` (every
input record in the output, intact) and `report` (a PNG of its savings)."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, get_args

from sidecar.cli.common import (
    add_config_flags,
    add_lifecycle_flags,
    configured_settings,
    number,
    open_decoder,
    png_file,
    setting_number,
)
from sidecar.config import Guarantee, MetricsSettings, RelayMode, RelaySettings, environment_help
from sidecar.tools.tables import render

if TYPE_CHECKING:
    from sidecar.cli.common import Commands
    from sidecar.tools.verify import Verification

#: The `run --help` environment section is never wider than this, whatever the terminal.
_MAX_HELP_WIDTH: Final = 100


# -- run -----------------------------------------------------------------------------------------


def _relay_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings `run`'s flags set, as `load_settings` overrides."""
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
    return overrides


def cmd_run(args: argparse.Namespace) -> int:
    from sidecar import service

    settings = configured_settings(args, **_relay_overrides(args))
    if settings.relay.workers > 1:
        argv = _without_option(args.argv, "--workers")
        if settings.metrics.port:
            # Worker i listens on port + i (its environment): a flag would give them all one.
            argv = _without_option(argv, "--metrics-port")
        return service.run_workers(argv, settings.relay.workers, settings.metrics.port)
    return service.run_relay(settings)


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


# -- cat, verify, report -------------------------------------------------------------------------

#: `cat --delimiter`'s escapes; any other character stands for itself, in UTF-8.
_ESCAPES: Final = {"n": b"\n", "t": b"\t", "r": b"\r", "0": b"\0", "\\": b"\\"}
#: Kafka offsets are signed 64-bit integers.
_MAX_OFFSET: Final = 2**63 - 1


def parse_delimiter(text: str) -> bytes:
    """`cat --delimiter`: the bytes of `text` with its escapes decoded (`\\n \\t \\r \\0 \\\\
    \\xHH`); other characters as UTF-8 (`é` is two bytes).

    Raises:
        argparse.ArgumentTypeError: an unknown or incomplete escape (argparse exits 2).
    """
    out = bytearray()
    i = 0
    while i < len(text):
        char = text[i]
        if char != "\\":
            out += char.encode("utf-8", "surrogateescape")
            i += 1
            continue
        escape = text[i + 1 : i + 2]
        if escape in _ESCAPES:
            out += _ESCAPES[escape]
            i += 2
        elif escape == "x" and re.fullmatch(r"[0-9A-Fa-f]{2}", text[i + 2 : i + 4]):
            out.append(int(text[i + 2 : i + 4], 16))
            i += 4
        else:
            bad = text[i : i + 4] if escape == "x" else text[i : i + 2]
            what = "a lone \\ at the end" if not escape else f"unknown escape {bad}"
            raise argparse.ArgumentTypeError(
                f"{what} in {text}: use \\n \\t \\r \\0 \\\\ or \\xHH (two hex digits); other "
                "characters stand for themselves"
            )
    return bytes(out)


def parse_offset(text: str) -> str:
    """`cat --offset`: beginning, end, an offset or -N, checked before any broker is asked."""
    if text in {"beginning", "end"}:
        return text
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or abs(value) > _MAX_OFFSET:
        raise argparse.ArgumentTypeError(
            f"expected beginning, end, an offset, or -N for N records before the end; got {text!r}"
        )
    return text


def http_url(text: str) -> str:
    """An http(s) URL with a host, for `report --prometheus/--metrics`."""
    parsed = urllib.parse.urlsplit(text)
    if parsed.scheme not in {"http", "https"} or not parsed.hostname:
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL, got {text!r}")
    return text


def regular_expression(text: str) -> str:
    """A regular expression that compiles (`report --namespace`)."""
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a regular expression: {exc}") from None
    return text


def cmd_cat(args: argparse.Namespace) -> int:
    import signal

    from sidecar.tools.cat import CatOptions, cat

    settings = configured_settings(args)
    options = CatOptions(
        topic=args.topic,
        partitions=args.partition,
        offset=args.offset,
        count=args.count,
        exit_at_end=args.exit,
        key=args.key,
        headers=args.headers,
        json=args.json,
        frames=args.frames,
        delimiter=args.delimiter,
    )
    decoder = open_decoder(settings, args.no_registry, "cat")
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


def format_verify(report: Verification, exactly_once: bool) -> str:
    """The human-readable `verify` report: the counts, examples of what went wrong, a verdict."""
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
    out = [render(("", "count"), rows, title)]
    out += [f"  {example}" for example in report.examples]
    verdict = "ok" if report.ok else "NOT OK"
    wanted = "exactly once" if exactly_once else "at least once"
    out.append(f"{verdict}: {wanted} ({report.seconds:.1f} s)")
    return "\n".join(out)


def cmd_verify(args: argparse.Namespace) -> int:
    from sidecar.tools.verify import verify

    settings = configured_settings(args)
    output = args.output or settings.relay.output_for(args.input)
    with open_decoder(settings, args.no_registry, "verify") as decoder:
        report = verify(settings, decoder, args.input, output, exactly_once=args.exactly_once)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(format_verify(report, args.exactly_once))
    return 0 if report.ok else 1


def cmd_report(args: argparse.Namespace) -> int:
    from sidecar.tools import report
    from sidecar.tools.charts import require_matplotlib

    require_matplotlib()
    if args.prometheus:
        window = report.parse_duration(args.rate_window) if args.rate_window else None
        end = report.parse_time(args.end) if args.end else None
        data = report.from_prometheus(
            args.prometheus, args.namespace, report.parse_duration(args.range), window, end
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


# -- parsers -------------------------------------------------------------------------------------


def add_run(commands: Commands) -> None:
    width = min(shutil.get_terminal_size().columns - 2, _MAX_HELP_WIDTH)  # as argparse's own
    p = commands.add_parser(
        "run",
        help="relay input topics to compressed output topics (at least once)",
        epilog=environment_help(width),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--input-topic", action="append", metavar="TOPIC", help="repeatable")
    p.add_argument("--output-topic", metavar="NAME", help="default {topic}.zd")
    p.add_argument("--group-id", metavar="GROUP")
    p.add_argument("--create-topics", action="store_true", help="create missing output topics")
    p.add_argument(
        "--workers",
        type=setting_number(RelaySettings, "workers"),
        metavar="N",
        help="processes in the consumer group",
    )
    p.add_argument("--batch-size", type=setting_number(RelaySettings, "batch_size"), metavar="N")
    p.add_argument(
        "--metrics-port",
        type=setting_number(MetricsSettings, "port"),
        metavar="PORT",
        help="0 picks a free port",
    )
    p.add_argument("--pass-through", action="store_true", help="encode nothing (a cost baseline)")
    p.add_argument(
        "--mode",
        choices=get_args(RelayMode),
        help="encode (default) or decode: a compressed topic to {topic}.decoded",
    )
    p.add_argument(
        "--guarantee",
        choices=get_args(Guarantee),
        help="at-least-once (default), or exactly-once with Kafka transactions",
    )
    add_lifecycle_flags(p, "the relay")
    add_config_flags(p)
    p.set_defaults(func=cmd_run)


def add_cat(commands: Commands) -> None:
    p = commands.add_parser("cat", help="print a topic's records decoded, like kcat -C")
    p.add_argument("--topic", "-t", required=True)
    p.add_argument(
        "--partition",
        "-p",
        type=number(int, ge=0, le=2**31 - 1),
        action="append",
        help="repeatable; default all",
    )
    p.add_argument(
        "--offset",
        "-o",
        type=parse_offset,
        default="beginning",
        help="beginning (default), end, an offset, or -N (N records before the end)",
    )
    p.add_argument(
        "--count", "-c", type=number(int, ge=1), metavar="N", help="stop after N records"
    )
    p.add_argument("--exit", "-e", action="store_true", help="stop at the end of every partition")
    p.add_argument("--key", "-K", action="store_true", help="print the key before the value")
    p.add_argument("--headers", action="store_true", help="print the headers (k=v,...) first")
    p.add_argument("--json", action="store_true", help="one JSON object per record")
    p.add_argument(
        "--frames",
        action="store_true",
        help="print compressed values as standard zstd frames (zstd -d -D reads them), not decoded",
    )
    p.add_argument(
        "--delimiter",
        "-D",
        type=parse_delimiter,
        default="\\n",
        help="after each record (default \\n; escapes \\n \\t \\r \\0 \\\\ \\xHH)",
    )
    p.add_argument("--no-registry", action="store_true", help="decode with the local store only")
    add_config_flags(p)
    p.set_defaults(func=cmd_cat)


def add_verify(commands: Commands) -> None:
    p = commands.add_parser(
        "verify", help="did every input record reach the output once, intact? (exit 1 if not)"
    )
    p.add_argument("--input", "-i", required=True, metavar="TOPIC")
    p.add_argument("--output", "-o", metavar="TOPIC", help="default: the relay's output name")
    p.add_argument("--exactly-once", action="store_true", help="duplicates count as a failure too")
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-registry", action="store_true", help="decode with the local store only")
    add_config_flags(p)
    p.set_defaults(func=cmd_verify)


def add_report(commands: Commands) -> None:
    p = commands.add_parser(
        "report", help="a PNG of the savings, from Prometheus or a /metrics URL"
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--prometheus", type=http_url, metavar="URL", help="e.g. http://localhost:9090"
    )
    source.add_argument(
        "--metrics", type=http_url, metavar="URL", help="a sidecar's /metrics: since it started"
    )
    p.add_argument(
        "--namespace", type=regular_expression, metavar="REGEX", help="default: every namespace"
    )
    p.add_argument("--range", default="1h", metavar="DURATION", help="with --prometheus; 1h")
    p.add_argument(
        "--end", metavar="TIME", help="with --prometheus: the range's end, Unix s or ISO 8601; now"
    )
    p.add_argument("--rate-window", metavar="DURATION", help="default max(4 steps, 1m)")
    p.add_argument("--out", type=png_file, required=True, metavar="FILE.png")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_report)
