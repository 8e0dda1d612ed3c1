"""Kafka's Java producer-perf-test as `bench proxy` runs it (`sidecar.bench.perf_test`): its
command line, where the tool is found, and its summary lines, parsed strictly (lines captured
from Kafka 4.4.0's ProducerPerformance through `deploy/kafka/kafka-local tools`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.bench import perf_test
from sidecar.errors import InputError

ROOT = Path(__file__).resolve().parents[2]

#: 15,000 records at 5,000 records/s, --warmup-records 10000.
WARM = """\
Reading payloads from: /tmp/javaperf/payload.txt
Number of records read: 2000
Warmup first 10000 records. Steady state results will print after the complete test summary.
15000 records sent, 4963.600265 records/sec (0.40 MB/sec), 31.91 ms avg latency, 499.00 ms max \
latency, 6 ms 50th, 181 ms 95th, 205 ms 99th, 206 ms 99.9th.
5000 steady state records sent, 4868.549172 records/sec (0.39 MB/sec), 4.89 ms avg latency, \
11.00 ms max latency, 5 ms 50th, 8 ms 95th, 10 ms 99th, 11 ms 99.9th.
"""
#: 5,000 records at 5,000 records/s, no warm-up.
COLD = """\
Reading payloads from: /tmp/javaperf/payload.txt
Number of records read: 2000
5000 records sent, 4878.048780 records/sec (0.39 MB/sec), 16.94 ms avg latency, 406.00 ms max \
latency, 7 ms 50th, 60 ms 95th, 77 ms 99th, 79 ms 99.9th.
"""
#: A progress line (every --reporting-interval): no percentiles, not a summary.
PROGRESS = (
    "24993 records sent, 4998.6 records/sec (0.53 MB/sec), 3.5 ms avg latency, "
    "27.0 ms max latency.\n"
)


def test_with_a_warm_up_the_steady_state_line_gives_the_figures() -> None:
    summary = perf_test.parse_summary(PROGRESS + WARM, 15_000, 10_000)
    assert summary == perf_test.PerfSummary(
        records=15_000, measured=5_000, records_per_s=4868.549172, p50_ms=5, p99_ms=10
    )


def test_without_a_warm_up_the_summary_line_gives_them() -> None:
    summary = perf_test.parse_summary(COLD, 5_000, 0)
    assert summary == perf_test.PerfSummary(
        records=5_000, measured=5_000, records_per_s=4878.04878, p50_ms=7, p99_ms=77
    )


@pytest.mark.parametrize(
    ("output", "records", "warmup"),
    [
        pytest.param("Exception in thread main: TimeoutException\n", 5_000, 0, id="garbage"),
        pytest.param(PROGRESS, 24_993, 0, id="progress-only"),
        pytest.param(COLD, 5_000, 1_000, id="no-steady-state-line"),
        pytest.param(WARM, 15_000, 0, id="unexpected-steady-state-line"),
        pytest.param(WARM, 20_000, 10_000, id="fewer-records-sent"),
        pytest.param(WARM, 15_000, 5_000, id="other-warm-up"),
        pytest.param(COLD + COLD, 5_000, 0, id="two-summaries"),
        pytest.param(COLD.replace("4878.048780", "4878,048780"), 5_000, 0, id="decimal-comma"),
    ],
)
def test_output_without_the_expected_summary_names_its_tail(
    output: str, records: int, warmup: int
) -> None:
    with pytest.raises(InputError, match="producer-perf-test printed not one summary line") as exc:
        perf_test.parse_summary(output, records, warmup)
    assert output.splitlines()[-1] in str(exc.value)


def test_the_command_line_is_the_issues_run() -> None:
    argv = perf_test.command(
        Path("deploy/kafka/kafka-local"), "127.0.0.1:9092", "t", 50_000, 5000, Path("p.txt"), 10_000
    )
    assert " ".join(argv) == (
        "deploy/kafka/kafka-local tools producer-perf-test --topic t --num-records 50000 "
        "--throughput 5000 --payload-file p.txt --warmup-records 10000 "
        "--bootstrap-server 127.0.0.1:9092 --command-property linger.ms=5 acks=all"
    )


@pytest.mark.parametrize(
    ("records", "warmup"), [(50_000, 10_000), (20_000, 10_000), (10_000, 5_000), (1, 0)]
)
def test_the_warm_up_is_two_seconds_at_most_half_the_run(records: int, warmup: int) -> None:
    assert perf_test.warmup_records(records, 5000) == warmup


def test_the_default_kafka_local_is_the_repositorys_from_its_root() -> None:
    assert (ROOT / perf_test.KAFKA_LOCAL).is_file()
    assert perf_test.kafka_local(ROOT / perf_test.KAFKA_LOCAL) == ROOT / perf_test.KAFKA_LOCAL


def test_a_missing_or_plain_kafka_local_names_the_option(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"nope is not there \(--kafka-local\)"):
        perf_test.kafka_local(tmp_path / "nope")
    plain = tmp_path / "kafka-local"
    plain.write_text("#!/bin/sh\n")
    with pytest.raises(InputError, match=r"is not executable \(--kafka-local\)"):
        perf_test.kafka_local(plain)
