"""`bench` commands: their checks, tables and files, over results made up here (no broker)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sidecar.bench import lifecycle as bench_lifecycle
from sidecar.bench import relay as bench_relay
from sidecar.bench.codec import RelayRun, tree_cpu
from sidecar.bench.lifecycle import CostRound, LifecycleResults
from sidecar.bench.relay import KindResults, LatencyRun
from sidecar.bench.workload import DriftRun
from sidecar.cli import bench as cli_bench
from sidecar.cli import common as cli_common
from sidecar.cli.bench_common import fills
from sidecar.cli.main import main
from sidecar.errors import InputError, MissingDependency


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A broker address, taken as answering: the benchmarks are stubbed. Lists the checks."""
    checked: list[str] = []
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setattr(cli_common, "check_broker", checked.append)
    return checked


def _kind_results(kind: str, *args: Any, **kwargs: Any) -> KindResults:
    result = KindResults(kind, 1_000_000, 321.0, 4)
    if kwargs["c_relay"]:
        result.saturation[bench_relay.C_RELAY] = [
            RelayRun(bench_relay.C_RELAY, 1_000_000, 4.0, 2.5, 50 * 2**20, 0, 1.8, 1_000_000)
        ] * 3
    for variant in kwargs["saturation"]:
        result.saturation[variant.name] = [
            RelayRun(variant.name, 1_000_000, 5.0 + i, 7.0, 200 * 2**20, i, 5.4, 900_000)
            for i in range(3)
        ]
    for rate in kwargs["rates"]:
        key = f"compress, 1 worker @ {f'{rate:,.0f}/s' if rate else 'max'}"
        result.latency[key] = [
            LatencyRun("compress, 1 worker", rate, 6.0, 100, 90, 90, 19_000.0, 1.5, 9.5, 30.0)
        ] * 3
    return result


@pytest.mark.usefixtures("broker")
def test_bench_relay_prints_both_tables_writes_json_and_notes_a_missing_chart_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_matplotlib(*args: object) -> Path:
        raise MissingDependency("matplotlib is not installed")

    monkeypatch.setattr(
        bench_relay, "bench_kind", lambda _, kind, *a, **k: _kind_results(kind, **k)
    )
    monkeypatch.setattr(bench_relay, "plot", no_matplotlib)
    monkeypatch.setattr("sidecar.cli.bench.shutil.which", lambda name: f"/usr/bin/{name}")
    json_out = tmp_path / "relay.json"
    argv = ["bench", "relay", "--kind", "order", "--latency-rate", "20000,max"]
    assert main([*argv, "--json-out", str(json_out)]) == 0
    captured = capsys.readouterr()
    assert "relay over 1,000,000 pre-loaded order events (321 B), 4 partitions" in captured.out
    # CPU per record in the steady state, and against the C relay: 5.4 s / 0.9 M vs 1.8 / 1 M.
    c_relay = next(line for line in captured.out.splitlines() if "kcat" in line)
    assert "1.80 [1.80-1.80]" in c_relay
    pass_through = next(line for line in captured.out.splitlines() if "pass-through, 1" in line)
    assert "6.00 [6.00-6.00]" in pass_through and "3.33" in pass_through
    assert "compress, 1 worker @ 20,000/s" in captured.out
    assert "compress, 1 worker @ max" in captured.out
    assert captured.out.endswith(f"\nwrote {json_out}\n")
    assert captured.err == "zdict-sidecar: matplotlib is not installed\n"
    payload = json.loads(json_out.read_text())
    assert payload["benchmark"] == "relay" and payload["settings"]["kind"] == ["order"]
    assert payload["settings"]["func"] is None and payload["results"][0]["kind"] == "order"


