"""The batch codec's level chosen at training: bytes measured exactly as librdkafka's zstd
batches store them, CPU judged on the batch cost model within the budget, the same pick on
every run, and the crossover measured at the level chosen."""

from __future__ import annotations

import pytest

from sidecar.bench.events import generate
from sidecar.codec import Encoder
from sidecar.dictionaries.model import MIN_DICT_ID
from sidecar.kafka.batch_fill import batch_level, configured_level, with_batch_level
from sidecar.live_crossover import LiveCrossover
from sidecar.record_batch import producer_codecs, producer_zstd, stored_bytes
from sidecar.stored_estimate import ProducerBatches
from sidecar.training.batch_level import (
    BATCH_LEVELS,
    MIN_GAIN,
    LevelFigure,
    batch_cost_ns,
    choose_batch_level,
    level_figures,
    measure_batch_level,
)
from sidecar.training.choice import candidate_dictionary, train
from sidecar.training.crossover import crossover_split, raw_crossovers
from sidecar.training.params import Decision, TrainingParams
from sidecar.training.promotion import dictionary_from_report
from sidecar.training.split import split_ordered


@pytest.fixture(scope="module")
def events() -> list[bytes]:
    return list(generate("product_viewed", 2048, seed=11))


def _figure(level: int, stored: int, cost: float, fill: int = 512) -> LevelFigure:
    return LevelFigure(level=level, fill=fill, records=fill, stored_bytes=stored, cost_ns=cost)


def test_the_bytes_are_those_of_librdkafka_batches_at_each_level(events: list[bytes]) -> None:
    figures = level_figures(events[:1024], levels=(3, 9), fills=(16, 512))
    records = [(v, ()) for v in events[:1024]]
    for f in figures:
        assert f.records == 1024
        assert f.stored_bytes == stored_bytes(records, f.fill, producer_zstd(f.level))


def test_only_whole_batches_are_measured_and_fills_past_the_values_are_left_out(
    events: list[bytes],
) -> None:
    figures = level_figures(events[:600], levels=(3,), fills=(16, 512, 1024))
    assert [(f.fill, f.records) for f in figures] == [(16, 592), (512, 512)]


def test_a_higher_level_stores_fewer_bytes_of_full_batches_and_is_chosen_without_a_budget(
    events: list[bytes],
) -> None:
    chosen = measure_batch_level(events, budget_ns=0.0)
    assert chosen.fill == 512
    default, best = chosen.at(3, 512), chosen.at(chosen.level, 512)
    assert default is not None and best is not None
    assert chosen.level > 3
    assert best.stored_bytes <= default.stored_bytes * (1 - MIN_GAIN)
    assert chosen.saving == best.stored_bytes / default.stored_bytes


def test_the_budget_judges_the_extra_cpu_of_the_cost_model_over_level_3(
    events: list[bytes],
) -> None:
    assert measure_batch_level(events, budget_ns=1.0).level == 3
    generous = measure_batch_level(events, budget_ns=0.0)
    default = generous.at(3, 512)
    assert default is not None
    extra = {f.level: f.cost_ns - default.cost_ns for f in generous.figures if f.fill == 512}
    for level in BATCH_LEVELS:
        budget = extra[level] + 1.0
        picked = measure_batch_level(events, budget_ns=budget).level
        assert extra[picked] <= budget


def test_a_costlier_level_must_save_min_gain_to_be_chosen() -> None:
    almost = [_figure(3, 10_000, 100.0), _figure(9, 9_950, 300.0)]
    assert choose_batch_level(almost, 512, 0.0) == 3
    enough = [_figure(3, 10_000, 100.0), _figure(9, 9_899, 300.0)]
    assert choose_batch_level(enough, 512, 0.0) == 9
    assert choose_batch_level(enough, 512, 150.0) == 3
    assert choose_batch_level(enough, 64, 0.0) == 3  # that fill was not measured


