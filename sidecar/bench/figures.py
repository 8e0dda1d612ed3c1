"""The figures page, `sidecar/bench/FIGURES.md`, rendered from the benchmarks' JSON files.

Every `zdict-sidecar bench NAME` writes a JSON file (`--json-out`, by default
`out/bench-NAME.json`): `{"benchmark", "environment", "settings", "results"}`. This module turns
each into Markdown tables, medians with [min–max] as the benchmarks print them, under a section
`## bench NAME` per benchmark (one part `### FILE` per file, e.g. `bench-relay.json` and
`bench-relay-order.json`), each part headed by its provenance: the command (rebuilt from the
file's settings), the commit it was measured at, when, and the machine.

The page holds only rendered figures: a benchmark with no JSON given keeps the part an earlier
rendering wrote, else its section says which command fills it; anything else on the page goes
(its history is in git). Rendering is pure (`render_page`); `main` reads and writes the files:
`python -m sidecar.bench.figures --commit REV --out FILE JSON...` (`make figures`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from sidecar.bench import figure_tables as tables
from sidecar.bench.figure_tables import Document
from sidecar.bench.proxy_tables import proxy_flags, proxy_markdown
from sidecar.bench.registry_tables import registry_flags, registry_tables
from sidecar.bench.savings_tables import savings_flags, savings_tables
from sidecar.errors import InputError, ZdictError

TITLE: Final = "# Figures: what zdict-sidecar was measured to save and cost"
PREAMBLE: Final = f"""{TITLE}

Rendered by `make figures` from the benchmarks' JSON (`zdict-sidecar bench NAME --json-out
FILE`): each table under the command and commit that measured it, medians with [min–max]. What
each benchmark does and how to read it: [README.md](README.md)."""

#: The heading of a rendered part: a section without one was not rendered from JSON.
PART: Final = "### `"


@dataclass(frozen=True, slots=True)
class Source:
    """One benchmark JSON file: its name, when it was written (UTC), and its document."""

    name: str
    written: datetime
    document: Document

    @property
    def benchmark(self) -> str:
        return str(self.document["benchmark"])


# -- the page ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Bench:
    """How one benchmark's JSON becomes Markdown: its command's flags and its tables."""

    flags: Callable[[Document], list[str]]
    tables: Callable[[Document], list[str]]


#: Every benchmark that writes JSON, in the order of the page.
BENCHES: Final[Mapping[str, Bench]] = {
    "codec": Bench(tables.codec_flags, tables.codec_tables),
    "wire": Bench(tables.wire_flags, tables.wire_tables),
    "choice": Bench(tables.choice_flags, tables.choice_tables),
    "storage": Bench(tables.storage_flags, tables.storage_tables),
    "savings": Bench(savings_flags, savings_tables),
    "relay": Bench(tables.relay_flags, tables.relay_tables),
    "producer": Bench(tables.producer_flags, tables.producer_tables),
    "proxy": Bench(proxy_flags, proxy_markdown),
    "lifecycle": Bench(tables.lifecycle_flags, tables.lifecycle_tables),
    "registry": Bench(registry_flags, registry_tables),
}


def section_title(benchmark: str) -> str:
    """The heading of a benchmark's section (its anchor: `#bench-NAME`)."""
    return f"bench {benchmark}"


def command(source: Source) -> str:
    """The command that wrote `source`, rebuilt from its benchmark's name and settings."""
    flags = BENCHES[source.benchmark].flags(source.document)
    return " ".join(["zdict-sidecar", "bench", source.benchmark, *flags])


def provenance(source: Source, commit: str) -> str:
    """Where `source`'s figures come from: command, commit, date, machine and versions."""
    env = source.document.get("environment", {})
    machine = ", ".join(
        f"{label}{env[key]}"
        for key, label in (
            ("zdict_sidecar", "zdict-sidecar "),
            ("python", "Python "),
            ("zstandard", "zstandard "),
            ("libzstd", "libzstd "),
            ("cpus", "CPUs: "),
            ("platform", ""),
        )
        if env.get(key) is not None
    )
    measured = env.get("commit") or "unrecorded"
    return (
        f"`{command(source)}` at commit {measured}, {source.written:%Y-%m-%d %H:%M} UTC "
        f"(rendered at {commit}); {machine}."
    )


def render_part(source: Source, commit: str) -> str:
    """One file's part of its benchmark's section: its heading, provenance and tables."""
    lines = [f"{PART}{source.name}`", "", provenance(source, commit), ""]
    return "\n".join(lines + BENCHES[source.benchmark].tables(source.document))


def split_sections(page: str) -> list[tuple[str, str]]:
    """The page's `## ` sections as (title, text with its heading), the preamble left out."""
    sections: list[tuple[str, str]] = []
    for chunk in ("\n" + page).split("\n## ")[1:]:
        title = chunk.split("\n", 1)[0].strip()
        sections.append((title, f"## {chunk}".rstrip("\n")))
    return sections


def rendered_parts(section: str) -> str | None:
    """The rendered parts of an existing section (None: it has none, e.g. typed by hand)."""
    start = section.find(f"\n{PART}")
    return section[start + 1 :] if start >= 0 else None


def render_page(sources: Sequence[Source], existing: str, commit: str) -> str:
    """The figures page: the preamble, then a section per benchmark in `BENCHES`' order: the
    rendering of its `sources`, else the parts `existing` had rendered for it, else the
    command that would fill it.

    Raises:
        InputError: a file names no benchmark this module renders.
    """
    unknown = sorted({s.name for s in sources if s.benchmark not in BENCHES})
    if unknown:
        raise InputError(
            f"{', '.join(unknown)}: not the JSON of a known benchmark "
            f"({', '.join(BENCHES)}); see sidecar/bench/figures.py"
        )
    kept = dict(split_sections(existing))
    body = []
    for name in BENCHES:
        title = section_title(name)
        mine = sorted((s for s in sources if s.benchmark == name), key=lambda s: s.name)
        parts = "\n\n".join(render_part(s, commit) for s in mine) or rendered_parts(
            kept.get(title, "")
        )
        text = parts or f"Not measured yet: `zdict-sidecar bench {name}`, then `make figures`."
        body.append(f"## {title}\n\n{text}")
    return "\n\n".join([PREAMBLE, *body]) + "\n"


# -- the command ---------------------------------------------------------------------------------


def load(path: Path) -> Source:
    """A benchmark JSON file, with its modification time as when it was written.

    Raises:
        InputError: the file cannot be read or is not a benchmark's JSON.
    """
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        written = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot read a benchmark's JSON: {exc}") from exc
    if not isinstance(document, dict) or "benchmark" not in document:
        raise InputError(f"{path}: not a benchmark's JSON (no 'benchmark' key)")
    return Source(path.name, written, document)


def main(argv: Sequence[str] | None = None) -> int:
    """Render the figures page from benchmark JSON files; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m sidecar.bench.figures",
        description="Render sidecar/bench/FIGURES.md from the benchmarks' JSON (out/bench-*.json).",
    )
    parser.add_argument("json", nargs="*", type=Path, help="benchmark JSON files")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).with_name("FIGURES.md"), help="the page"
    )
    parser.add_argument("--commit", default="unknown", help="the checkout's commit (git describe)")
    args = parser.parse_args(argv)
    try:
        if not args.json:
            raise InputError("no benchmark JSON given: run the benchmarks first (make bench)")
        sources = [load(path) for path in args.json]
        existing = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        args.out.write_text(render_page(sources, existing, args.commit), encoding="utf-8")
    except (ZdictError, OSError) as exc:
        print(f"figures: error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {args.out} from {len(sources)} file(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
