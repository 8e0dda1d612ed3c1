"""Consumers keep reading whatever codecs they have (issue 37, item 8): with
`proxy.output_compression=producer` each Produce batch the proxy rewrites keeps the codec its
producer chose, so a consumer reads what its producers write, and a decoded Fetch batch goes
back in that codec (`proxy.fetch_compression=input`) or the one set."""

from __future__ import annotations

import pytest

from sidecar.codec import Decoder, Encoder, StaticResolver
from sidecar.dictionaries import Dictionary
from sidecar.proxy.batch_choice import write
from sidecar.proxy.batches import Allowance, BatchLimits, BatchRewriter
from sidecar.proxy.fetched import DecodeWork, PartitionDecoder
from tests.record_batches import NewRecord, decode_batches, encode_batch
from tests.unit.log_registry import dictionary

LIMIT = 1 << 26
#: Bits 0-2 of a batch's attributes (byte 22 of the batch): its codec.
CODEC_AT = 22


@pytest.fixture(scope="module")
def trained(trained_bytes: bytes) -> Dictionary:
    return dictionary(trained_bytes, 32768)


def _produced(
    trained: Dictionary, events: list[bytes], codec: str, output: str
) -> tuple[bytes, list[bytes]]:
    """A batch of 40 events compressed with `codec` as a producer sends it, and as the proxy
    writes it with `output`; (that batch, the values)."""
    values = events[:40]
    stored = encode_batch([NewRecord(v, key=b"k%d" % i) for i, v in enumerate(values)], codec=codec)
    rewriter = BatchRewriter(BatchLimits(1 << 20, 1 << 20, "zd", output))
    partition = rewriter.read(stored, Allowance(10**6, 1 << 30))
    encoded = Encoder(trained, min_size=16).encode_batch(partition.inputs)
    return write(rewriter, partition, encoded), values


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4"])
def test_the_producers_codec_is_kept_on_produce_and_on_fetch(
    trained: Dictionary, events: list[bytes], codec: str
) -> None:
    written, values = _produced(trained, events, codec, "producer")
    wanted = {"none": 0, "gzip": 1, "lz4": 3}[codec]
    assert written[CODEC_AT] & 0x07 == wanted
    decoded_header = [r for b in decode_batches(written, LIMIT) for r in b.records]
    assert all(r.headers and r.headers[-1][0] == b"zd" for r in decoded_header)

    fetched = PartitionDecoder(Decoder(StaticResolver([trained]))).rewrite(
        written, limit=LIMIT, first=True, work=DecodeWork(LIMIT)
    )

    assert fetched.decoded == 40
    assert fetched.data[CODEC_AT] & 0x07 == wanted
    assert [r.value for b in decode_batches(fetched.data, LIMIT) for r in b.records] == values


def test_without_producer_the_output_codec_is_the_settings(
    trained: Dictionary, events: list[bytes]
) -> None:
    written, _ = _produced(trained, events, "none", "zstd")
    assert written[CODEC_AT] & 0x07 == 4


def test_a_decoded_batch_can_go_back_uncompressed_for_consumers_without_zstd(
    trained: Dictionary, events: list[bytes]
) -> None:
    written, values = _produced(trained, events, "none", "zstd")

    fetched = PartitionDecoder(Decoder(StaticResolver([trained])), "none").rewrite(
        written, limit=LIMIT, first=True, work=DecodeWork(LIMIT)
    )

    assert fetched.data[CODEC_AT] & 0x07 == 0
    assert [r.value for b in decode_batches(fetched.data, LIMIT) for r in b.records] == values
