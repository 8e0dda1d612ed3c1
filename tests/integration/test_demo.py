"""`make demo`'s code (`sidecar/bench/demo.py`) against the real broker, shortened: every figure
it prints is checked here, against the broker's own log segments."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.bench import demo
from sidecar.bench.demo import FIRST, FULL, NO_DICTIONARY, RETRAINED, DemoResult


@pytest.fixture(scope="module")
def result(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> DemoResult:
    work: Path = tmp_path_factory.mktemp("demo")
    return demo.run_demo(kafka_bootstrap, work, seconds=45.0, drift_after=18.0, full_events=20_000)


def test_every_window_holds_the_same_records_three_ways_and_all_are_read_back_exact(
    result: DemoResult,
) -> None:
    assert result.exit_code == 0
    for window in result.windows:
        assert window.records["none"] == window.records["zstd"] == window.records["sidecar"]
        assert window.frame_records + window.raw_records == window.records["sidecar"]
        assert window.stored_bytes["zstd"] < window.stored_bytes["none"]
    assert sum(w.records["sidecar"] for w in result.windows) == result.produced
    assert result.read_back == result.exact == result.produced
    assert demo.ok(result)


def test_in_small_batches_the_proxy_stores_less_than_producer_zstd_and_retrains_after_a_change(
    result: DemoResult,
) -> None:
    names = [w.name for w in result.windows]
    assert names[:2] == [NO_DICTIONARY, FIRST] and RETRAINED in names, names
    assert result.first_dictionary is not None and result.drift_at is not None
    assert result.detected is not None and result.retrained is not None
    assert result.first_dictionary < result.drift_at <= result.detected <= result.retrained
    assert result.first_crossover is not None and result.crossover is not None
    for name, crossover in ((FIRST, result.first_crossover), (RETRAINED, result.crossover)):
        window = result.window(name)
        assert window is not None
        # Keyed over 16 partitions at linger 5 ms: one or two records a batch, more while the
        # proxy trains on a loaded machine, and below the crossover.
        assert window.fill < crossover, (name, window.fill, crossover)
        # Frames, but for a value a frame would not shrink and a batch of 4 or more the batch
        # codec stores in fewer bytes as it came.
        assert window.raw_records < window.records["sidecar"] // 10, window.raw_records
        assert window.versus_zstd < 0.9, (name, window.versus_zstd)


def test_in_full_batches_the_proxy_writes_raw_and_stores_what_producer_zstd_would(
    result: DemoResult,
) -> None:
    full = result.window(FULL)
    # What decided: the proxy's crossover on the topic's latest values, at its batch level.
    assert full is not None and result.crossover is not None and result.crossover_level
    assert full.fill > result.crossover
    assert full.raw_records == full.records["sidecar"]
    assert full.versus_zstd <= 1.02, full.versus_zstd


def test_the_printed_figures_are_the_measured_ones(result: DemoResult) -> None:
    text = demo.format_demo(result)
    for window in result.windows:
        assert f"{window.stored_bytes['zstd']:,}" in text
        assert f"{window.stored_bytes['sidecar']:,}" in text
        assert f"{window.versus_zstd:.3f}" in text
    full = result.window(FULL)
    assert full is not None
    assert f"the proxy wrote {full.raw_records:,} of {full.records['sidecar']:,}" in text
    assert f"{result.exact:,} byte-exact of {result.produced:,} sent" in text
    assert f"(crossover at training {result.first_crossover:g} records per batch)" in text
    level, crossover = result.crossover_level, result.crossover
    assert f"latest values at zstd level {level}: {crossover:g} records per batch" in text
    assert "1.00 / 1.00" not in text  # no vacuous ratio
