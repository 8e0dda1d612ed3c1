"""A sample split in two: the newest slice of every partition held out, and where the parts lie."""

from __future__ import annotations

import pytest

from sidecar.training.split import Span, split_newest, split_ordered


def test_the_newest_fifth_of_every_partition_is_held_out_in_arrival_order() -> None:
    # Two partitions sampled one record in ten, interleaved as they arrived.
    entries = [(p, 10 * i, f"p{p}-{i}".encode()) for i in range(50) for p in (0, 1)]
    split = split_newest(entries, 0.2)
    assert split.heldout == [f"p{p}-{i}".encode() for i in range(40, 50) for p in (0, 1)]
    assert split.train == [f"p{p}-{i}".encode() for i in range(40) for p in (0, 1)]
    assert split.span == Span("offset", {0: (0, 390), 1: (0, 390)}, {0: (400, 490), 1: (400, 490)})
    assert split.span.gap == 9  # the sampling stride: nine records between the two parts


def test_held_out_values_never_enter_training_whatever_the_order_they_came_in() -> None:
    entries = [(i % 3, i // 3, f"value-{i}".encode()) for i in range(5000)]
    split = split_newest(list(reversed(entries)), 0.3)
    assert not set(split.train) & set(split.heldout)
    assert len(split.train) + len(split.heldout) == 5000
    assert split.span is not None
    for p in range(3):  # every held-out value is newer than every training one
        assert split.span.heldout[p][0] > split.span.train[p][1]


def test_a_small_sample_holds_out_enough_values_to_judge() -> None:
    # 32 lines: a fifth would be 6; 10 are held out (the refit trains on the older 5 too).
    split = split_newest([(0, n, b"line %d" % n) for n in range(1, 33)], 0.2, unit="line")
    assert (len(split.train), len(split.heldout)) == (22, 10)
    tiny = split_newest([(0, n, b"line %d" % n) for n in range(1, 13)], 0.2, unit="line")
    assert (len(tiny.train), len(tiny.heldout)) == (6, 6)  # never more than half


def test_a_partition_with_one_value_only_trains() -> None:
    split = split_newest([(0, 5, b"alone"), *[(1, i, b"x%d" % i) for i in range(10)]], 0.2)
    assert b"alone" in split.train
    assert split.span is not None and 0 not in split.span.heldout


def test_unusable_values_are_left_out_of_both_sides() -> None:
    split = split_ordered([b"", b"\x28\xb5\x2f\xfdxxxx", b"ok-1", b"ok-2"], 0.5)
    assert split.train + split.heldout == [b"ok-1", b"ok-2"]
    # Lines are counted in the input, unusable ones included.
    assert split.span == Span("line", {0: (3, 3)}, {0: (4, 4)})


def test_the_report_fields_and_sentence_say_where_the_parts_lie() -> None:
    split = split_ordered([b"line %d" % i for i in range(1000)], 0.8)
    assert split.span is not None
    assert split.span.fields() == {
        "split_unit": "line",
        "train_range": "1-800",
        "heldout_range": "801-1000",
        "heldout_gap": 0,
    }
    assert split.span.sentence() == (
        "held out: the newest lines 801-1000; trained on lines 1-800 (adjacent)"
    )
    two = Span("offset", {0: (0, 90), 1: (5, 95)}, {0: (100, 120), 1: (110, 130)})
    assert two.fields()["heldout_range"] == "p0 100-120, p1 110-130"
    assert two.gap == 9


def test_a_fraction_outside_zero_and_one_is_refused() -> None:
    with pytest.raises(ValueError, match="heldout_fraction"):
        split_newest([(0, 1, b"x")], 1.0)
    with pytest.raises(ValueError, match="train_fraction"):
        split_ordered([b"x"], 0.0)
