"""`cat`: a topic's records printed decoded, like kcat -C."""

from __future__ import annotations

import argparse
import re
import sys
from typing import TYPE_CHECKING, Final

from sidecar.cli.common import add_config_flags, configured_settings, number, open_decoder

if TYPE_CHECKING:
    from sidecar.cli.common import Commands

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
