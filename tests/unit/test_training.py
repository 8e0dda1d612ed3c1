"""Training decisions on held-out data: candidates, the choice, break-even, promotion, refit,
and a pick that neither timings nor the machine's load can move."""

from __future__ import annotations

import random
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from sidecar.bench.events import generate
from sidecar.codec import Encoder
from sidecar.dictionaries import Dictionary
from sidecar.dictionaries.model import MIN_DICT_ID
from sidecar.dictionaries.store import DictionaryStore
from sidecar.training.choice import (
    BREAK_EVEN_BYTE_LOSS,
    Measurement,
    TrainingReport,
    affordable_levels,
    break_even_size,
    candidate_dictionary,
    choose,
    clearly_better,
    train,
    train_dictionary,
)
from sidecar.training.cost import encode_cost_ns
from sidecar.training.crossover import crossover_split
from sidecar.training.params import Decision, TrainingParams
from sidecar.training.promotion import dictionary_from_report, promote
from sidecar.training.split import TrainingSet, split_newest, split_ordered

# Small grid and no speed budget: these tests are about decisions, not about this machine's speed.
FAST = TrainingParams(
    dict_sizes=(4096, 16384),
    levels=(1, 3),
    min_samples=200,
    budget_us_per_message=0.0,
    budget_mb_per_s=0.0,
    timing_runs=1,
)


@pytest.fixture(scope="module")
def samples() -> TrainingSet:
    return split_ordered(generate("product_viewed", 5000, seed=3), 0.4)


def test_too_few_samples_fail_with_a_reason_and_no_crash() -> None:
    report = train(split_ordered([b'{"a":1}'] * 50, 0.5), FAST, namespace="orders")
    assert report.decision is Decision.FAILED
    assert "too few usable samples: 25 training + 25 held-out, at least 200" in report.reason
    assert report.dictionary is None


def test_identical_samples_do_not_crash_training() -> None:
    same = [b'{"event":"page_view","page":"/home","ok":true}'] * 2000
    report = train(split_ordered(same, 0.5), FAST, namespace="orders")
    assert report.decision in (Decision.FAILED, Decision.REJECTED, Decision.PROMOTED)
    assert report.reason


def test_incompressible_samples_are_not_promoted() -> None:
    rng = random.Random(5)
    noise = [rng.randbytes(rng.randrange(80, 200)) for _ in range(3000)]
    report = train(split_ordered(noise, 0.5), FAST, namespace="orders")
    assert report.decision is not Decision.PROMOTED
    assert report.reason


def test_a_first_dictionary_is_promoted_and_beats_no_dictionary(samples: TrainingSet) -> None:
    report = train(samples, FAST, namespace="orders")
    assert report.decision is Decision.PROMOTED, report.reason
    assert report.chosen is not None and report.nodict is not None
    assert report.chosen.ratio > 1.5 * report.nodict.ratio
    assert report.chosen.raw_bytes == samples.heldout_bytes  # measured on held-out values only
    assert len(report.candidates) == 4
    assert report.dictionary is not None


def test_the_report_says_where_the_two_parts_lie_and_how_far_apart() -> None:
    # Lines 1-1000 of a file: 801-1000 are the newest fifth, held out.
    lines = list(generate("product_viewed", 1000, seed=3))
    samples = split_newest([(0, n, v) for n, v in enumerate(lines, 1)], 0.2, unit="line")
    summary = train(samples, FAST, namespace="orders").summary()
    assert summary["split_unit"] == "line"
    assert (summary["train_range"], summary["heldout_range"]) == ("1-800", "801-1000")
    assert summary["heldout_gap"] == 0


