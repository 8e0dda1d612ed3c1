"""Training decisions on held-out data: splits, candidates, break-even, promotion."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from sidecar.bench.events import generate
from sidecar.dictionaries import Dictionary, DictionaryStore
from sidecar.dictionaries.lifecycle import promote
from sidecar.dictionaries.training import (
    Decision,
    TrainingParams,
    TrainingReport,
    TrainingSet,
    break_even_size,
    heldout_by_key,
    split_by_key,
    split_ordered,
    train,
)

# Small grid and no speed budget: these tests are about decisions, not about this machine's speed.
FAST = TrainingParams(
    dict_sizes=(4096, 16384), levels=(1, 3), min_samples=200, min_encode_rate=0.0, timing_runs=1
)


@pytest.fixture(scope="module")
def samples() -> TrainingSet:
    return split_ordered(generate("product_viewed", 5000, seed=3), 0.4)


def test_the_hash_split_is_deterministic_and_near_the_requested_fraction() -> None:
    keys = [f"orders/{p}/{o}".encode() for p in range(3) for o in range(4000)]
    first = [heldout_by_key(k, 0.2) for k in keys]
    assert first == [heldout_by_key(k, 0.2) for k in keys]
    assert 0.18 < sum(first) / len(first) < 0.22


def test_held_out_values_never_enter_training() -> None:
    records = [(str(i).encode(), f"value-{i}".encode()) for i in range(5000)]
    split = split_by_key(records, 0.3)
    assert not set(split.train) & set(split.heldout)
    assert len(split.train) + len(split.heldout) == 5000


def test_unusable_values_are_left_out_of_both_sides() -> None:
    split = split_ordered([b"", b"\x28\xb5\x2f\xfdxxxx", b"ok-1", b"ok-2"], 0.5)
    assert split.train + split.heldout == [b"ok-1", b"ok-2"]


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


def test_the_smallest_output_within_the_speed_budget_is_chosen(samples: TrainingSet) -> None:
    report = train(samples, FAST, namespace="orders")
    assert report.chosen is not None
    best = min(report.candidates, key=lambda c: c.output_bytes)
    assert (report.chosen.dict_size, report.chosen.level) == (best.dict_size, best.level)


def test_an_unreachable_speed_budget_takes_the_fastest_and_says_so(samples: TrainingSet) -> None:
    report = train(samples, replace(FAST, min_encode_rate=1e12), namespace="orders")
    assert report.chosen is not None and not report.chosen.meets_budget
    assert "no candidate reached" in report.reason


def test_a_challenger_within_the_margin_of_the_champion_is_rejected(
    samples: TrainingSet, store: DictionaryStore
) -> None:
    champion = _store_report(store, train(samples, FAST, namespace="orders"))
    again = train(samples, FAST, namespace="orders", champion=champion)
    assert again.decision is Decision.REJECTED
    assert f"does not beat champion {champion.id}" in again.reason
    assert again.champion is not None


def test_a_clearly_better_challenger_replaces_the_champion(store: DictionaryStore) -> None:
    # The champion learned the old schema; after the drift a new dictionary wins by far.
    drifted = list(generate("product_viewed", 12000, seed=4, drift_at=4000))
    old = _store_report(store, train(split_ordered(drifted[:4000], 0.5), FAST, namespace="orders"))
    report = train(split_ordered(drifted[4000:], 0.5), FAST, namespace="orders", champion=old)
    assert report.decision is Decision.PROMOTED, report.reason
    assert report.chosen is not None and report.champion is not None
    assert report.chosen.output_bytes < report.champion.output_bytes * 0.98


def test_the_break_even_size_is_where_most_messages_start_to_shrink() -> None:
    outcomes = [(size, size >= 40) for size in range(8, 200)]
    assert break_even_size(outcomes) == 32  # half of the 32-47 bucket shrinks, none of 16-31
    assert break_even_size([(s, False) for s in range(10, 50)]) == 50
    assert break_even_size([(s, True) for s in range(10, 50)]) == 0
    assert break_even_size([]) == 0


def test_the_report_has_every_number_as_json(samples: TrainingSet) -> None:
    data = train(samples, FAST, namespace="orders").to_dict()
    assert data["decision"] == "promoted"
    assert data["chosen"]["ratio"] > 1.0
    assert {"train", "heldout", "nodict", "break_even_size", "candidates"} <= data.keys()


def _store_report(store: DictionaryStore, report: TrainingReport) -> Dictionary:
    return promote(store, None, report, window="test", parent_id=None)


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
