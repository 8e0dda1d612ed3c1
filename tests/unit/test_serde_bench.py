"""`bench producer` without a broker: its table and file over results made up here, and the
stored bytes it computes on real frames."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sidecar.bench import producer as bench_producer
from sidecar.bench.events import generate
from sidecar.bench.producer import ProducerResults, SizeResult, stored_per_record
from sidecar.cli import common as cli_common
from sidecar.cli.main import main
from sidecar.codec import Encoder
from sidecar.dictionaries.model import TrainingSample, build_dictionary


def _size(label: str, kind: str, mean: float) -> SizeResult:
    result = SizeResult(label, kind, mean, 32768, 1.8)
    result.plain_us = [2.0, 2.2, 2.1]
    result.header_us = [2.4, 2.5, 2.6]
    result.zdict_us = [4.5, 4.4, 4.9]
    result.plain_cpu_us = [1.8, 1.9, 1.8]
    result.zdict_cpu_us = [4.0, 4.1, 4.2]
    result.encode_us = [1.9, 2.0, 2.1]
    result.zstd_us = [1.45, 1.5, 1.7]
    result.stored = {
        fill: {"raw none": 180.0, "raw zstd": 170.0 / fill**0.3, "zdict none": 80.0,
               "zdict zstd": 78.0 / fill**0.2}
        for fill in (1, 2, 4, 8, 16)
    }  # fmt: skip
    return result


def test_bench_producer_prints_one_table_and_writes_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    checked: list[str] = []
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setattr(cli_common, "check_broker", checked.append)
    sizes = [_size("~100 B", "product_viewed", 113.7), _size("~500 B", "order", 488.0)]
    asked: dict[str, object] = {}

    def stub(bootstrap: str, **kwargs: object) -> ProducerResults:
        asked.update(kwargs, bootstrap=bootstrap)
        return ProducerResults(count=1000, runs=3, fills=(1, 2, 4, 8, 16), sizes=sizes)

    monkeypatch.setattr(bench_producer, "bench_producer", stub)
    json_out = tmp_path / "producer.json"
    argv = ["bench", "producer", "-n", "1000", "--runs", "3", "--json-out", str(json_out)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert checked == ["127.0.0.1:1"]
    assert asked == {
        "bootstrap": "127.0.0.1:1",
        "count": 1000,
        "runs": 3,
        "fills": (1, 2, 4, 8, 16),
    }
    lines = out.splitlines()
    first = next(line for line in lines if line.startswith("~100 B (114 B)"))
    # The timing columns: median [min-max]; added = zdict - plain, round by round.
    assert "2.10 [2.00-2.20]" in first and "4.50 [4.40-4.90]" in first
    assert "2.50 [2.20-2.80]" in first
    assert "0.40 [0.30-0.50]" in first  # header = header round - plain, round by round
    assert "1.50 [1.45-1.70]" in first  # zstd alone
    assert "2.18x" in first  # raw+zstd / zdict+zstd at one record per batch
    assert sum(line.startswith("~") for line in lines) == 2
    rows = [line for line in lines if re.search(r"\d\.\d\dx$", line)]
    assert len(rows) == 10  # 2 sizes x 5 fills
    payload = json.loads(json_out.read_text())
    assert payload["benchmark"] == "producer" and payload["settings"]["runs"] == 3
    assert payload["results"][0]["added_us"] == pytest.approx([2.5, 2.2, 2.8])
    assert payload["results"][0]["header_added_us"] == pytest.approx([0.4, 0.3, 0.5])
    assert payload["results"][0]["zstd_us"] == pytest.approx([1.45, 1.5, 1.7])


def test_per_record_frames_are_stored_smaller_than_producer_zstd_in_small_batches(
    trained_bytes: bytes,
) -> None:
    dictionary = build_dictionary(
        "orders",
        trained_bytes,
        dict_id=32768,
        version=1,
        level=3,
        heldout_ratio=2.0,
        nodict_ratio=1.0,
        break_even_size=0,
        training=TrainingSample(count=1, bytes=1, heldout_count=1, heldout_bytes=1),
    )
    encoder = Encoder(dictionary)
    values = list(generate("product_viewed", 2000, seed=21))
    stored = stored_per_record(
        [(v, ()) for v in values], [encoder.encode(v) for v in values], (1, 16)
    )
    one, sixteen = stored[1], stored[16]
    assert one["zdict zstd"] < one["raw zstd"] < one["raw none"]
    assert one["zdict zstd"] <= one["zdict none"]  # librdkafka would send it uncompressed
    assert sixteen["raw zstd"] < one["raw zstd"]  # batches that fill compress well