def test_the_promoted_dictionary_is_refit_on_all_but_the_crossover_values_and_the_figures_stay(
    samples: TrainingSet,
) -> None:
    refit = train(samples, FAST, namespace="orders")
    as_chosen = train(samples, replace(FAST, refit=False), namespace="orders")
    assert refit.chosen is not None and as_chosen.chosen is not None
    assert refit.refit and not as_chosen.refit
    # Past the magic number and the dictionary id (the store gives each its own).
    size = refit.chosen.dict_size
    assert refit.dictionary is not None and as_chosen.dictionary is not None
    # Every sample but the newest held-out ones, which the crossover is measured on.
    older, newest = crossover_split(samples.heldout)
    assert refit.crossover_count == len(newest) > 0
    assert refit.dictionary[8:] == train_dictionary(size, samples.train + older)[8:]
    assert as_chosen.dictionary[8:] == train_dictionary(size, samples.train)[8:]
    # The held-out figures are the dictionary's as chosen (it did not see the held-out part),
    # whichever is stored; the report says which.
    assert _untimed(refit.chosen) == _untimed(as_chosen.chosen)
    assert refit.summary()["heldout_ratio_of"] == "chosen_before_refit"
    assert as_chosen.summary()["heldout_ratio_of"] == "stored"


def _untimed(m: Measurement) -> Measurement:
    """`m` without its encode timings (reported only; they differ from run to run)."""
    return replace(m, encode_ns_per_message=0.0, encode_ns_min=0.0, encode_ns_max=0.0)


def test_a_rejected_run_is_not_refit(samples: TrainingSet, store: DictionaryStore) -> None:
    champion = _store_report(store, train(samples, FAST, namespace="orders"))
    again = train(samples, FAST, namespace="orders", champion=champion)
    assert again.decision is Decision.REJECTED
    assert not again.refit


def test_training_is_deterministic_for_the_same_samples(samples: TrainingSet) -> None:
    first = train(samples, FAST, namespace="orders")
    second = train(samples, FAST, namespace="orders")
    assert first.dictionary == second.dictionary
    assert first.chosen is not None and second.chosen is not None
    assert (first.chosen.dict_size, first.chosen.level, first.chosen.output_bytes) == (
        second.chosen.dict_size,
        second.chosen.level,
        second.chosen.output_bytes,
    )


def test_the_pick_is_the_smallest_dictionary_at_the_fastest_level_no_other_clearly_beats(
    samples: TrainingSet,
) -> None:
    report = train(samples, FAST, namespace="orders")
    assert report.chosen is not None
    ordered = sorted(report.candidates, key=lambda c: (c.dict_size, c.level))
    pick = ordered[0]
    for c in ordered[1:]:
        if clearly_better(pick.costs, c.costs):
            pick = c
    assert (report.chosen.dict_size, report.chosen.level) == (pick.dict_size, pick.level)


def _candidate(
    size: int, level: int, costs: list[int], cost_ns: float, budget: float
) -> Measurement:
    """A measured candidate: `costs` per message, `cost_ns` the model's estimate."""
    return Measurement(
        label=f"dict {size}",
        dict_size=size,
        dict_bytes=size,
        level=level,
        raw_bytes=1000 * len(costs),
        output_bytes=sum(costs),
        compressed_share=1.0,
        cost_ns=cost_ns,
        meets_budget=not budget or cost_ns <= budget,
        costs=tuple(costs),
    )


def test_a_larger_dictionary_wins_only_by_more_than_the_noise_of_its_gain() -> None:
    # 40 messages, newest last. The 16 KiB one saves 1.8 % overall, but all of it in the oldest
    # chunk and nothing since: within its noise, the 4 KiB one stays. The 64 KiB one saves 3 %
    # on every chunk alike: clearly better.
    small = [100] * 40
    uneven = [90] * 8 + [100] * 24 + [101] * 8  # -10 % on the oldest fifth, +1 % on the newest
    steady = [97] * 40
    fast = 1000.0
    assert not clearly_better(small, uneven)
    assert clearly_better(small, steady)
    pick = choose([_candidate(4096, 3, small, fast, 0), _candidate(16384, 3, uneven, fast, 0)], 0)
    assert pick.dict_size == 4096
    both = [_candidate(4096, 3, small, fast, 0), _candidate(65536, 3, steady, fast, 0)]
    assert choose(both, 0).dict_size == 65536