def test_the_cost_model_grows_with_the_level_and_falls_per_record_with_the_fill() -> None:
    costs = [batch_cost_ns(level, 20_000, 256) for level in (1, 3, 6, 9, 12, 19)]
    assert costs == sorted(costs)
    assert batch_cost_ns(9, 16 * 100, 16) > batch_cost_ns(9, 512 * 100, 512)


def test_the_same_values_give_the_same_level_and_figures(events: list[bytes]) -> None:
    assert measure_batch_level(events, 5000.0) == measure_batch_level(events, 5000.0)


def test_no_values_or_no_level_3_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one value"):
        measure_batch_level([], 0.0)
    with pytest.raises(ValueError, match="must include 3"):
        measure_batch_level([b"x"], 0.0, levels=(9,))


def test_a_promoted_dictionary_carries_its_batch_level_and_the_crossover_at_it() -> None:
    params = TrainingParams(
        dict_sizes=(4096,),
        levels=(3,),
        budget_us_per_message=0.0,
        budget_mb_per_s=0.0,
        batch_level_budget_us=0.0,
        timing_runs=1,
    )
    samples = split_ordered(generate("product_viewed", 5000, seed=3), 0.4)
    report = train(samples, params, namespace="x")
    assert report.decision is Decision.PROMOTED
    assert report.batch_level is not None and report.batch_level.level > 3
    assert report.summary()["batch_level"] == report.batch_level.level
    assert report.to_dict()["batch_level"]["level"] == report.batch_level.level
    assert dictionary_from_report(
        report, dict_id=MIN_DICT_ID, version=1, window="", parent_id=None
    ).meta.batch_level == (report.batch_level.level)
    # The crossover measured by hand, both modes' batches at the chosen level: the report's.
    _, values = crossover_split(samples.heldout)
    assert report.dictionary is not None and report.chosen is not None
    encoder = Encoder(
        candidate_dictionary(report.dictionary, report.chosen.level, "x"),
        level=report.chosen.level,
        min_size=report.break_even_size,
    )
    frames = [(e.value, e.headers or ()) for e in encoder.encode_batch([(v, None) for v in values])]
    at_level = raw_crossovers(values, frames, producer_codecs(report.batch_level.level))
    assert report.raw_crossover == at_level


def test_the_producer_gets_the_chosen_level_only_where_zstd_and_the_user_left_it_unset() -> None:
    zstd = {"compression.type": "zstd"}
    assert with_batch_level(zstd, 9) == {**zstd, "compression.level": "9"}
    assert with_batch_level(zstd, None) == zstd
    assert with_batch_level({"compression.type": "lz4"}, 9) == {"compression.type": "lz4"}
    mine = {**zstd, "compression.level": "1"}
    assert with_batch_level(mine, 9) == mine
    assert configured_level(with_batch_level(zstd, 9)) == 9
    assert configured_level(zstd) == configured_level({**zstd, "compression.level": -1}) == 3
    assert configured_level({}) is None


def test_one_producer_for_several_topics_takes_the_lowest_level_chosen() -> None:
    assert batch_level([9, None, 6]) == 6
    assert batch_level([None]) is None


def test_the_live_crossover_compresses_both_modes_at_the_producers_level(
    events: list[bytes],
) -> None:
    params = TrainingParams(dict_sizes=(4096,), levels=(3,), timing_runs=1)
    report = train(split_ordered(events, 0.5), params, namespace="x")
    assert report.dictionary is not None and report.chosen is not None
    encoder = Encoder(candidate_dictionary(report.dictionary, 3, "x"), level=3)
    sample = ProducerBatches(producer_zstd())
    for value in events[-1024:]:
        sample.add(None, value, ())
    values = events[-1024:]
    frames = [(e.value, e.headers or ()) for e in encoder.encode_batch([(v, None) for v in values])]
    seen = set()
    for level in (3, 12):
        live = LiveCrossover(lambda: sample, lambda: encoder, lambda _: None, level=level)
        expected = raw_crossovers(values, frames, {"zstd": producer_zstd(level)})["zstd"]
        assert live("zstd") == expected
        seen.add(expected)
    assert len(seen) == 2  # the level moves the crossover: the test tells them apart
