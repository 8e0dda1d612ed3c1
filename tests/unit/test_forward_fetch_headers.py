"""A stored header key that C clients read as the codec's (`zd\\x00…`: librdkafka reads a key up
to its first NUL byte), which Produce refuses, is flagged on Fetch the same way: its record sent
as stored and counted failed, with the reason, while the batch's genuine records are decoded."""

from __future__ import annotations

import pytest

from sidecar.codec import Decoder, StaticResolver
from sidecar.dictionaries import Dictionary
from sidecar.proxy.fetched import DecodeWork, PartitionDecoder
from tests.record_batches import NewRecord, decode_batches, encode_batch
from tests.unit.test_forward_fetch import LIMIT, _encoded
from tests.unit.test_forward_fetch import dictionary as dictionary  # the module's fixture


@pytest.mark.parametrize("key", [b"zd\x00", b"zd\x00x"])
@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_a_stored_key_read_as_zd_up_to_a_nul_is_sent_as_stored_and_counted_failed(
    key: bytes, codec: str, dictionary: Dictionary
) -> None:
    genuine = _encoded(dictionary, [b'{"id": 1, "kind": "order"}' * 4])
    shadow = NewRecord(b"not a frame", key=b"k", headers=[(key.decode(), b"0")])
    plain = NewRecord(b"plain", headers=[("trace", b"t")])
    stored = encode_batch([genuine[0], shadow, plain], codec=codec)
    decoder = PartitionDecoder(Decoder(StaticResolver([dictionary])))

    result = decoder.rewrite(stored, limit=LIMIT, first=True, work=DecodeWork(LIMIT))

    assert (result.decoded, result.passed, result.failed) == (1, 1, 1)
    assert result.failure is not None and "up to a NUL byte" in result.failure
    (batch,) = decode_batches(result.data, LIMIT)
    assert batch.records[1].value == b"not a frame"
    assert batch.records[1].headers == ((key, b"0"),), "sent as stored"
    assert batch.records[0].value == b'{"id": 1, "kind": "order"}' * 4


def test_a_batch_whose_only_suspect_is_a_shadow_key_is_passed_as_stored_and_counted() -> None:
    stored = encode_batch(
        [NewRecord(b"v", headers=[("zd\x00", b"0")]), NewRecord(b"zd\x00 in a value")]
    )
    result = PartitionDecoder(Decoder(StaticResolver([]))).rewrite(
        stored, limit=LIMIT, first=True, work=DecodeWork(LIMIT)
    )
    assert result.data == stored
    assert (result.decoded, result.passed, result.failed) == (0, 1, 1)