def test_ties_go_to_the_smaller_dictionary_and_the_faster_level() -> None:
    same = [100] * 40
    candidates = [
        _candidate(16384, 3, same, 1000.0, 0),
        _candidate(4096, 9, same, 3000.0, 0),
        _candidate(4096, 1, same, 900.0, 0),
    ]
    pick = choose(candidates, 0)
    assert (pick.dict_size, pick.level) == (4096, 1)


def test_too_few_values_never_show_a_larger_dictionary_clearly_better() -> None:
    assert not clearly_better([100, 100, 100], [50, 50, 50])
    assert clearly_better([100] * 4, [50] * 4)


def test_the_budget_judges_the_cost_model_not_a_timing() -> None:
    # At 100-byte messages the default budget is 5 µs: levels up to 9 fit by the model.
    budget = TrainingParams().budget_ns(100)
    assert affordable_levels((-1, 1, 3, 6, 9, 12), 100, budget) == [-1, 1, 3, 6, 9]
    assert affordable_levels((-1, 1, 3, 6, 9, 12), 1000, TrainingParams().budget_ns(1000)) == [
        -1,
        1,
        3,
    ]
    assert affordable_levels((1, 12), 100, 0.0) == [1, 12]  # no budget


def test_the_cost_model_never_gets_cheaper_with_a_slower_level_or_a_larger_message() -> None:
    for size in (10, 100, 1000, 10_000):
        costs = [encode_cost_ns(level, size) for level in range(-7, 23) if level]
        assert costs == sorted(costs)
        assert encode_cost_ns(3, size) < encode_cost_ns(3, size * 2)
    assert encode_cost_ns(0, 100) == encode_cost_ns(3, 100)  # zstd's default level
    assert encode_cost_ns(-50, 100) == encode_cost_ns(-7, 100)
    assert encode_cost_ns(30, 100) == encode_cost_ns(22, 100)


def test_an_unreachable_budget_takes_the_best_it_can_afford_and_says_so(
    samples: TrainingSet,
) -> None:
    tight = replace(FAST, budget_us_per_message=0.001, budget_mb_per_s=1e9)
    report = train(samples, tight, namespace="orders")
    assert report.chosen is not None and not report.chosen.meets_budget
    assert "no level fits the budget" in report.reason
    best = choose(report.candidates, report.budget_ns)
    assert (report.chosen.dict_size, report.chosen.level) == (best.dict_size, best.level)


def test_when_nothing_fits_the_pick_is_made_within_the_least_relaxed_budget() -> None:
    # Budget 1,000 ns: nothing fits; within 2x (2,000 ns) two candidates do, and the one that
    # stores clearly fewer bytes wins, not the fastest; the 10,000 ns one is not affordable.
    candidates = [
        _candidate(4096, 1, [60] * 10, 1500.0, 1000.0),
        _candidate(4096, 3, [50] * 10, 1900.0, 1000.0),
        _candidate(16384, 9, [30] * 10, 10_000.0, 1000.0),
    ]
    chosen = choose(candidates, 1000.0)
    assert (chosen.dict_size, chosen.level) == (4096, 3)


def test_levels_over_the_budget_are_not_measured(samples: TrainingSet) -> None:
    mean = samples.heldout_bytes / len(samples.heldout)
    # Between the model's cost of level 3 and that of level 6 at this size.
    budget_ns = (encode_cost_ns(3, mean) + encode_cost_ns(6, mean)) / 2
    params = replace(FAST, levels=(1, 3, 6), budget_us_per_message=budget_ns / 1000)
    report = train(samples, replace(params, budget_mb_per_s=0.0), namespace="orders")
    assert {(c.dict_size, c.level) for c in report.candidates} == {
        (size, level) for size in FAST.dict_sizes for level in (1, 3)
    }
    assert all(c.meets_budget for c in report.candidates)


