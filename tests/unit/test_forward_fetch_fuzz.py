"""A fuzz test over records *stored* on the broker that the proxy decodes on Fetch (issue 37):
batches of records written by the encoder, then mutated as an attacker with write access to the
topic could store them (frame bytes, the declared content size, header values and dictionary
ids, duplicated headers, bombs of undeclared size, values cut short), each batch valid on the
broker (CRC-32C of the mutated records). Fixed seed; iterations capped in number and in time.

Every response must come back without an exception, within its bounds (output, the work its
budget allows plus one value), and true to the records: a record is either sent byte for byte as
stored or decoded, an unmutated one to exactly what the application produced (a mutated frame
may still decode: zstd frames carry no checksum); dictionary lookups stay within what the work
allows.
"""

from __future__ import annotations

import random
import struct
import time
from typing import Final

import pytest
import zstandard

from sidecar.codec import Decoder, Encoder, StaticResolver
from sidecar.codec.wire import tag_value
from sidecar.dictionaries import Dictionary
from sidecar.errors import UnknownDictionary
from sidecar.proxy.fetched import FAILURE_COST, RECORD_COST, DecodeWork, PartitionDecoder
from tests.record_batches import NewRecord, decode_batches, encode_batch
from tests.unit.log_registry import dictionary

SEED: Final = 37
ITERATIONS: Final = 3000
#: Seconds the iterations may take together; fewer are run past it.
TIME_CAP_S: Final = 20.0
MAX_VALUE: Final = 256 * 1024
BUDGET: Final = 512 * 1024
LIMIT: Final = 16 * 1024 * 1024
RECORDS: Final = 12
CODECS: Final = ("none", "gzip", "lz4", "zstd")


class Counting(StaticResolver):
    """The dictionaries given, every lookup counted."""

    def __init__(self, dictionaries: list[Dictionary]) -> None:
        super().__init__(dictionaries)
        self.lookups = 0

    def get(self, dict_id: int) -> Dictionary:
        self.lookups += 1
        return super().get(dict_id)


@pytest.fixture(scope="module")
def trained(trained_bytes: bytes) -> Dictionary:
    return dictionary(trained_bytes, 32768)


def _bomb(rng: random.Random) -> bytes:
    size = rng.choice((MAX_VALUE + 1, 4 * MAX_VALUE, BUDGET))
    params = zstandard.ZstdCompressionParameters.from_level(1, window_log=18, write_content_size=0)
    cobj = zstandard.ZstdCompressor(compression_params=params).compressobj()
    return cobj.compress(bytes(size)) + cobj.flush()


def _mutated(rng: random.Random, value: bytes, tag: bytes) -> tuple[bytes, list[tuple[str, bytes]]]:
    """One encoded record (`value`, our header `tag`) mutated one way."""
    kind = rng.randrange(8)
    headers = [("trace", b"t"), ("zd", tag)]
    out = bytearray(value)
    if kind == 0 and out:  # bits of the frame flipped
        for _ in range(rng.randint(1, 4)):
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    elif kind == 1 and len(out) > 2:  # the frame cut short
        del out[rng.randrange(1, len(out)) :]
    elif kind == 2:  # the header names another dictionary, unknown or none
        headers[1] = ("zd", tag_value(rng.choice((0, 40000 + rng.randrange(10**6))), "standard"))
    elif kind == 3:  # a header value that is no tag
        headers[1] = ("zd", bytes(rng.randrange(256) for _ in range(rng.randint(0, 12))))
    elif kind == 4:  # our header twice
        headers.append(("zd", tag))
    elif kind == 5:  # a bomb of undeclared size under the "no dictionary" tag
        return _bomb(rng), [("zd", b"0")]
    elif kind == 6:  # a standard frame declaring a size it does not hold
        frame = zstandard.ZstdCompressor().compress(b"x" * rng.randint(1, 5000))
        declared = rng.choice((0, 1, MAX_VALUE, MAX_VALUE + 1, 2**40))
        # Descriptor 0xE0: single segment, 8-byte content size; then the size, the rest kept.
        frame = frame[:4] + b"\xe0" + declared.to_bytes(8, "little") + frame[6:]
        return frame, [("zd", b"0")]
    elif kind == 7:  # random bytes
        out = bytearray(rng.randbytes(rng.randint(0, 64)))
    return bytes(out), headers


