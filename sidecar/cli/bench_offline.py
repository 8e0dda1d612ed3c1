"""`bench choice` and `bench wire`: offline benchmarks on real corpora of this machine."""

from __future__ import annotations

import argparse
import statistics
import sysconfig
from typing import TYPE_CHECKING

from sidecar.bench.events import KINDS
from sidecar.cli.common import number, output_file, write_bench_results
from sidecar.errors import ConfigError, InputError
from sidecar.tools.tables import render

if TYPE_CHECKING:
    from sidecar.bench.choice import ChoiceRow
    from sidecar.bench.corpora import Corpus
    from sidecar.cli.common import Commands


def corpora_of(args: argparse.Namespace) -> list[Corpus]:
    from sidecar.bench.corpora import collect_all, sources

    site_packages = sysconfig.get_paths()["purelib"]
    known = [source.name for source in sources(site_packages)]
    unknown = sorted(set(args.corpus or ()) - set(known))
    if unknown:
        raise ConfigError(
            f"--corpus {', '.join(unknown)}: no such corpus; the corpora are {', '.join(known)}"
        )
    found, missing = collect_all(site_packages, limit=args.limit, only=args.corpus or ())
    if missing:
        print(f"sources this machine lacks (skipped): {', '.join(missing)}")
    if not found:
        raise InputError("no corpus found on this machine; see sidecar/bench/corpora.py")
    return found


def format_choice(rows: list[ChoiceRow]) -> str:
    """`bench choice`'s table and its summary line."""
    table = render(
        (
            "corpus",
            "shape",
            "messages",
            "mean B",
            "ours",
            "naive",
            "ours / naive",
            "naive pick",
            "decision",
            "dict",
            "level",
            "train s",
        ),
        [
            [
                r.corpus,
                r.shape,
                r.messages,
                r.mean_bytes,
                round(r.ours_ratio, 3),
                round(r.naive_ratio, 3),
                round(r.versus_naive, 3),
                r.naive_pick,
                r.decision,
                f"{r.dict_size // 1024} KiB" if r.dict_size else "-",
                r.level,
                r.train_seconds,
            ]
            for r in rows
        ],
        "ratio on the future, bytes as a record costs (value + header): both choices see the "
        "first 20 % of the corpus, the last 80 % is measured; naive = python-zstandard defaults, "
        "best of 16/64/112 KiB x levels 1, 3 picked on the measured part itself",
    )
    versus = [r.versus_naive for r in rows]
    return (
        f"{table}\nours / naive: median {statistics.median(versus):.3f}, "
        f"worst {min(versus):.3f}, best {max(versus):.3f} over {len(rows)} corpora"
    )


def cmd_bench_choice(args: argparse.Namespace) -> int:
    from sidecar.bench.choice import compare

    rows = []
    for corpus in corpora_of(args):
        rows.append(compare(corpus))
        print(f"{corpus.name}: done", flush=True)
    print()
    print(format_choice(rows))
    write_bench_results(
        "choice",
        {"limit": args.limit, "corpora": args.corpus},
        [r.to_dict() for r in rows],
        args.json_out,
    )
    return 0


def cmd_bench_wire(args: argparse.Namespace) -> int:
    from sidecar.bench.choice import TRAIN_FRACTION
    from sidecar.bench.events import generate
    from sidecar.bench.wire import (
        SAMPLE_IDS,
        WrongDictionary,
        frame_rows,
        header_options,
        wrong_dictionary,
    )
    from sidecar.training.split import split_ordered

    headers = header_options()
    print(
        render(
            ("header", "key", *(f"bytes, id {i}" for i in SAMPLE_IDS), "note"),
            [[h.name, h.key, *h.costs, h.note] for h in headers],
            "bytes our header adds to a record as Kafka stores it (key, value, their lengths)",
        )
    )
    kinds = args.kind or ["product_viewed"]
    sets = [(kind, list(generate(kind, args.count, seed=1))) for kind in kinds]
    sets += [(c.name, c.messages) for c in corpora_of(args)]
    frames: dict[str, list[list[object]]] = {}
    wrong = WrongDictionary()
    for name, messages in sets:
        split = split_ordered(messages, TRAIN_FRACTION)
        for row in frame_rows(split.train, split.heldout):
            frames.setdefault(name, []).append([name, row.name, round(row.bytes_per_message, 2)])
        if wrong.pairs < args.pairs:
            got = wrong_dictionary(messages, args.pairs - wrong.pairs)
            wrong.pairs += got.pairs
            wrong.outcomes.update(got.outcomes)
    print()
    print(
        render(
            ("messages", "frame", "B/message"),
            [row for rows in frames.values() for row in rows],
            "frame bytes per held-out message (16 KiB dictionary, level 3)",
        )
    )
    print()
    print(
        render(
            ("outcome", "pairs", "share"),
            [
                [k, v, f"{v / max(1, wrong.pairs):.4%}"]
                for k, v in sorted(wrong.outcomes.items(), key=lambda kv: -kv[1])
            ],
            f"compact frames decoded with another dictionary of the same namespace "
            f"({wrong.pairs:,} pairs)",
        )
    )
    write_bench_results(
        "wire",
        {"count": args.count, "kinds": kinds, "corpora": args.corpus, "pairs": args.pairs},
        {
            "headers": [vars_of(h) for h in headers],
            "frames": frames,
            "wrong_dictionary": wrong.to_dict(),
        },
        args.json_out,
    )
    return 0


def vars_of(obj: object) -> dict[str, object]:
    """A slotted dataclass as a dict."""
    return {name: getattr(obj, name) for name in getattr(obj, "__slots__", ())}


def add_bench_offline(benches: Commands) -> None:
    """`bench choice` and `bench wire`."""
    b = benches.add_parser(
        "choice", help="the trained dictionary vs a naive one, on real corpora of this machine"
    )
    b.add_argument("--corpus", action="append", metavar="NAME", help="repeatable; default all")
    b.add_argument("--limit", type=number(int, ge=1), default=20_000, help="messages per corpus")
    b.add_argument("--json-out", type=output_file, default="out/bench-choice.json", metavar="FILE")
    b.set_defaults(func=cmd_bench_choice)
    b = benches.add_parser(
        "wire", help="header and frame bytes per record, and the compact frame's dictionary check"
    )
    b.add_argument(
        "--kind",
        action="append",
        choices=KINDS,
        help="event kinds (repeatable); default product_viewed",
    )
    b.add_argument("-n", "--count", type=number(int, ge=1), default=60_000, help="events per kind")
    b.add_argument("--corpus", action="append", metavar="NAME", help="repeatable; default all")
    b.add_argument("--limit", type=number(int, ge=1), default=20_000, help="messages per corpus")
    b.add_argument(
        "--pairs", type=number(int, ge=0), default=100_000, help="wrong-dictionary decodes"
    )
    b.add_argument("--json-out", type=output_file, default="out/bench-wire.json", metavar="FILE")
    b.set_defaults(func=cmd_bench_wire)
