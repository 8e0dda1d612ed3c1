"""The `zdict-sidecar` command line: thin subcommands over the library modules.

Each command module is named for the command it adds (`add_*`) and runs (`cmd_*`): `generate`,
`run`, `proxy`, `cat`, `verify`, `report`, `demo`, `bench` (its offline benchmarks, `bench choice`
and `bench wire`, in `bench_offline`); `dicts` holds the commands that make and choose
dictionaries (`train`, `evaluate`, `dicts`); `common` holds what they share.

Exit codes: 0 success; 1 an expected failure (the message names the cause); 2 bad usage or
configuration; 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from sidecar import __version__
from sidecar.cli import bench, cat, demo, dicts, generate, proxy, report, run, verify
from sidecar.cli.common import PROG
from sidecar.errors import ConfigError, ZdictError


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command; each sets `func`, the function that runs it."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Per-message zstd compression with trained, versioned dictionaries for Kafka.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # In the order `--help` lists them: first steps, then operations, then the evidence.
    generate.add_generate(commands)
    dicts.add_train(commands)
    dicts.add_evaluate(commands)
    run.add_run(commands)
    proxy.add_proxy(commands)
    cat.add_cat(commands)
    verify.add_verify(commands)
    report.add_report(commands)
    demo.add_demo(commands)
    bench.add_bench(commands)
    dicts.add_dicts(commands)
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
