"""What several commands share: the program name, settings with logging, input lines, the
registry and a decoder over it, the `--config`/`--dictionaries` flags, and a benchmark's output
files."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from sidecar.codec import Decoder, DictionaryResolver
from sidecar.config import Settings, load_settings
from sidecar.dictionaries.registry import Registry, RegistryResolver
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import ConfigError, InputError, MissingDependency

if TYPE_CHECKING:
    #: What `ArgumentParser.add_subparsers` returns: each command module adds its parsers to it.
    Commands: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

PROG: Final = "zdict-sidecar"


def configured_settings(args: argparse.Namespace, **overrides: Any) -> Settings:
    """The validated settings (`--config`, `--dictionaries` and `overrides` from flags applied);
    logging configured from them, always to stderr: stdout is for reports and records."""
    from sidecar.logs import configure_logging

    if getattr(args, "dictionaries", None) is not None:
        overrides["dictionaries"] = args.dictionaries
    settings = load_settings(getattr(args, "config", None), **overrides)
    configure_logging(settings.log_format, settings.log_level)
    return settings


def add_config_flags(parser: argparse.ArgumentParser, store: bool = True) -> None:
    """`--config FILE`, and `--dictionaries DIR` unless the command uses no store."""
    parser.add_argument("--config", metavar="FILE", help="TOML config file (see README)")
    if store:
        parser.add_argument(
            "--dictionaries",
            metavar="DIR",
            help="dictionary store (env ZDICT_DICTIONARIES; default ./dictionaries)",
        )


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
