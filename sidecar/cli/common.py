"""What several commands share: the program name, settings with logging, the checked types of
numeric flags, input lines (sampled while streaming, with caps), the registry and a decoder over
it, the `--config`/`--dictionaries` flags, and a benchmark's broker and output files."""

from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import random
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Final, TypeAlias, TypeVar

import annotated_types
from pydantic import BaseModel

from sidecar.codec import Decoder, DictionaryResolver
from sidecar.config import Settings, load_settings
from sidecar.dictionaries.registry import Registry, RegistryResolver
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import ConfigError, InputError, MissingDependency

if TYPE_CHECKING:
    #: What `ArgumentParser.add_subparsers` returns: each command module adds its parsers to it.
    Commands: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

PROG: Final = "zdict-sidecar"
#: Bytes of input lines one command keeps in memory at most (a sample of a larger input).
MAX_SAMPLE_BYTES: Final = 256 * 1024 * 1024

Number = TypeVar("Number", int, float)


def configured_settings(args: argparse.Namespace, **overrides: Any) -> Settings:
    """The validated settings (`--config`, `--dictionaries` and `overrides` from flags applied);
    logging configured from them, always to stderr: stdout is for reports and records."""
    from sidecar.logs import configure_logging

    if getattr(args, "dictionaries", None) is not None:
        overrides["dictionaries"] = args.dictionaries
    settings = load_settings(getattr(args, "config", None), **overrides)
    store = settings.dictionaries
    if hasattr(args, "dictionaries") and (
        (store.exists() and not store.is_dir()) or _file_on_the_way(store)
    ):
        raise ConfigError(
            f"the dictionary store {store} is not a directory (--dictionaries or "
            "ZDICT_DICTIONARIES): give a directory, or a path where one can be made"
        )
    configure_logging(settings.log_format, settings.log_level)
    return settings


def add_lifecycle_flags(parser: argparse.ArgumentParser, who: str) -> None:
    """`--no-training` and `--no-registry` of a long-running command (`who`: the relay, the
    proxy)."""
    parser.add_argument("--no-training", action="store_true", help=f"never train inside {who}")
    parser.add_argument(
        "--no-registry",
        action="store_true",
        help="the local store only: no registry topic (offline; one host)",
    )


def add_config_flags(parser: argparse.ArgumentParser, store: bool = True) -> None:
    """`--config FILE`, and `--dictionaries DIR` unless the command uses no store."""
    parser.add_argument("--config", metavar="FILE", help="TOML config file (see README)")
    if store:
        parser.add_argument(
            "--dictionaries",
            metavar="DIR",
            help="dictionary store (env ZDICT_DICTIONARIES; default ./dictionaries)",
        )


# -- numeric flags ------------------------------------------------------------------------------


def _bounds_text(
    kind: type, ge: float | None, gt: float | None, le: float | None, lt: float | None
) -> str:
    def text(bound: float) -> str:
        return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"

    what = "an integer" if kind is int else "a number"
    low, high = (ge if ge is not None else gt), (le if le is not None else lt)
    if low is not None and high is not None:
        exclusive = " (exclusive)" if gt is not None and lt is not None else ""
        return f"{what} from {text(low)} to {text(high)}{exclusive}"
    if low is not None:
        return f"{what} {'>=' if ge is not None else '>'} {text(low)}"
    if high is not None:
        return f"{what} {'<=' if le is not None else '<'} {text(high)}"
    return what


def number(
    kind: type[Number],
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
) -> Callable[[str], Number]:
    """An argparse `type` for a finite int or float within bounds.

    A value it refuses makes argparse exit 2 with `argument --flag: expected ..., got '...'`,
    naming the flag; nan and infinities are refused.
    """
    wanted = _bounds_text(kind, ge, gt, le, lt)

    def parse(text: str) -> Number:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}") from None
        if (
            not math.isfinite(value)
            or (ge is not None and value < ge)
            or (gt is not None and value <= gt)
            or (le is not None and value > le)
            or (lt is not None and value >= lt)
        ):
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in some of its own messages
    return parse


