"""`report`: a PNG of the savings, from Prometheus or a sidecar's /metrics."""

from __future__ import annotations

import argparse
import json
import re
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING

from sidecar.cli.common import png_file

if TYPE_CHECKING:
    from sidecar.cli.common import Commands


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
