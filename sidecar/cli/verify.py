"""`verify`: did every input record reach the output once, intact?"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from sidecar.cli.common import add_config_flags, configured_settings, open_decoder
from sidecar.tools.tables import render

if TYPE_CHECKING:
    from sidecar.cli.common import Commands
    from sidecar.tools.verify import Verification


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