def setting_number(model: type[BaseModel], field: str) -> Callable[[str], Any]:
    """`number` with the type and bounds of setting `field` of `model`: a flag that overrides a
    setting refuses what the setting would, and names the flag."""
    info = model.model_fields[field]
    kind = float if info.annotation in (float, float | None) else int
    bounds: dict[str, float] = {}
    for constraint in info.metadata:
        for name in ("ge", "gt", "le", "lt"):
            if isinstance(constraint, getattr(annotated_types, name.capitalize())):
                bounds[name] = getattr(constraint, name)
    return number(kind, **bounds)


def _file_on_the_way(path: Path) -> Path | None:
    """The nearest existing parent of `path` when it is not a directory (nothing can be made
    under it), else None."""
    for parent in path.absolute().parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def output_file(text: str) -> str:
    """An argparse `type` for a file a command writes: not a directory, and in a directory that
    exists or can be made (no file on the way), checked before anything is measured."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory; give a file name")
    blocking = _file_on_the_way(path)
    if blocking is not None:
        raise argparse.ArgumentTypeError(f"cannot write {text}: {blocking} is not a directory")
    return text


def png_file(text: str) -> str:
    """`output_file` for a chart: its name must end in .png (the format is read from it)."""
    if Path(text).suffix.lower() != ".png":
        raise argparse.ArgumentTypeError(f"expected a file name ending in .png, got {text!r}")
    return output_file(text)


# -- input lines ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InputLines:
    """Messages read from a file, one per line: all of them, or a uniform sample."""

    name: str
    #: The kept lines, in input order, line endings removed.
    lines: list[bytes]
    #: The 0-based line number of each kept line.
    numbers: list[int]
    #: Lines in the whole input.
    total: int

    @property
    def sampled(self) -> bool:
        return len(self.lines) < self.total

    def describe(self) -> str:
        """Where the lines come from, for reports: `FILE lines 1-N` or the sample's size."""
        if not self.sampled:
            return f"{self.name} lines 1-{self.total}"
        return f"{self.name}, a uniform sample of {len(self.lines):,} of {self.total:,} lines"


def read_lines(
    source: str,
    *,
    max_lines: int,
    max_line_bytes: int,
    line_cap: str,
) -> InputLines:
    """Messages from a file (or `-` for stdin), one per line, line endings removed.

    Read while streaming: at most `max_lines` lines and `MAX_SAMPLE_BYTES` bytes of them are
    kept, a uniform sample of a larger input (the same sample for the same input: the draw is
    seeded), in input order. A line longer than `max_line_bytes` (a file without newlines:
    /dev/zero) is refused as soon as it is seen; `line_cap` names in that message what raises
    the limit.

    Raises:
        InputError: the input is missing, a directory, unreadable, empty or has a line too long.
    """
    if source == "-":
        return _read_stream(sys.stdin.buffer, "standard input", max_lines, max_line_bytes, line_cap)
    path = Path(source)
    if path.is_dir():
        raise InputError(f"input {path} is a directory; give a file with one message per line")
    try:
        with path.open("rb") as stream:
            return _read_stream(stream, str(path), max_lines, max_line_bytes, line_cap)
    except FileNotFoundError:
        raise InputError(f"input file {path} does not exist") from None
    except OSError as exc:
        raise InputError(f"cannot read input file {path}: {exc.strerror or exc}") from None


def _read_stream(
    stream: BinaryIO, name: str, max_lines: int, max_line_bytes: int, line_cap: str
) -> InputLines:
    # Bottom-k sampling: every line draws a random key and the lines with the smallest keys are
    # kept, as many as fit both limits; a max-heap on the key finds the one to drop.
    draw = random.Random(0).random
    heap: list[tuple[float, int, bytes]] = []
    kept_bytes = 0
    total = 0
    while chunk := stream.readline(max_line_bytes + 2):  # + "\r\n"
        line = chunk.removesuffix(b"\n").rstrip(b"\r")
        # A chunk cut at the limit before its newline is the start of a longer line.
        cut = len(chunk) == max_line_bytes + 2 and not chunk.endswith(b"\n")
        if cut or len(line) > max_line_bytes:
            raise InputError(
                f"line {total + 1} of {name} is longer than {max_line_bytes:,} bytes "
                f"({line_cap}): give one message per line"
            )
        heapq.heappush(heap, (-draw(), total, line))
        kept_bytes += len(line)
        total += 1
        while len(heap) > max_lines or (len(heap) > 1 and kept_bytes > MAX_SAMPLE_BYTES):
            kept_bytes -= len(heapq.heappop(heap)[2])
    if total == 0:
        raise InputError(f"input {name} is empty: give one message per line")
    kept = sorted((n, line) for _, n, line in heap)
    return InputLines(
        name=name, lines=[line for _, line in kept], numbers=[n for n, _ in kept], total=total
    )


