"""What the commands share: a benchmark's JSON and chart, written in one place; the checked
types of numeric flags and output files; input lines read with caps, sampled while streaming."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from sidecar.cli import common
from sidecar.cli.common import (
    InputLines,
    note_sample,
    number,
    output_file,
    png_file,
    read_lines,
    setting_number,
    write_bench_results,
)
from sidecar.config import RelaySettings, TrainingSettings
from sidecar.errors import InputError, MissingDependency


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


# -- numeric flags -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (number(int, ge=0), "-5", "expected an integer >= 0, got '-5'"),
        (number(int, ge=0), "1e3", "expected an integer >= 0, got '1e3'"),
        (number(float, gt=0, lt=1), "1.5", "expected a number from 0 to 1 (exclusive), got '1.5'"),
        (number(float, gt=0, lt=1), "nan", "got 'nan'"),
        (number(float, ge=0), "inf", "expected a number >= 0, got 'inf'"),
        (number(float, gt=0), "-inf", "expected a number > 0"),
        (number(int, ge=32768, le=2**31 - 1), "5", "an integer from 32768 to 2147483647"),
        (number(int, le=3), "4", "expected an integer <= 3"),
    ],
)
def test_a_number_flag_refuses_what_is_out_of_bounds_or_not_finite(
    parse: Callable[[str], object], text: str, message: str
) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(message)):
        parse(text)


def test_a_number_flag_takes_what_is_within_bounds() -> None:
    assert number(int, ge=0)("0") == 0
    assert number(float, gt=0, lt=1)("0.25") == 0.25
    assert number(float, ge=0)("1e3") == 1000.0


def test_a_flag_that_overrides_a_setting_takes_the_settings_bounds() -> None:
    workers = setting_number(RelaySettings, "workers")
    assert workers("64") == 64
    for bad in ("0", "65", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match="integer from 1 to 64"):
            workers(bad)
    fraction = setting_number(TrainingSettings, "heldout_fraction")
    assert fraction("0.5") == 0.5
    with pytest.raises(argparse.ArgumentTypeError, match=r"number from 0 to 1 \(exclusive\)"):
        fraction("1")


def test_an_output_file_is_not_a_directory_nor_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    assert output_file(str(tmp_path / "new" / "dir" / "out.json")).endswith("out.json")
    with pytest.raises(argparse.ArgumentTypeError, match="is a directory"):
        output_file(str(tmp_path))
    with pytest.raises(argparse.ArgumentTypeError, match="file is not a directory"):
        output_file(str(tmp_path / "file" / "out.json"))
    with pytest.raises(argparse.ArgumentTypeError, match=r"ending in \.png"):
        png_file(str(tmp_path / "chart.svg"))


# -- input lines ---------------------------------------------------------------------------------


def _read(path: Path | str, max_lines: int = 1000, max_line_bytes: int = 100) -> InputLines:
    return read_lines(
        str(path), max_lines=max_lines, max_line_bytes=max_line_bytes, line_cap="THE_CAP"
    )


def test_lines_are_read_whole_when_they_fit(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes(b"a\r\nb\n\nlast")
    lines = _read(path)
    assert lines.lines == [b"a", b"b", b"", b"last"] and lines.numbers == [0, 1, 2, 3]
    assert not lines.sampled and lines.describe() == f"{path} lines 1-4"


def test_a_longer_input_is_a_uniform_sample_in_input_order_the_same_every_time(
    tmp_path: Path,
) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes(b"".join(b"%d\n" % i for i in range(10_000)))
    lines = _read(path, max_lines=1000)
    assert len(lines.lines) == 1000 and lines.total == 10_000 and lines.sampled
    assert lines.numbers == sorted(lines.numbers)
    assert lines.lines == [b"%d" % i for i in lines.numbers]
    # Spread over the whole input, not its head: each tenth holds about a tenth of the sample.
    tenths = [sum(1 for n in lines.numbers if n // 1000 == t) for t in range(10)]
    assert min(tenths) > 50
    assert _read(path, max_lines=1000) == lines
    assert "a uniform sample of 1,000 of 10,000 lines" in lines.describe()


def test_the_sample_is_bounded_in_bytes_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(common, "MAX_SAMPLE_BYTES", 5_000)
    path = tmp_path / "in.txt"
    path.write_bytes((b"x" * 99 + b"\n") * 1000)
    lines = _read(path, max_lines=1000)
    assert sum(map(len, lines.lines)) <= 5_000 and len(lines.lines) == 50


@pytest.mark.parametrize(
    ("content", "line"), [(b"short\n" + b"x" * 101 + b"\nshort\n", 2), (b"x" * 101, 1)]
)
def test_a_line_over_the_cap_is_refused_naming_the_line_and_the_cap(
    tmp_path: Path, content: bytes, line: int
) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes(content)
    with pytest.raises(InputError, match=rf"line {line} of .*in.txt is longer than 100 bytes"):
        _read(path)


def test_a_line_at_the_cap_with_a_crlf_ending_is_taken(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes(b"x" * 100 + b"\r\n" + b"y" * 100)
    assert _read(path).lines == [b"x" * 100, b"y" * 100]


def test_dev_zero_is_refused_after_one_line_s_worth() -> None:
    with pytest.raises(
        InputError, match=r"line 1 of /dev/zero is longer than 100 bytes \(THE_CAP\)"
    ):
        _read("/dev/zero")


@pytest.mark.parametrize(
    ("where", "message"),
    [("missing", "does not exist"), ("", "is a directory"), ("empty", "is empty")],
)
def test_inputs_that_hold_no_lines_are_named(tmp_path: Path, where: str, message: str) -> None:
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(InputError, match=message):
        _read(tmp_path / where if where else tmp_path)


def test_a_sample_is_noted_on_stderr_with_the_flag_that_sets_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes(b"x\n" * 20)
    note_sample(_read(path, max_lines=30), "--sample")
    assert capsys.readouterr().err == ""
    note_sample(_read(path, max_lines=10), "--sample")
    err = capsys.readouterr().err
    assert f"{path} has 20 lines; using a uniform sample of 10 (--sample sets how many" in err