@pytest.mark.usefixtures("broker")
def test_bench_relay_measures_settings_apart_from_the_defaults_on_the_first_kind_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: dict[str, list[str]] = {}

    def record(_: str, kind: str, *args: Any, **kwargs: Any) -> KindResults:
        asked[kind] = [v.name for v in kwargs["saturation"]]
        return _kind_results(kind, **kwargs)

    monkeypatch.setattr(bench_relay, "bench_kind", record)
    monkeypatch.setattr(bench_relay, "plot", lambda _, path: path)
    argv = ["bench", "relay", "--kind", "product_viewed", "--kind", "order", "--latency-rate", ""]
    assert main([*argv, "--json-out", str(tmp_path / "relay.json")]) == 0
    every = [v.name for v in bench_relay.SATURATION]
    assert asked["product_viewed"] == every
    assert "compress, 1 worker, exactly-once" in every
    assert asked["order"] == [
        "pass-through, 1 worker",
        "compress, 1 worker",
        "compress, 2 workers",
    ]


def test_the_exactly_once_variant_runs_the_relay_with_transactions(tmp_path: Path) -> None:
    variant = next(v for v in bench_relay.SATURATION if v.exactly_once)
    args = bench_relay._relay_args(variant, "in", "out", tmp_path)
    assert args[-2:] == ["--guarantee", "exactly-once"] and "--pass-through" not in args
    assert not any(v.exactly_once for v in bench_relay.LATENCY)


