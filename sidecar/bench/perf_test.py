"""Kafka's Java `producer-perf-test` (`org.apache.kafka.tools.ProducerPerformance`), run through
`deploy/kafka/kafka-local tools` for `bench proxy`: where the tool is, its command line, and the
summary it prints, parsed.

At the end of a run the tool prints one summary line over every record it sent, e.g.

    15000 records sent, 4963.600265 records/sec (0.40 MB/sec), 31.91 ms avg latency,
    499.00 ms max latency, 6 ms 50th, 181 ms 95th, 205 ms 99th, 206 ms 99.9th.

(one line), and with `--warmup-records W` a second one over the records after the first W, the
steady state (`5000 steady state records sent, ...`); its progress lines every
`--reporting-interval` carry no percentiles. Latencies are each record's send() to its
callback; the percentiles are whole milliseconds.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sidecar.errors import InputError

#: Where `bench proxy` finds kafka-local by default: relative to the current directory, the
#: repository's root (where `make bench-clients` runs).
KAFKA_LOCAL: Final = Path("deploy/kafka/kafka-local")
#: The tool's alias in `kafka-local tools`.
TOOL: Final = "producer-perf-test"
#: Seconds of records sent first and left out of the figures: the JVM's start and JIT.
WARMUP_S: Final = 2.0
#: Seconds a run may take beyond its records at its rate: the JVM's start, the last deliveries.
SLACK_S: Final = 120.0
#: Lines of the tool's output an error shows.
TAIL_LINES: Final = 20

_SUMMARY: Final = re.compile(
    r"(?P<records>\d+) (?P<steady>steady state )?records sent, "
    r"(?P<per_s>\d+(?:\.\d+)?) records/sec \(\d+(?:\.\d+)? MB/sec\), "
    r"\d+(?:\.\d+)? ms avg latency, \d+(?:\.\d+)? ms max latency, "
    r"(?P<p50>\d+) ms 50th, \d+ ms 95th, (?P<p99>\d+) ms 99th, \d+ ms 99\.9th\."
)


@dataclass(frozen=True, slots=True)
class PerfSummary:
    """One run of the tool: `records` sent in all (warm-up included); records/s, p50 and p99
    (whole ms) over the `measured` records after the warm-up (all of them without one)."""

    records: int
    measured: int
    records_per_s: float
    p50_ms: int
    p99_ms: int


def kafka_local(path: Path) -> Path:
    """`path`, checked to be an executable kafka-local script.

    Raises:
        InputError: it is not there, or not executable.
    """
    if not path.is_file() or not os.access(path, os.X_OK):
        state = "is not executable" if path.is_file() else "is not there"
        raise InputError(
            f"bench proxy: {path} {state} (--kafka-local): Kafka's Java producer-perf-test runs "
            f"through deploy/kafka/kafka-local; run from the repository's root or give "
            f"--kafka-local PATH to that script"
        )
    return path


def warmup_records(records: int, rate: int) -> int:
    """Warm-up records of a run of `records` at `rate` records/s: `WARMUP_S` seconds' worth, at
    most half of them (a steady state remains in short runs)."""
    return min(int(rate * WARMUP_S), records // 2)


def command(
    tool: Path, bootstrap: str, topic: str, records: int, rate: int, payload: Path, warmup: int
) -> list[str]:
    """The tool's command line: `records` records from `payload` (newline-separated values) at
    `rate` records/s to `topic`, linger.ms=5 and acks=all, Java's other defaults (idempotent, no
    compression, batch.size 16384, the sticky partitioner)."""
    return [
        str(tool), "tools", TOOL, "--topic", topic, "--num-records", str(records),
        "--throughput", str(rate), "--payload-file", str(payload),
        "--warmup-records", str(warmup), "--bootstrap-server", bootstrap,
        "--command-property", "linger.ms=5", "acks=all",
    ]  # fmt: skip


def _tail(output: str) -> str:
    return "\n".join(output.splitlines()[-TAIL_LINES:])


def parse_summary(output: str, records: int, warmup: int) -> PerfSummary:
    """The figures of a run of `records` records with `warmup` warm-up records, from the tool's
    output: its steady-state line with a warm-up, else its summary line.

    Raises:
        InputError: not exactly one summary line over `records` records (and, with a warm-up,
            one steady-state line over `records - warmup`), naming the output's last lines.
    """
    lines = [m for m in map(_SUMMARY.fullmatch, output.splitlines()) if m]
    totals = [m for m in lines if not m["steady"]]
    steady = [m for m in lines if m["steady"]]
    expected = f"one summary line of {records:,} records"
    if warmup:
        expected += f" and one steady-state line of {records - warmup:,}"
    if (
        len(totals) != 1
        or int(totals[0]["records"]) != records
        or len(steady) != (1 if warmup else 0)
        or (warmup and int(steady[0]["records"]) != records - warmup)
    ):
        raise InputError(
            f"bench proxy: {TOOL} printed not {expected} "
            f"('N records sent, R records/sec (...), ..., P ms 50th, ..., P ms 99th, ...'); "
            f"its output ends:\n{_tail(output)}"
        )
    figures = steady[0] if warmup else totals[0]
    return PerfSummary(
        records=records,
        measured=int(figures["records"]),
        records_per_s=float(figures["per_s"]),
        p50_ms=int(figures["p50"]),
        p99_ms=int(figures["p99"]),
    )


def run(
    tool: Path, bootstrap: str, topic: str, records: int, rate: int, payload: Path, warmup: int
) -> PerfSummary:
    """Run the tool (see `command`) and parse its summary.

    Raises:
        InputError: it failed, took more than the run's seconds plus `SLACK_S`, or printed no
            summary (see `parse_summary`).
    """
    argv = command(tool, bootstrap, topic, records, rate, payload, warmup)
    timeout = records / rate + SLACK_S
    try:
        done = subprocess.run(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        output = exc.stdout.decode(errors="replace") if exc.stdout else ""
        raise InputError(
            f"bench proxy: {TOOL} to {topic} at {bootstrap} did not finish in {timeout:.0f} s; "
            f"its output ends:\n{_tail(output)}"
        ) from exc
    except OSError as exc:
        raise InputError(f"bench proxy: cannot run {tool} (--kafka-local): {exc}") from exc
    output = done.stdout.decode(errors="replace")
    if done.returncode != 0:
        raise InputError(
            f"bench proxy: {TOOL} to {topic} at {bootstrap} exited with {done.returncode}; "
            f"its output ends:\n{_tail(output)}"
        )
    return parse_summary(output, records, warmup)