def note_sample(lines: InputLines, lines_flag: str) -> None:
    """One line on stderr when only a sample of the input is used, saying how to use more."""
    if lines.sampled:
        print(
            f"{PROG}: note: {lines.name} has {lines.total:,} lines; using a uniform sample of "
            f"{len(lines.lines):,} ({lines_flag} sets how many; at most "
            f"{MAX_SAMPLE_BYTES // 2**20} MiB are kept)",
            file=sys.stderr,
        )


def open_registry(settings: Settings, role: str) -> Registry:
    """The registry topic of `settings`, opened as `role`.

    Raises:
        ConfigError: the registry is disabled.
    """
    if not settings.registry.enabled:
        raise ConfigError(
            "the registry is disabled (ZDICT_REGISTRY__ENABLED=false); drop --publish/--registry "
            "or enable it"
        )
    return Registry.open(settings, role)


def open_decoder(settings: Settings, no_registry: bool, role: str) -> Decoder:
    """A decoder over the registry (or, offline, the local store) of `settings`."""
    resolver: DictionaryResolver = DictionaryStore(settings.dictionaries)
    if settings.registry.enabled and not no_registry:
        registry = open_registry(settings, role)
        resolver = RegistryResolver(registry, settings.registry.follow_interval)
    return Decoder(
        resolver,
        max_output_size=settings.codec.max_output_size,
        header_key=settings.codec.header_key,
    )


def write_bench_results(
    benchmark: str,
    settings: Mapping[str, Any],
    results: object,
    json_out: str,
    chart: Callable[[], Path] | None = None,
) -> None:
    """Write a benchmark's JSON file (its name, the machine, its settings, its JSON-ready
    `results`) to `json_out`, then draw its chart; say where each went.

    Without matplotlib the chart is skipped with a note on stderr: the numbers are written.
    """
    from sidecar.bench.codec import environment

    out = Path(json_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": benchmark,
        "environment": environment(),
        "settings": settings,
        "results": results,
    }
    out.write_text(json.dumps(payload, indent=2, default=str))
    print(f"\nwrote {out}")
    if chart is None:
        return
    try:
        print(f"wrote {chart()}")
    except MissingDependency as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)


def bench_bootstrap() -> str:
    """The broker a benchmark or the demo runs against: $KAFKA_BOOTSTRAP_SERVERS, required, and
    answering.

    Raises:
        ConfigError: the variable is not set, or a ZDICT_* setting is invalid.
        KafkaUnavailable: no broker answered.
    """
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not bootstrap:
        raise ConfigError(
            "KAFKA_BOOTSTRAP_SERVERS is not set: point it at a broker (make bench and make demo "
            "start a local one)"
        )
    check_broker(bootstrap)
    return bootstrap


def check_broker(bootstrap: str) -> None:
    """Ask the broker once before anything is measured, within
    `ZDICT_RELAY__UNREACHABLE_TIMEOUT` (at most 30 s): a benchmark would otherwise wait on each
    of its clients in turn, and end in a timeout that names nothing.

    Raises:
        ConfigError: a ZDICT_* setting is invalid (the sidecars a benchmark starts read them).
        KafkaUnavailable: no broker answered.
    """
    from sidecar.config import load_settings
    from sidecar.kafka import partition_counts, plain_admin

    timeout = min(load_settings().relay.unreachable_timeout, 30.0)
    partition_counts(
        plain_admin(bootstrap),
        [],
        timeout,
        f"{bootstrap} (KAFKA_BOOTSTRAP_SERVERS)",
        "ZDICT_RELAY__UNREACHABLE_TIMEOUT, at most 30 s",
    )
