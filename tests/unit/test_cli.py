"""The command line: the train → list → activate → rollback flow, reports, and clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sidecar.cli.cat import parse_delimiter
from sidecar.cli.dicts import configured_topics
from sidecar.cli.main import build_parser, main
from sidecar.config import Settings, load_settings
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import InputError
from sidecar.training import topic_sample
from sidecar.training.topic_sample import TopicSample

FAST = ["--budget-us", "0", "--budget-mb-per-s", "0"]


@pytest.fixture(scope="module")
def events_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "events.ndjson"
    out = subprocess.run(
        [sys.executable, "-m", "sidecar", "generate", "-n", "3000", "--seed", "11"],
        capture_output=True,
        check=True,
    )
    path.write_bytes(out.stdout)
    return path


@pytest.fixture
def small_grid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZDICT_TRAINING__DICT_SIZES", "[4096, 8192]")
    monkeypatch.setenv("ZDICT_TRAINING__LEVELS", "[1, 3]")
    monkeypatch.setenv("ZDICT_TRAINING__BUDGET_US_PER_MESSAGE", "0")
    monkeypatch.setenv("ZDICT_TRAINING__BUDGET_MB_PER_S", "0")


def test_generate_is_deterministic_and_one_event_per_line(
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    assert main(["generate", "-n", "50", "--seed", "3"]) == 0
    first = capsysbinary.readouterr().out
    assert main(["generate", "-n", "50", "--seed", "3"]) == 0
    assert capsysbinary.readouterr().out == first
    assert first.count(b"\n") == 50


@pytest.mark.usefixtures("small_grid")
def test_train_stores_and_activates_then_list_activate_and_rollback_work(
    tmp_path: Path, events_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store_dir = tmp_path / "dicts"
    args = [
        "train",
        "--input",
        str(events_file),
        "--namespace",
        "orders",
        "--dictionaries",
        str(store_dir),
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "decision: promoted" in out and "activated" in out
    store = DictionaryStore(store_dir)
    first = store.active_id("orders")
    assert first is not None

    # The same data again cannot beat the champion by the margin: rejected, nothing stored.
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["decision"] == "rejected" and report["stored_id"] is None
    assert store.active_id("orders") == first

    assert main(["dicts", "list", "--dictionaries", str(store_dir), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [row["id"] for row in listed] == [first] and listed[0]["active"] is True

    assert main([*args, "--no-activate", "--heldout-fraction", "0.5"]) == 0
    capsys.readouterr()
    assert main(["dicts", "show", str(first), "--dictionaries", str(store_dir)]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == first
    assert (store_dir / "orders" / "TRAINING.jsonl").read_text().count("\n") == 3


@pytest.mark.usefixtures("small_grid")
def test_evaluate_reports_frames_stored_bytes_crossovers_and_the_transport_break_even(
    events_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZDICT_TRAINING__BATCH_LEVEL_BUDGET_US", "0")
    assert main(["evaluate", str(events_file), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    methods = [row["method"] for row in report["alternatives"]]
    assert methods[0].startswith("per record, compact frames, dictionary")
    assert methods[1].startswith("per record, standard frames")
    assert any("whole stream" in m for m in methods)
    # The choice sees the first 20 % (600 lines, the newest 120 held out); the rest is measured.
    assert report["training"]["heldout"]["count"] == 120
    assert report["training"]["split"]["heldout_range"] == "481-600"
    assert report["measured"] == 2400
    # Every row on the same 2,400 later messages: no dictionary is ~1.0x, not raw / held-out.
    nodict = next(r for r in report["alternatives"] if "no dictionary" in r["method"])
    assert nodict["raw_bytes"] == report["alternatives"][0]["raw_bytes"]
    assert 1.0 <= nodict["ratio"] < 1.2
    stored = report["stored_bytes_per_record"]
    assert [row["fill"] for row in stored] == [1, 2, 4, 8, 16, 32, 64, 128, 512]
    first = stored[0]["bytes_per_record"]
    assert first["per record"] < first["raw zstd"]  # one record a batch: ours is smaller
    # The sidecar as its output mode writes, against producer zstd alone, at every fill.
    assert stored[0]["sidecar_versus_producer_zstd"] < 1.0
    assert all(row["sidecar_versus_producer_zstd"] <= 1.02 for row in stored)
    # The output mode's crossover, and the sidecar's bytes, at the batch level training chose
    # (no CPU budget here: level 12 or 9 on these events), against producer zstd at level 3.
    assert "raw zstd, batch level / per record + zstd" in report["crossovers"]
    assert report["batch_level"] == report["training"]["batch_level"]["level"] > 3
    full = stored[-1]["bytes_per_record"]
    assert full["sidecar + zstd"] == full["raw zstd, batch level"] < full["raw zstd"]
    transport = report["transport"]
    ratio, speed = transport["ratio"], transport["encode_mb_per_s"]
    assert transport["break_even_mb_per_s"] == pytest.approx(speed * (ratio - 1) / ratio)
    assert report["encode_ns_per_message"]["median"] > 0


def test_activate_and_rollback_report_missing_things_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store_dir = str(tmp_path / "dicts")
    assert (
        main(["dicts", "activate", "--namespace", "orders", "40000", "--dictionaries", store_dir])
        == 1
    )
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "dictionary 40000 is not in namespace orders" in err
    assert main(["dicts", "rollback", "--namespace", "orders", "--dictionaries", store_dir]) == 1
    assert "no earlier active dictionary" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (
            ["train", "--input", "/nonexistent/x", "--namespace", "o"],
            1,
            "input file /nonexistent/x does not exist",
        ),
        (["train", "--input", "{empty}", "--namespace", "o"], 1, "is empty"),
        (["train", "--input", "{dir}", "--namespace", "o"], 1, "is a directory"),
        (["train", "--input", "{empty}", "--namespace", "a/b"], 2, "invalid namespace 'a/b'"),
        (["evaluate", "/nonexistent/y"], 1, "input file /nonexistent/y does not exist"),
        (
            ["evaluate", "{empty}", "--config", "/nonexistent.toml"],
            2,
            "config file /nonexistent.toml",
        ),
    ],
    ids=["missing", "empty", "directory", "bad-namespace", "evaluate-missing", "missing-config"],
)
def test_bad_input_exits_non_zero_with_one_line_naming_the_cause(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], code: int, message: str
) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    argv = [a.replace("{empty}", str(empty)).replace("{dir}", str(tmp_path)) for a in argv]
    assert (
        main([*argv, "--dictionaries", str(tmp_path / "d")] if argv[0] == "train" else argv) == code
    )
    err = capsys.readouterr().err.strip()
    assert message in err
    assert err.count("\n") == 0


@pytest.mark.usefixtures("small_grid")
def test_too_few_messages_fail_training_with_exit_1_and_the_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    few = tmp_path / "few.ndjson"
    few.write_bytes(b'{"a":1}\n' * 15)  # under the floor of 20 (`min_samples`)
    assert (
        main(
            [
                "train",
                "--input",
                str(few),
                "--namespace",
                "o",
                "--dictionaries",
                str(tmp_path / "d"),
            ]
        )
        == 1
    )
    captured = capsys.readouterr()
    assert "too few usable samples" in captured.err
    assert "decision: failed" in captured.out


def test_an_invalid_setting_from_the_environment_names_the_variable(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    events_file: Path,
) -> None:
    monkeypatch.setenv("ZDICT_TRAINING__PROMOTION_MARGIN", "lots")
    argv = [
        "train",
        "--input",
        str(events_file),
        "--namespace",
        "o",
        "--dictionaries",
        str(tmp_path),
    ]
    assert main(argv) == 2
    assert "ZDICT_TRAINING__PROMOTION_MARGIN" in capsys.readouterr().err


def test_python_dash_m_sidecar_is_the_same_program() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sidecar", "--version"], capture_output=True, text=True
    )
    assert result.returncode == 0 and result.stdout.startswith("zdict-sidecar ")


@pytest.mark.usefixtures("small_grid")
def test_train_uses_a_uniform_sample_of_a_longer_input_and_says_so(
    tmp_path: Path, events_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["train", "--input", str(events_file), "--namespace", "o", "--json"]
    assert main([*argv, "--sample", "1000", "--dictionaries", str(tmp_path / "d")]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["train"]["count"] + report["heldout"]["count"] == 1000
    assert f"{events_file} has 3,000 lines; using a uniform sample of 1,000 (--sample" in (
        captured.err
    )


@pytest.fixture
def topics_from_file(events_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`train --topic`'s sample read from the events file (topic `gone` does not exist): the
    Kafka side is tests/integration/test_train_topic.py's."""
    lines = events_file.read_bytes().splitlines()[:1000]

    def read_sample(settings: Settings, topic: str, count: int, **_: object) -> TopicSample:
        if topic == "gone":
            raise InputError(f"topic {topic} does not exist")
        entries = [(0, offset, line) for offset, line in enumerate(lines)]
        return TopicSample(topic, entries, f"{topic}[0] offsets 0-{len(lines) - 1}")

    monkeypatch.setattr(topic_sample, "read_sample", read_sample)


