"""What the commands share: a benchmark's JSON and chart, written in one place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sidecar.cli.common import write_bench_results
from sidecar.errors import MissingDependency


def test_a_benchmark_writes_its_json_then_its_chart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    json_out = tmp_path / "out" / "bench-x.json"
    png = tmp_path / "out" / "bench-x.png"
    write_bench_results("x", {"runs": 3}, [{"rate": 1.5}], str(json_out), lambda: png)
    payload = json.loads(json_out.read_text())
    assert payload["benchmark"] == "x" and payload["settings"] == {"runs": 3}
    assert payload["results"] == [{"rate": 1.5}]
    assert {"python", "zstandard", "libzstd"} <= set(payload["environment"])
    assert capsys.readouterr().out == f"\nwrote {json_out}\nwrote {png}\n"


def test_without_matplotlib_the_numbers_are_written_and_the_chart_skipped_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def chart() -> Path:
        raise MissingDependency("matplotlib is not installed")

    json_out = tmp_path / "bench-y.json"
    write_bench_results("y", {}, {"when": Path("/x")}, str(json_out), chart)
    assert json.loads(json_out.read_text())["results"] == {"when": "/x"}  # str() of the rest
    captured = capsys.readouterr()
    assert captured.out == f"\nwrote {json_out}\n"
    assert captured.err == "zdict-sidecar: matplotlib is not installed\n"
