"""The event loop shared fairly (`produce.Rewriting`, `connection`): a Produce request is
rewritten a slice at a time, byte for byte as all at once, while other connections are served
between the slices and the same connection's later requests wait their turn; a request the
proxy refuses (an acks=0 Produce) closes its connection only after the answers due before it.
Clocks are counters, never the wall's."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from sidecar.codec import Encoder
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import ProtocolError
from sidecar.proxy.batches import STEP_RECORDS
from sidecar.proxy.frames import RequestHeader, produce_acks, read_request_header
from sidecar.proxy.produce import ENCODE_SLICE, Outcome, Rewriting
from tests.record_batches import encode_batch
from tests.unit.dictionaries import AddDictionary
from tests.unit.test_forward_connection import (
    _bootstrap,
    _closed,
    _correlation,
    _list_groups,
    _list_groups_answer,
    _produce,
    _read_frame,
    running,
)
from tests.unit.test_forward_produce import HEADER_KEY, Setup, _answer, _records
from tests.unit.test_forward_produce import _produce as _produce_request


class _Ticks:
    """A clock that moves one second each time it is read."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


@pytest.fixture
def encoder(store: DictionaryStore, add_dictionary: AddDictionary) -> Encoder:
    add_dictionary("orders")
    return Encoder.from_store(store, "orders", min_size=16, header_key=HEADER_KEY)