@pytest.mark.usefixtures("small_grid", "topics_from_file")
def test_train_configured_topics_trains_each_topic_and_a_failed_one_does_not_stop_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ZDICT_RELAY__INPUT_TOPICS", '["orders", "gone"]')
    monkeypatch.setenv("ZDICT_PROXY__TOPICS", '["gone", "clicks"]')
    argv = ["train", "--configured-topics", "--json", "--dictionaries", str(tmp_path)]
    assert main(argv) == 1
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert [(e["namespace"], e["decision"]) for e in report] == [
        ("orders", "promoted"),
        ("gone", "error"),
        ("clicks", "promoted"),
    ]
    assert report[1]["reason"] == "topic gone does not exist"
    assert captured.err.strip() == "zdict-sidecar: topic gone: error: topic gone does not exist"
    store = DictionaryStore(tmp_path)
    assert [report[0]["stored_id"], report[2]["stored_id"]] == [
        store.active_id("orders"),
        store.active_id("clicks"),
    ]


@pytest.mark.usefixtures("small_grid", "topics_from_file")
def test_train_configured_topics_prints_one_report_per_topic_and_exits_0_when_all_train(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ZDICT_RELAY__INPUT_TOPICS", '["orders", "clicks"]')
    assert main(["train", "--configured-topics", "--dictionaries", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.index("namespace orders: ") < out.index("namespace clicks: ")
    assert out.count("decision: promoted") == 2


def test_configured_topics_are_the_encoding_relays_then_the_proxys_each_once() -> None:
    proxy = {"topics": ["b", "c"]}
    relay = {"input_topics": ["a", "b"]}
    assert configured_topics(load_settings(relay=relay, proxy=proxy)) == ["a", "b", "c"]
    # A decoding relay reads compressed topics: their namespaces are their producers'.
    decoding = {"input_topics": ["a.zd"], "mode": "decode"}
    assert configured_topics(load_settings(relay=decoding, proxy=proxy)) == ["b", "c"]


def test_train_configured_topics_is_a_source_of_its_own() -> None:
    args = build_parser().parse_args(["train", "--configured-topics", "--publish"])
    assert (args.configured_topics, args.topic, args.input) == (True, None, None)
    assert not build_parser().parse_args(["train", "--topic", "t"]).configured_topics


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["generate", "-n", "-5"], "argument -n/--count: expected an integer >= 0, got '-5'"),
        (
            ["train", "--input", "x", "--namespace", "o", "--heldout-fraction", "1.5"],
            "argument --heldout-fraction: expected a number from 0 to 1 (exclusive), got '1.5'",
        ),
        (
            ["train", "--input", "x", "--namespace", "o", "--heldout-fraction", "nan"],
            "argument --heldout-fraction: expected a number from 0 to 1",
        ),
        (["train", "--topic", "t", "--sample", "0"], "argument --sample: expected an integer >= 1"),
        (["evaluate", "x", "--train-fraction", "1"], "argument --train-fraction: expected a"),
        (["train", "--topic", "t", "--budget-us", "-1"], "argument --budget-us: expected a number"),
        (["run", "--workers", "0"], "argument --workers: expected an integer from 1 to 64"),
        (["run", "--metrics-port", "65536"], "argument --metrics-port: expected an integer"),
        (["cat", "-t", "t", "-D", "\\x"], "argument --delimiter/-D: unknown escape \\x in \\x"),
        (["cat", "-t", "t", "-D", "\\N"], "argument --delimiter/-D: unknown escape \\N"),
        (["cat", "-t", "t", "-D", "ab\\"], "argument --delimiter/-D: a lone \\ at the end"),
        (["cat", "-t", "t", "-o", "soon"], "argument --offset/-o: expected beginning, end,"),
        (["cat", "-t", "t", "-o", str(2**63)], "argument --offset/-o: expected beginning"),
        (["cat", "-t", "t", "-p", "-1"], "argument --partition/-p: expected an integer from 0 to"),
        (["dicts", "show", "5"], "argument id: expected an integer from 32768 to 2147483647"),
        (["report", "--metrics", "localhost:9400", "--out", "x.png"], "argument --metrics: "),
        (["report", "--prometheus", "file:///etc/passwd", "--out", "x.png"], "http:// or"),
        (["report", "--metrics", "http://h/m", "--namespace", "(", "--out", "x.png"], "regular"),
        (["report", "--metrics", "http://h/m", "--out", "x.jpg"], "argument --out: expected"),
    ],
)
def test_bad_flag_values_exit_2_naming_the_flag_before_anything_runs(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\\n", b"\n"),
        ("\\t|\\r\\n", b"\t|\r\n"),
        ("\\0", b"\0"),
        ("\\\\", b"\\"),
        ("\\x1e", b"\x1e"),
        ("\\xFF", b"\xff"),
        ("é", "é".encode()),
        ("--8<--", b"--8<--"),
        ("", b""),
    ],
)
def test_the_cat_delimiter_decodes_its_escapes_and_keeps_other_characters_as_utf8(
    text: str, expected: bytes
) -> None:
    assert parse_delimiter(text) == expected
