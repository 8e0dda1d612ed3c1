"""The reservoir the relay feeds: bounded in bytes whatever comes in, recent, split by time."""

from __future__ import annotations

import gc
import random
import sys
import tracemalloc
from dataclasses import dataclass

import pytest
import zstandard

from sidecar.bench.events import generate
from sidecar.training.sampling import ENTRY_OVERHEAD, Reservoir
from sidecar.training.split import split_newest


@dataclass(frozen=True, slots=True)
class Rec:
    """A consumed record as the reservoir sees it (a confluent-kafka Message has these)."""

    p: int
    o: int
    v: bytes | None

    def partition(self) -> int:
        return self.p

    def offset(self) -> int:
        return self.o + 0  # a new int object for large offsets, as Message.offset() returns

    def value(self) -> bytes | None:
        return self.v


def batches(values: list[bytes | None], size: int = 500, partitions: int = 4) -> list[list[Rec]]:
    records = [Rec(i % partitions, i // partitions, v) for i, v in enumerate(values)]
    return [records[i : i + size] for i in range(0, len(records), size)]


def test_keeps_every_record_until_min_messages_then_one_in_every() -> None:
    reservoir = Reservoir("t", max_bytes=10**8, every=10, min_messages=1000)
    reservoir.dense = False  # the namespace has a dictionary
    values: list[bytes | None] = [b"x%05d" % i for i in range(11_000)]
    for batch in batches(values):
        reservoir.offer(batch)
    # The first two batches of 500 are kept whole, then the other 10,000 at one in ten.
    assert reservoir.messages == 1000 + 10_000 // 10
    assert reservoir.offered == 11_000


def test_keeps_every_record_while_the_namespace_has_no_dictionary() -> None:
    reservoir = Reservoir("t", max_bytes=10**8, every=10, min_messages=1000)
    for batch in batches([b"x%05d" % i for i in range(11_000)]):
        reservoir.offer(batch)
    assert reservoir.messages == 11_000  # dense: the first dictionary comes as soon as possible


def test_the_stride_start_moves_so_every_batch_position_is_sampled() -> None:
    reservoir = Reservoir("t", max_bytes=10**8, every=7, min_messages=0)
    reservoir.dense = False
    for batch in batches([b"v%d" % i for i in range(70_000)], size=100, partitions=1):
        reservoir.offer(batch)
    positions = {offset % 100 for _, offset, _ in reservoir.snapshot()}
    assert positions == set(range(100))


def test_drops_the_oldest_values_to_stay_within_max_bytes() -> None:
    reservoir = Reservoir("t", max_bytes=20_000, every=1, min_messages=0)
    values: list[bytes | None] = [b"%06d" % i + b"." * 94 for i in range(1000)]
    for batch in batches(values, size=10, partitions=1):
        reservoir.offer(batch)
        assert reservoir.size_bytes <= 20_000
    kept = reservoir.snapshot()
    assert len(kept) == 20_000 // (100 + ENTRY_OVERHEAD)
    assert kept[-1][2] == values[-1]  # the newest is kept, the oldest went first
    assert [o for _, o, _ in kept] == sorted(o for _, o, _ in kept)


def test_tombstones_empty_oversized_and_compressed_values_are_not_kept() -> None:
    reservoir = Reservoir("t", max_bytes=10**6, every=1, min_messages=0, max_value_bytes=1000)
    frame = zstandard.ZstdCompressor().compress(b"hello" * 50)
    values: list[bytes | None] = [None, b"", b"x" * 1001, frame, b"\x1f\x8b gzip", b"kept"]
    reservoir.offer(batches(values, partitions=1)[0])
    assert [v for _, _, v in reservoir.snapshot()] == [b"kept"]


def test_the_trainer_holds_out_the_newest_fifth_of_every_partition_of_a_snapshot() -> None:
    events = list(generate("product_viewed", 4000, seed=3))
    reservoir = Reservoir("orders", max_bytes=10**8, every=1, min_messages=0)
    for batch in batches(list(events)):
        reservoir.offer(batch)
    split = split_newest(reservoir.snapshot(), 0.2)
    # 1,000 records a partition (offsets 0-999): 800-999 of each are held out, in arrival order.
    assert split.span is not None
    assert split.span.train == {p: (0, 799) for p in range(4)}
    assert split.span.heldout == {p: (800, 999) for p in range(4)}
    assert split.heldout == events[3200:]
    assert split.train == events[:3200]


def _held_bytes(reservoir: Reservoir) -> int:
    """What Python holds for the kept entries: the deque, the tuples, offsets and values."""
    entries = reservoir.snapshot()
    held = sys.getsizeof(reservoir._entries)
    for entry in entries:
        held += sys.getsizeof(entry) + sys.getsizeof(entry[1]) + sys.getsizeof(entry[2])
    return held


def test_entry_overhead_covers_what_python_allocates_per_kept_value() -> None:
    reservoir = Reservoir("t", max_bytes=10**9, every=1, min_messages=0)
    values = [bytes(bytearray(b"%09d" % i * 12)) for i in range(20_000)]
    records = [Rec(0, 2**40 + i, v) for i, v in enumerate(values)]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        reservoir.offer(records)
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    payload = sum(map(len, values))  # the values existed before: only bookkeeping is new
    per_entry = (after - before) / len(values)
    assert per_entry + (sys.getsizeof(values[0]) - len(values[0])) <= ENTRY_OVERHEAD
    assert reservoir.size_bytes == payload + len(values) * ENTRY_OVERHEAD


@pytest.mark.slow
def test_memory_stays_under_the_bound_over_a_million_small_and_large_values() -> None:
    """1,000,000 records, 1% of them 8-200 KB: what the reservoir holds stays under max_bytes."""
    bound = 2 * 1024 * 1024
    rng = random.Random(5)
    small = list(generate("product_viewed", 2000, seed=4))
    large = [rng.randbytes(64) * rng.randrange(128, 3200) for _ in range(20)]
    reservoir = Reservoir("t", max_bytes=bound, every=3, min_messages=2000, max_value_bytes=65_536)
    peak_accounted = peak_held = 0
    offset = 0
    for round_ in range(2000):
        # Copies, so every kept value is an object of its own, as from the consumer.
        batch = [
            Rec(i % 6, offset + i, bytes(bytearray(large[round_ % 20] if i == 7 else small[i])))
            for i in range(500)
        ]
        offset += 500
        reservoir.offer(batch)
        peak_accounted = max(peak_accounted, reservoir.size_bytes)
        if round_ % 200 == 199:
            peak_held = max(peak_held, _held_bytes(reservoir))
    assert reservoir.offered == 1_000_000
    assert peak_accounted <= bound
    assert reservoir.size_bytes > bound * 0.9  # it is full, not trivially small
    assert peak_held <= bound, f"reservoir held {peak_held} B, bound {bound} B"
    assert any(len(v) > 8000 for _, _, v in reservoir.snapshot())  # large ones were kept too


def test_rejects_a_bound_too_small_for_one_value() -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        Reservoir("t", max_bytes=ENTRY_OVERHEAD)