def test_when_no_level_fits_the_levels_within_the_least_relaxed_budget_are_chosen_from(
    samples: TrainingSet,
) -> None:
    # Every level is over the budget and levels 1 and 3 within twice it; level 6 is not.
    mean = samples.heldout_bytes / len(samples.heldout)
    budget_ns = encode_cost_ns(3, mean) * 0.6
    assert encode_cost_ns(1, mean) > budget_ns and encode_cost_ns(6, mean) > 2 * budget_ns
    params = replace(
        FAST, levels=(1, 3, 6), budget_us_per_message=budget_ns / 1000, budget_mb_per_s=0.0
    )
    report = train(samples, params, namespace="orders")
    assert {(c.dict_size, c.level) for c in report.candidates} == {
        (size, level) for size in FAST.dict_sizes for level in (1, 3)
    }
    assert not any(c.meets_budget for c in report.candidates)
    assert report.chosen is not None
    best = choose(report.candidates, report.budget_ns)
    assert (report.chosen.dict_size, report.chosen.level) == (best.dict_size, best.level)


def _load_clock(seed: int) -> Iterator[float]:
    """Factors a busy machine may stretch a measured CPU time by (0.5x to 8x), seeded."""
    rng = random.Random(seed)
    while True:
        yield rng.uniform(0.5, 8.0)


def test_no_timing_can_move_the_pick(monkeypatch: pytest.MonkeyPatch) -> None:
    # The machine's load stretches every timed span by another factor, as other work, cache
    # misses and a busy hypervisor do; five runs under five different loads pick alike. The
    # default budget (5 µs at ~110 B) is about what levels 6 and 9 cost.
    samples = split_ordered(generate("product_viewed", 1000, seed=11), 0.8)
    params = replace(FAST, levels=(1, 3, 6, 9), budget_us_per_message=4.0, budget_mb_per_s=100.0)
    picks = set()
    real = time.thread_time_ns
    for seed in range(5):
        factors = _load_clock(seed)
        state = {"real": real(), "seen": real()}

        def stretched(factors: Iterator[float] = factors, state: dict[str, int] = state) -> int:
            now = real()
            state["seen"] += int((now - state["real"]) * next(factors))
            state["real"] = now
            return state["seen"]

        monkeypatch.setattr(time, "thread_time_ns", stretched)
        report = train(samples, params, namespace="orders")
        assert report.chosen is not None
        picks.add((report.dictionary, report.chosen.dict_size, report.chosen.level))
    assert len(picks) == 1


def test_the_budget_grows_with_the_message_size() -> None:
    params = TrainingParams(budget_us_per_message=2.5, budget_mb_per_s=100.0)
    assert params.budget_ns(100) == pytest.approx(3500.0)
    assert params.budget_ns(5600) == pytest.approx(58_500.0)
    assert TrainingParams(budget_us_per_message=0.0, budget_mb_per_s=0.0).budget_ns(100) == 0.0


@pytest.mark.slow
def test_a_challenger_within_the_margin_of_the_champion_is_rejected(
    samples: TrainingSet, store: DictionaryStore
) -> None:
    champion = _store_report(store, train(samples, FAST, namespace="orders"))
    again = train(samples, FAST, namespace="orders", champion=champion)
    assert again.decision is Decision.REJECTED
    assert f"does not beat champion {champion.id}" in again.reason
    assert again.champion is not None


@pytest.mark.slow
def test_a_clearly_better_challenger_replaces_the_champion(store: DictionaryStore) -> None:
    # The champion learned the old schema; after the drift a new dictionary wins by far.
    drifted = list(generate("product_viewed", 12000, seed=4, drift_at=4000))
    old = _store_report(store, train(split_ordered(drifted[:4000], 0.5), FAST, namespace="orders"))
    report = train(split_ordered(drifted[4000:], 0.5), FAST, namespace="orders", champion=old)
    assert report.decision is Decision.PROMOTED, report.reason
    assert report.chosen is not None and report.champion is not None
    assert report.chosen.output_bytes < report.champion.output_bytes * 0.98