def _request(events: list[bytes], per_batch: int) -> bytes:
    """A Produce v9 request of one batch of `per_batch` records to each of two partitions (a
    broker takes one batch per partition)."""
    values = (events * (per_batch // len(events) + 1))[:per_batch]
    return _produce_request(
        9,
        {
            "orders": [
                (0, encode_batch(_records(values))),
                (1, encode_batch(_records(values, start=per_batch))),
            ]
        },
    )


def _run(rewriting: Rewriting) -> tuple[Outcome, int]:
    """The outcome of `rewriting` run one step a slice (the clock moves a second a read), and
    the number of slices."""
    slices = 0
    outcome: Outcome | None = None
    while outcome is None:
        outcome = rewriting.run(0.5)
        slices += 1
    return outcome, slices


def test_a_large_request_is_rewritten_in_slices_as_it_is_all_at_once(
    encoder: Encoder, events: list[bytes]
) -> None:
    per_batch = 2 * STEP_RECORDS + 100
    frame = _request(events, per_batch)
    first, setup = Setup(encoder), Setup(encoder)
    # Each batch written as frames (compared, the second batch, of the size the first was
    # compared at, would be written the way that won, its frames not written).
    first.rewriter.compare_batches = setup.rewriter.compare_batches = False
    whole = first.rewrite(frame)
    setup.rewriter.clock = _Ticks()
    outcome, slices = _run(setup.rewriter.start(*_split(frame)))
    # Per partition 3 steps read and 3 written; the two partitions' values 5 encoded.
    assert slices >= 2 * 3 + 5 + 2 * 3
    assert outcome.frame == whole.frame, "the same bytes as rewritten all at once"
    assert 2 * per_batch > ENCODE_SLICE


def test_a_request_refused_in_a_later_slice_is_answered_as_all_at_once(
    encoder: Encoder, events: list[bytes]
) -> None:
    frame = bytearray(_request(events, 2 * STEP_RECORDS + 100))
    frame[-4] ^= 1  # the last byte of the last batch (tagged fields follow): its CRC fails
    setup = Setup(encoder)
    setup.rewriter.clock = _Ticks()
    outcome, slices = _run(setup.rewriter.start(*_split(bytes(frame))))
    assert slices >= 3, "partition 0 was read in steps before partition 1 was refused"
    answer = _answer(outcome, 9)
    assert answer[("orders", 1)][0] == ErrorCode.corrupt_message
    assert answer[("orders", 0)][0] == ErrorCode.request_timed_out


def _split(frame: bytes) -> tuple[bytes, RequestHeader, bool]:
    """What `ProduceRewriter.start` takes for the Produce v9 request `frame`."""
    body = frame[4:]
    return body, read_request_header(body, 2), True


class _Steps:
    """A rewriting that takes `slices` runs, logging each; then forwards its frame, or gives
    `answer` in its place."""

    def __init__(
        self, frame: bytes, acks: int, slices: int, log: list[str], answer: bytes | None
    ) -> None:
        self.frame, self.acks, self.left, self.log = frame, acks, slices, log
        self.answer = answer

    def run(self, _seconds: float) -> Outcome | None:
        self.left -= 1
        self.log.append("slice")
        if self.left:
            return None
        if self.answer is not None:
            return Outcome(self.acks, answer=self.answer)
        return Outcome(self.acks, frame=struct.pack(">i", len(self.frame)) + self.frame)


class _SlicedRewriter:
    """Stands for a ProduceRewriter whose every request takes `slices` slices; `answering`:
    each is then answered by the proxy (as a refused one with acks=1 is)."""

    def __init__(self, slices: int, *, answering: bool = False) -> None:
        self.slices = slices
        self.answering = answering
        self.log: list[str] = []

    def start(self, frame: bytes, header: RequestHeader, flexible: bool) -> _Steps:
        acks = produce_acks(frame, header, flexible)
        answer = _list_groups_answer(b"\0\0\0\0" + frame[4:8]) if self.answering else None
        return _Steps(frame, acks, self.slices, self.log, answer)


def _answer_all(frame: bytes) -> bytes | None:
    """Upstream: ListGroups and Produce answered (a body the proxy streams as it is)."""
    return _list_groups_answer(frame)


def test_other_connections_are_served_between_the_slices_of_a_produce_request() -> None:
    rewriter = _SlicedRewriter(slices=400)

    async def main() -> None:
        async with running(_answer_all, produce=rewriter) as (listeners, upstream, _registry):
            producer, producer_writer = await asyncio.open_connection(*_bootstrap(listeners))
            other, other_writer = await asyncio.open_connection(*_bootstrap(listeners))
            producer_writer.write(_produce(1, 1) + _list_groups(2))
            await producer_writer.drain()
            while not rewriter.log:
                await asyncio.sleep(0)
            other_writer.write(_list_groups(3))
            await other_writer.drain()
            assert _correlation(b"\0\0\0\0" + await _read_frame(other)) == 3
            rewriter.log.append("other answered")
            got = [_correlation(b"\0\0\0\0" + await _read_frame(producer)) for _ in range(2)]
            assert got == [1, 2], "the producer's answers in request order"
            at = rewriter.log.index("other answered")
            assert 0 < at < 400, "answered while the Produce request was still being rewritten"
            assert [struct.unpack_from(">h", f)[0] for f in upstream.frames] == [16, 0, 16]
            assert listeners.budget.used == 0
            producer_writer.close()
            other_writer.close()

    asyncio.run(main())


class _RefusingRewriter:
    """Stands for a ProduceRewriter refusing every request with acks=0 (as it does)."""

    def start(self, *_args: object) -> Rewriting:
        def steps() -> Iterator[Outcome | None]:
            raise ProtocolError("a Produce request with acks=0 was refused (test)")
            yield None

        return Rewriting(steps(), lambda: 0.0)


def test_a_refused_acks_0_produce_closes_its_connection_after_the_answers_due_before_it() -> None:
    async def main() -> None:
        async with running(_answer_all, produce=_RefusingRewriter()) as (listeners, upstream, _r):
            reader, writer = await asyncio.open_connection(*_bootstrap(listeners))
            earlier = b"".join(_list_groups(i) for i in range(1, 25))
            writer.write(earlier + _produce(0, 25) + _list_groups(26))
            await writer.drain()
            got = [_correlation(b"\0\0\0\0" + await _read_frame(reader)) for _ in range(24)]
            assert got == list(range(1, 25)), "every answer due before the refusal"
            assert await _closed(reader)
            assert len(upstream.frames) == 24, "nothing after the refused request forwarded"
            assert listeners.budget.used == 0
            writer.close()

    asyncio.run(main())


@pytest.mark.parametrize("slices", [1, 3])
def test_a_produce_answered_by_the_proxy_keeps_its_place_among_the_answers(slices: int) -> None:
    async def main() -> None:
        rewriter = _SlicedRewriter(slices, answering=True)
        async with running(_answer_all, produce=rewriter) as (listeners, upstream, _r):
            reader, writer = await asyncio.open_connection(*_bootstrap(listeners))
            writer.write(_list_groups(1) + _produce(1, 2) + _list_groups(3))
            await writer.drain()
            got = [_correlation(b"\0\0\0\0" + await _read_frame(reader)) for _ in range(3)]
            assert got == [1, 2, 3]
            assert [struct.unpack_from(">h", f)[0] for f in upstream.frames] == [16, 16]
            writer.close()

    asyncio.run(main())