@pytest.mark.usefixtures("broker")
def test_bench_lifecycle_prints_drift_training_and_cost_then_writes_json_and_png(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    drift = DriftRun(
        5000,
        90.0,
        45.0,
        first_dictionary=12.0,
        recovered=70.5,
        trainings=[{"seconds": 3.5, "cpu_seconds": 2.0}],
    )
    cost = CostRound(2_000_000, 30.0, 4, [3.0], [150_000.0], [200_000.0], 25.0, 5.0)
    results = LifecycleResults([drift], [cost] * 3, 2_000_000, {"drift": {"rate": 5000}})
    monkeypatch.setattr(bench_lifecycle, "bench_lifecycle", lambda *a, **k: results)
    monkeypatch.setattr(bench_lifecycle, "plot", lambda _, path: path)
    json_out, png = tmp_path / "lifecycle.json", tmp_path / "lifecycle.png"
    assert main(["bench", "lifecycle", "--json-out", str(json_out), "--png", str(png)]) == 0
    out = capsys.readouterr().out
    assert "drift: 5,000 product_viewed events/s for 90 s, schema change after 45 s" in out
    assert "\n\ntraining runs beside the relay: 1, wall 3.5 [3.5-3.5] s, CPU 2.0 [2.0-2.0] s" in out
    assert "cost: relay over 2,000,000 pre-loaded events" in out
    assert " 25.5 " in out  # the drift run's recovery, +s after the change
    assert out.endswith(f"\nwrote {json_out}\nwrote {png}\n")
    assert json.loads(json_out.read_text())["settings"] == {"drift": {"rate": 5000}}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "lifecycle", "--drift-after", "100"], "--drift-after must be within --seconds"),
        (["bench", "storage"], "--data-dir is required"),
    ],
)
def test_bench_settings_that_cannot_measure_are_refused_with_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], broker: list[str]
) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert broker == []  # refused before any broker is asked


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "relay", "--runs", "2"], "argument --runs: expected an integer >= 3, got '2'"),
        (["bench", "lifecycle", "--cost-rounds", "1"], "argument --cost-rounds: expected an"),
        (["bench", "codec", "-n", "0"], "argument -n/--count: expected an integer >= 1"),
        (["bench", "relay", "--latency-rate", "fast"], "argument --latency-rate: expected a"),
        (["bench", "relay", "--latency-rate", "0"], "argument --latency-rate: expected a"),
        (["bench", "storage", "--fills", "1,x"], "argument --fills: expected a comma list"),
        (["bench", "storage", "--fills", "0"], "argument --fills: expected a comma list"),
        (["bench", "lifecycle", "--seconds", "inf"], "argument --seconds: expected a number > 0"),
        (["bench", "relay", "--png", "chart.svg"], "argument --png: expected a file name ending"),
        (["bench", "relay", "--baseline", "/"], "argument --baseline: expected a directory"),
    ],
)
def test_bench_flags_are_checked_when_parsed_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], broker: list[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
    assert broker == []


def test_a_baseline_runs_every_sidecar_variant_again_from_its_checkout_right_after(
    tmp_path: Path,
) -> None:
    variants = bench_relay.with_baseline(bench_relay.LATENCY[:2], tmp_path)
    assert [v.name for v in variants] == [
        "pass-through, 1 worker",
        "pass-through, 1 worker [baseline]",
        "compress, 1 worker",
        "compress, 1 worker [baseline]",
    ]
    assert "PYTHONPATH" not in variants[0].env()
    assert variants[1].env()["PYTHONPATH"] == str(tmp_path)
    assert variants[1].env()["PYTHONSAFEPATH"] == "1"  # not this checkout, the working dir
    assert bench_relay.base_name(variants[3].name) == variants[2].name


def test_the_cpu_of_a_process_tree_counts_its_children(tmp_path: Path) -> None:
    # A child that burns 0.3 s of its own CPU, then waits: its time is in the tree's.
    burn = "import time\nwhile time.process_time() < 0.3: pass\nprint(flush=True)\ninput()"
    child = subprocess.Popen(
        [sys.executable, "-c", burn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "\n"
        mine = tree_cpu([os.getpid()])
        theirs = tree_cpu([child.pid])
        assert theirs is not None and 0.28 <= theirs < 5  # clock ticks: 10 ms steps
        assert mine is not None and mine >= theirs + time.process_time() - 0.05
    finally:
        child.kill()
        child.wait()
    assert tree_cpu([child.pid]) is None  # ended: its usage is wait4's to tell
    assert RelayRun("x", 10, 1.0, 2.0, 0, 0, 0.5, 100_000).cpu_us_per_record == 5.0


def test_the_flags_lists_parse_to_what_the_benchmarks_take() -> None:
    assert cli_bench.latency_rates("20000, max,") == [20000.0, None]
    assert cli_bench.latency_rates("") == []
    assert fills("1,2, 128") == (1, 2, 128)


def test_a_benchmark_output_that_is_a_directory_is_refused_before_measuring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "codec", "--json-out", str(tmp_path)])
    assert exit_.value.code == 2
    assert f"argument --json-out: {tmp_path} is a directory" in capsys.readouterr().err


def test_an_unreachable_broker_stops_a_benchmark_before_it_measures(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("ZDICT_RELAY__UNREACHABLE_TIMEOUT", "1")

    def measured(*args: object, **kwargs: object) -> None:
        raise AssertionError("the benchmark ran")

    monkeypatch.setattr(bench_relay, "bench_kind", measured)
    assert main(["bench", "relay"]) == 1
    err = capsys.readouterr().err
    assert "no Kafka broker answered within 1 s at bootstrap.servers=127.0.0.1:1" in err
    assert "(KAFKA_BOOTSTRAP_SERVERS)" in err


def test_bench_proxy_without_kafka_local_stops_before_the_broker_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], broker: list[str]
) -> None:
    missing = tmp_path / "kafka-local"
    assert main(["bench", "proxy", "--kafka-local", str(missing)]) == 1
    err = capsys.readouterr().err
    assert f"{missing} is not there (--kafka-local)" in err
    assert "give --kafka-local PATH" in err and "Traceback" not in err
    assert broker == []


def test_bench_proxy_takes_the_brokers_pid_from_its_file_for_the_reference_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broker: list[str]
) -> None:
    from sidecar.bench import proxy as bench_proxy

    kafka_local = tmp_path / "kafka-local"
    kafka_local.write_text("#!/bin/sh\n")
    kafka_local.chmod(0o755)
    pid_file = tmp_path / "kafka.pid"
    pid_file.write_text("4242\n")
    taken: dict[str, Any] = {}

    def measured(*args: object, **kwargs: Any) -> None:
        taken.update(kwargs)
        raise InputError("measured no further")

    monkeypatch.setattr(bench_proxy, "bench_proxy", measured)
    argv = ["bench", "proxy", "--kafka-local", str(kafka_local), "--broker-pid-file"]
    assert main([*argv, str(pid_file)]) == 1
    assert taken["broker_pid"] == 4242
    # Without one the bench runs on, the broker's rows not measured.
    assert main(argv[:-1]) == 1
    assert taken["broker_pid"] is None