def test_the_break_even_size_skips_what_would_have_saved_almost_nothing() -> None:
    # Values below 40 B do not shrink (they cost their size); larger ones save a quarter.
    sizes = list(range(8, 400))
    costs = [s if s < 40 else s - s // 4 for s in sizes]
    threshold = break_even_size(sizes, costs)
    assert threshold >= 40  # nothing is lost by skipping what never shrinks
    skipped = sum(s - c for s, c in zip(sizes, costs, strict=True) if s < threshold)
    assert skipped <= BREAK_EVEN_BYTE_LOSS * sum(costs)
    assert break_even_size(list(range(10, 50)), list(range(10, 50))) == 50  # nothing shrinks
    assert break_even_size([100, 100], [40, 40]) == 0
    assert break_even_size([], []) == 0


def test_one_large_outlier_that_does_not_shrink_cannot_stop_every_value_from_compressing() -> None:
    sizes = [100] * 1000 + [5000]
    costs = [50] * 1000 + [5000]
    assert break_even_size(sizes, costs) == 0


@pytest.mark.slow
def test_the_held_out_ratio_is_what_the_encoder_does_with_the_break_even_size(
    samples: TrainingSet,
) -> None:
    # The dictionary as chosen: a refit one saw the held-out values.
    report = train(samples, replace(FAST, refit=False), namespace="orders")
    assert report.chosen is not None and report.dictionary is not None
    dictionary = dictionary_from_report(
        report, dict_id=MIN_DICT_ID, version=1, window="t", parent_id=None
    )
    encoded = Encoder(dictionary).encode_batch([(v, None) for v in samples.heldout])
    assert sum(e.output_bytes for e in encoded) == report.chosen.output_bytes


def test_a_few_hundred_log_lines_train_a_dictionary_worth_having() -> None:
    lines = [
        f"2026-12-0{1 + i % 9} 0{i % 10}:{i % 60:02d}:{(7 * i) % 60:02d} status "
        f"{('unpacked', 'half-configured', 'installed')[i % 3]} lib{('ssl', 'zstd', 'curl')[i % 3]}"
        f"{i % 7}:amd64 {i % 5}.{i % 11}.{i % 4}-{i % 3}+deb12u{i % 9}".encode()
        for i in range(400)
    ]
    report = train(split_ordered(lines, 0.2), replace(FAST, min_samples=200), namespace="dpkg")
    assert report.decision is Decision.PROMOTED, report.reason
    assert report.chosen is not None and report.nodict is not None
    assert report.chosen.ratio > 1.5 * report.nodict.ratio


def test_a_held_out_part_too_small_to_judge_is_said_so() -> None:
    # A fixed random template that only a dictionary can know: 2 of the 12 held-out values
    # carry it, the other 10 are noise. The gain is real but too thin to trust on 12 values.
    rng = random.Random(9)
    template = rng.randbytes(120)
    train_values = [template + rng.randbytes(20) for _ in range(300)]
    heldout = [template + rng.randbytes(20) if i < 2 else rng.randbytes(140) for i in range(12)]
    report = train(TrainingSet(train_values, heldout), replace(FAST, min_heldout=10), namespace="t")
    assert report.decision is Decision.REJECTED
    assert "too small or too varied to judge" in report.reason


def test_no_dictionary_is_promoted_on_fewer_held_out_messages_than_the_minimum() -> None:
    # 50 lines of one event, as `train --input` on a 50-line file: 10 held out (20 %, at
    # least MIN_HELDOUT), every one of them a clear win for the dictionary.
    lines = [
        b'{"event": "viewed", "product": %d, "session": "s-%d"}' % (i, i % 7) for i in range(50)
    ]
    samples = TrainingSet(lines[:40], lines[40:])
    report = train(samples, replace(FAST, min_samples=20), namespace="viewed")
    assert report.decision is Decision.REJECTED
    assert "10 held-out messages are too few" in report.reason
    assert (
        f"at least {FAST.min_heldout}" in report.reason
        and "ZDICT_TRAINING__MIN_HELDOUT" in report.reason
    )
    assert report.chosen is not None  # measured all the same, for the report
    allowed = train(samples, replace(FAST, min_samples=20, min_heldout=10), namespace="viewed")
    assert allowed.decision is Decision.PROMOTED, allowed.reason


@pytest.mark.slow
def test_larger_dictionaries_are_tried_when_the_sample_can_fill_them() -> None:
    # 332 samples of ~140 B (46 KB): a 32 KiB dictionary is measured, not ruled out.
    values = list(generate("customer", 1660, seed=2))[:1660]
    samples = split_ordered([v[:140] for v in values], 0.2)
    sizes = replace(FAST, dict_sizes=(4096, 16384, 32768))
    report = train(samples, sizes, namespace="t")
    assert {c.dict_size for c in report.candidates} == {4096, 16384, 32768}


def test_the_report_has_every_number_as_json(samples: TrainingSet) -> None:
    data = train(samples, FAST, namespace="orders").to_dict()
    assert data["decision"] == "promoted"
    assert data["chosen"]["ratio"] > 1.0
    assert {"train", "heldout", "nodict", "break_even_size", "candidates"} <= data.keys()


def _store_report(store: DictionaryStore, report: TrainingReport) -> Dictionary:
    return promote(store, None, report, window="test", parent_id=None)


@pytest.mark.slow
def test_scrubbed_fields_never_reach_the_dictionary_but_the_ratio_is_measured_on_real_values() -> (
    None
):
    secret = b'"email":"jane.doe@example.org"'
    values = [v[:-1] + b"," + secret + b"}" for v in generate("product_viewed", 3000, seed=5)]
    samples = split_ordered(values, 0.5)
    plain = train(samples, FAST, namespace="orders")
    scrub = replace(FAST, scrub=(r'"email":"[^"]*"',))
    scrubbed = train(samples, scrub, namespace="orders")
    assert plain.dictionary is not None and secret in plain.dictionary
    assert scrubbed.dictionary is not None and secret not in scrubbed.dictionary
    assert b"jane.doe" not in scrubbed.dictionary
    # Held-out values keep the field, so the ratio is what the relay will see on them.
    assert scrubbed.heldout_bytes == plain.heldout_bytes
    assert scrubbed.chosen is not None and plain.chosen is not None
    assert scrubbed.chosen.ratio < plain.chosen.ratio


#: Two processes that keep the machine busy while they live (a minute at most).
_BUSY = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end:\n    pass\n"


@pytest.mark.slow
def test_the_same_sample_trained_five_times_beside_two_busy_loops_gives_the_same_dictionary() -> (
    None
):
    # ~500-byte orders, on which every slower level stores fewer bytes; the CPU budget is put
    # where level 6 is timed to cost on this machine, where a verdict on timings is a coin toss
    # (three runs of this test against timed verdicts: 3 of 3 picked differently within the 5).
    samples = split_ordered(generate("order", 1000, seed=11), 0.8)
    dictionary = candidate_dictionary(train_dictionary(16384, samples.train), 6, "orders")
    encoder = Encoder(dictionary, level=6)
    records: list[tuple[bytes | None, None]] = [(v, None) for v in samples.heldout]
    timings = []
    for _ in range(7):
        start = time.thread_time_ns()
        encoder.encode_batch(records)
        timings.append((time.thread_time_ns() - start) / len(records))
    params = TrainingParams(
        dict_sizes=(4096, 16384),
        budget_us_per_message=statistics.median(timings) / 1000,
        budget_mb_per_s=0.0,
    )
    loops = [subprocess.Popen([sys.executable, "-c", _BUSY]) for _ in range(2)]
    try:
        picks = set()
        for _ in range(5):
            report = train(samples, params, namespace="orders")
            assert report.chosen is not None
            picks.add((report.dictionary, report.chosen.dict_size, report.chosen.level))
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    assert len(picks) == 1