def test_mutated_stored_records_are_decoded_or_sent_as_stored_within_their_bounds(
    trained: Dictionary, events: list[bytes]
) -> None:
    rng = random.Random(SEED)
    encoded = Encoder(trained, min_size=16).encode_batch(
        (v, [("trace", b"t")]) for v in events[:200]
    )
    started = time.monotonic()
    runs = 0
    seen = {"decoded": 0, "failed": 0, "over_budget": 0, "held_back": 0}
    for runs in range(1, ITERATIONS + 1):  # noqa: B007 - the count is reported
        if time.monotonic() - started > TIME_CAP_S:
            break
        picked = rng.sample(range(len(encoded)), RECORDS)
        records: list[NewRecord] = []
        originals: list[bytes | None] = []
        for i in picked:
            value, headers = encoded[i][0], encoded[i][1]
            assert value is not None
            tag = next(v for k, v in headers if k == "zd")
            assert tag is not None
            if rng.random() < 0.5:
                value, out_headers = _mutated(rng, value, tag)
                originals.append(None)
            else:
                out_headers = [("trace", b"t"), ("zd", tag)]
                originals.append(events[i])
            records.append(NewRecord(value, key=b"k%d" % i, headers=out_headers))
        stored = encode_batch(records, codec=rng.choice(CODECS))
        resolver = Counting([trained])
        decoder = PartitionDecoder(Decoder(resolver, max_output_size=MAX_VALUE))
        work = DecodeWork(BUDGET)
        first = rng.random() < 0.7
        limit = rng.choice((LIMIT, 2048))

        result = decoder.rewrite(stored, limit=limit, first=first, work=work)
        seen["decoded"] += result.decoded
        seen["failed"] += result.failed
        seen["over_budget"] += result.over_budget
        seen["held_back"] += result.held_back is not None

        assert result.decoded + result.passed + result.failed + result.over_budget <= RECORDS
        assert work.spent <= BUDGET + MAX_VALUE + FAILURE_COST + RECORD_COST + 4 * LIMIT
        assert resolver.lookups <= BUDGET // (RECORD_COST + FAILURE_COST) + RECORDS
        if result.data == stored or not result.data:
            continue
        assert len(result.data) <= limit
        (batch,) = decode_batches(result.data, LIMIT)
        assert len(batch.records) == RECORDS
        for got, sent, original in zip(batch.records, records, originals, strict=True):
            ours = [v for k, v in got.headers if k == b"zd"]
            if ours:  # sent as stored
                assert got.value == sent.value
            elif original is not None:  # decoded: to what was produced
                assert got.value == original
            else:  # a mutated frame that still decodes (zstd frames carry no checksum)
                assert got.value is not None and len(got.value) <= MAX_VALUE
    print(f"\n{runs} fuzzed responses in {time.monotonic() - started:.1f} s (seed {SEED}): {seen}")
    assert all(seen.values()), "every outcome was reached"


def test_a_partition_of_unknown_ids_costs_a_bounded_number_of_lookups() -> None:
    records = [
        NewRecord(b"v", headers=[("zd", tag_value(40000 + i, "standard"))]) for i in range(3000)
    ]
    resolver = Counting([])
    decoder = PartitionDecoder(Decoder(resolver))
    with pytest.raises(UnknownDictionary):
        resolver.get(1)
    resolver.lookups = 0

    result = decoder.rewrite(
        encode_batch(records), limit=LIMIT, first=True, work=DecodeWork(BUDGET)
    )

    assert resolver.lookups <= BUDGET // FAILURE_COST + 1
    assert result.failed == resolver.lookups
    assert result.over_budget == 3000 - resolver.lookups
    assert struct.unpack_from(">i", result.data, 57)[0] == 3000
