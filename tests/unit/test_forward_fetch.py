"""Fetch responses through the proxy: the records of batches written by the Encoder
decoded back (values, headers, batch fields, CRC), what passes as stored (raw records, control
batches, truncated tails, corrupt batches, records that cannot be decoded), the bounds (bombs,
the response limit), the raw-fetch clients, the registry topic refused, NodeEndpoints rewritten,
and the topics hidden from listings."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import io
import struct
import sys
import uuid
from pathlib import Path
from typing import Any

import cramjam
import pytest
import zstandard
from crc32c import crc32c
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import Records, i16, i32
from prometheus_client import CollectorRegistry

from sidecar.batch_compression import CODEC_IDS, XERIAL_HEADER, Compression
from sidecar.codec import Decoder, Encoder, StaticResolver
from sidecar.config import ProxySettings, RegistrySettings, Settings
from sidecar.dictionaries import Dictionary, TrainingSample
from sidecar.dictionaries.model import build_dictionary
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import RegistryUnavailable, UnknownDictionary
from sidecar.proxy.addresses import Address
from sidecar.proxy.fetch import FetchDecoding, RecentMisses
from sidecar.proxy.fetch_metrics import FetchMetrics
from sidecar.proxy.fetched import DecodeWork, PartitionDecoder
from sidecar.proxy.filters import proxy_filters
from sidecar.proxy.listeners import Listeners
from sidecar.proxy.metrics import ForwardMetrics
from sidecar.proxy.responses import encode_response, parse_response
from sidecar.proxy.service import _fetch_decoding
from sidecar.proxy.topics import TopicView
from sidecar.proxy.versions import DESCRIBE_LOG_DIRS, DESCRIBE_TOPIC_PARTITIONS, FETCH, METADATA
from sidecar.wire.record_batch import CONTROL_BIT
from tests.record_batches import (
    TRANSACTIONAL_BIT,
    DecodedBatch,
    NewRecord,
    decode_batches,
    encode_batch,
)
from tests.unit.forward_messages import filled

LIMIT = 1 << 24
CODECS = ("none", "gzip", "lz4", "zstd")
REGISTRY = "_zdict_dictionaries"


@pytest.fixture(scope="module")
def dictionary(trained_bytes: bytes) -> Dictionary:
    sample = TrainingSample(count=1, bytes=1, heldout_count=1, heldout_bytes=1)
    return build_dictionary(
        "orders",
        trained_bytes,
        dict_id=32768,
        version=1,
        level=3,
        heldout_ratio=2.0,
        nodict_ratio=1.0,
        break_even_size=0,
        training=sample,
    )


def _encoded(
    dictionary: Dictionary, values: list[bytes], *, first_offset: int = 0
) -> list[NewRecord]:
    """Records as a producer through the encoder writes them: keys, a header of the
    application's before ours, timestamps 10 ms apart."""
    encoded = Encoder(dictionary).encode_batch(
        (v, [("trace", b"t-%d" % i)]) for i, v in enumerate(values)
    )
    return [
        NewRecord(
            r.value,
            key=b"key-%d" % (first_offset + i),
            headers=r.headers,
            timestamp=1_700_000_000_000 + 10 * (first_offset + i),
        )
        for i, r in enumerate(encoded)
    ]


def _with_header_fields(batch: bytes, base_offset: int, leader_epoch: int = 7) -> bytes:
    """`batch` at `base_offset` with a partition leader epoch, as a broker stores it (neither is
    covered by the CRC)."""
    return (
        struct.pack(">q", base_offset) + batch[8:12] + struct.pack(">i", leader_epoch) + batch[16:]
    )


def _decoder(dictionary: Dictionary, **kwargs: Any) -> Decoder:
    return Decoder(StaticResolver([dictionary]), **kwargs)


def _values(batches: list[DecodedBatch]) -> list[bytes | None]:
    return [r.value for b in batches for r in b.records]


@pytest.mark.parametrize("codec", CODECS)
def test_records_written_by_the_encoder_are_decoded_with_every_batch_field_kept(
    dictionary: Dictionary, events: list[bytes], codec: str
) -> None:
    values = events[4000:4100]
    records = _encoded(dictionary, values)
    records[3] = NewRecord(
        b"raw, never compressed",
        key=b"key-3",
        headers=[("a", b"b")],
        timestamp=records[3].timestamp,
    )
    stored = _with_header_fields(
        encode_batch(
            records,
            codec=codec,
            producer_id=4242,
            producer_epoch=3,
            base_sequence=17,
            attributes=TRANSACTIONAL_BIT,
        ),
        base_offset=1000,
    )
    result = PartitionDecoder(_decoder(dictionary)).rewrite(
        stored, limit=LIMIT, first=True, work=DecodeWork(LIMIT)
    )

    assert (result.decoded, result.passed, result.failed) == (99, 1, 0)
    assert result.held_back is None
    (batch,) = decode_batches(result.data, LIMIT)  # the CRC-32C is checked
    expected = list(values)
    expected[3] = b"raw, never compressed"
    assert _values([batch]) == expected
    assert [r.key for r in batch.records] == [b"key-%d" % i for i in range(100)]
    assert [r.timestamp for r in batch.records] == [r.timestamp for r in records]
    assert [r.offset_delta for r in batch.records] == list(range(100))
    assert batch.records[0].headers == ((b"trace", b"t-0"),), "zd removed, the others kept"
    assert batch.records[3].headers == ((b"a", b"b"),)
    assert (batch.codec, batch.transactional, batch.control) == (codec, True, False)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (4242, 3, 17)
    assert batch.last_offset_delta == 99
    assert result.data[:8] == stored[:8], "base offset"
    assert result.data[12:17] == stored[12:17], "partition leader epoch and magic"
    assert result.data[27:57] == stored[27:57], "last offset delta, timestamps, producer fields"


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_the_output_compression_can_be_set(
    dictionary: Dictionary, events: list[bytes], compression: Any
) -> None:
    stored = encode_batch(_encoded(dictionary, events[:20]), codec="lz4")
    result = PartitionDecoder(_decoder(dictionary), compression).rewrite(
        stored, limit=LIMIT, first=True, work=DecodeWork(LIMIT)
    )
    (batch,) = decode_batches(result.data, LIMIT)
    assert batch.codec == compression
    assert _values([batch]) == events[:20]


@pytest.mark.parametrize(
    ("compression", "expected"), [("input", "none"), ("zstd", "none"), ("gzip", "gzip")]
)
def test_a_fetch_below_v10_never_gets_a_zstd_batch_decoded_or_not(
    dictionary: Dictionary, events: list[bytes], compression: Any, expected: str
) -> None:
    ours = encode_batch(_encoded(dictionary, events[:20]), codec="zstd", producer_id=7)
    theirs = _with_header_fields(
        encode_batch([NewRecord(v, timestamp=5) for v in events[20:30]], codec="zstd"),
        base_offset=20,
    )
    lz4 = _with_header_fields(
        encode_batch([NewRecord(v, timestamp=5) for v in events[30:35]], codec="lz4"),
        base_offset=30,
    )
    decoder = PartitionDecoder(_decoder(dictionary), compression)
    old = decoder.rewrite(
        ours + theirs + lz4, limit=LIMIT, first=True, work=DecodeWork(LIMIT), zstd=False
    )
    new = decoder.rewrite(theirs, limit=LIMIT, first=True, work=DecodeWork(LIMIT))

    assert (old.decoded, old.passed, old.failed) == (20, 15, 0)
    batches = decode_batches(old.data, LIMIT)  # CRC-32Cs checked
    assert [b.codec for b in batches] == [expected, expected, "lz4"]
    assert _values(batches) == events[:35]
    assert batches[0].producer_id == 7
    assert old.data.endswith(lz4), "a batch in a codec v4 reads passes byte for byte"
    assert new.data == theirs, "v10 up: passed as stored"


@pytest.mark.parametrize("framing", ["xerial", "raw"])
def test_snappy_batches_are_decoded_and_written_again_in_xerial_framing(
    dictionary: Dictionary, events: list[bytes], framing: str
) -> None:
    compression = Compression()
    plain = encode_batch(_encoded(dictionary, events[:50]), producer_id=4242, base_sequence=3)
    section = plain[61:]
    if framing == "xerial":
        body = compression.compress(CODEC_IDS["snappy"], section)
    else:
        body = bytes(cramjam.snappy.compress_raw(section))
    stored = _with_body(plain, body, CODEC_IDS["snappy"])

    kept = PartitionDecoder(_decoder(dictionary)).rewrite(
        stored, limit=LIMIT, first=True, work=DecodeWork(LIMIT)
    )
    unpacked = PartitionDecoder(_decoder(dictionary), "none").rewrite(
        stored, limit=LIMIT, first=True, work=DecodeWork(LIMIT)
    )

    assert (kept.decoded, unpacked.decoded) == (50, 50)
    (batch,) = decode_batches(unpacked.data, LIMIT)  # the CRC-32C is checked
    assert _values([batch]) == events[:50]
    assert (batch.producer_id, batch.base_sequence) == (4242, 3)
    assert kept.data[22] & 0x07 == CODEC_IDS["snappy"], "the batch's own codec kept"
    assert kept.data[61:].startswith(XERIAL_HEADER), "written as Java producers write it"
    assert crc32c(kept.data[21:]) == struct.unpack_from(">I", kept.data, 17)[0]
    inflated = compression.decompress(CODEC_IDS["snappy"], kept.data[61:], LIMIT)
    assert inflated == unpacked.data[61:]


def _with_body(batch: bytes, body: bytes, codec: int) -> bytes:
    """`batch` with its records section replaced by `body`, compressed with `codec`."""
    attributes = (struct.unpack_from(">h", batch, 21)[0] & ~0x07) | codec
    after = struct.pack(">h", attributes) + batch[23:61] + body
    length = struct.pack(">i", len(after) + 9)  # partition leader epoch, magic, CRC
    return batch[:8] + length + batch[12:17] + struct.pack(">I", crc32c(after)) + after


def test_what_is_not_ours_passes_byte_for_byte(dictionary: Dictionary, events: list[bytes]) -> None:
    plain = encode_batch([NewRecord(v, timestamp=5) for v in events[:10]], codec="zstd")
    control = encode_batch(
        [NewRecord(b"\x00\x00\x00\x00\x00\x00", key=b"\x00\x00\x00\x00")],
        attributes=CONTROL_BIT | TRANSACTIONAL_BIT,
        producer_id=9,
    )
    ours = encode_batch(_encoded(dictionary, events[10:20]))
    corrupt = bytearray(encode_batch(_encoded(dictionary, events[20:30])))
    corrupt[-1] ^= 0xFF
    truncated = encode_batch(_encoded(dictionary, events[30:40]))[:-25]
    data = plain + control + bytes(corrupt) + ours + truncated

    result = PartitionDecoder(_decoder(dictionary)).rewrite(
        data, limit=LIMIT, first=True, work=DecodeWork(LIMIT)
    )

    decoded_ours = PartitionDecoder(_decoder(dictionary)).rewrite(
        ours, limit=LIMIT, first=True, work=DecodeWork(LIMIT)
    )
    assert result.data == plain + control + bytes(corrupt) + decoded_ours.data + truncated
    assert (result.decoded, result.passed, result.failed) == (10, 11, 10)
    assert result.failure is not None and "CRC-32C" in result.failure


def test_a_record_that_cannot_be_decoded_is_sent_as_stored_with_its_header(
    dictionary: Dictionary, events: list[bytes]
) -> None:
    records = _encoded(dictionary, events[:5])
    value, headers = records[2].value, list(records[2].headers)
    assert value is not None
    records[2] = dataclasses.replace(records[2], value=value[:-3])  # a truncated frame
    stored = encode_batch(records)

    result = PartitionDecoder(_decoder(dictionary)).rewrite(
        stored, limit=LIMIT, first=True, work=DecodeWork(LIMIT)
    )

    (batch,) = decode_batches(result.data, LIMIT)
    assert (result.decoded, result.failed) == (4, 1)
    assert batch.records[2].value == value[:-3]
    assert batch.records[2].headers == tuple((k.encode(), v) for k, v in headers)
    assert _values([batch])[:2] == events[:2]
    assert result.failure is not None and "truncated" in result.failure


def test_an_unknown_dictionary_is_passed_and_an_unreachable_registry_holds_back(
    dictionary: Dictionary, events: list[bytes]
) -> None:
    stored = encode_batch(_encoded(dictionary, events[:5]))

    unknown = PartitionDecoder(Decoder(StaticResolver())).rewrite(
        stored, limit=LIMIT, first=True, work=DecodeWork(LIMIT)
    )
    assert (unknown.data, unknown.failed, unknown.decoded) == (stored, 5, 0)

    class Down:
        def get(self, dict_id: int) -> Dictionary:
            raise RegistryUnavailable("registry topic _zdict_dictionaries: timed out")

        def describe(self) -> str:
            return "a registry that does not answer"

    down = PartitionDecoder(Decoder(Down())).rewrite(
        stored * 2, limit=LIMIT, first=True, work=DecodeWork(LIMIT)
    )
    assert down.data == b"", "held back, even as the response's first batch"
    assert down.held_back is not None and "timed out" in down.held_back


def test_a_frame_declaring_a_huge_value_is_refused_before_it_is_allocated(
    dictionary: Dictionary,
) -> None:
    bomb = zstandard.ZstdCompressor().compress(b"\0" * (9 * 1024 * 1024))  # above 8 MiB
    stored = encode_batch([NewRecord(bomb, headers=[("zd", b"0")])])

    result = PartitionDecoder(_decoder(dictionary)).rewrite(
        stored, limit=LIMIT, first=True, work=DecodeWork(LIMIT)
    )

    assert (result.data, result.failed) == (stored, 1)
    assert result.failure is not None and "max_output_size" in result.failure


def test_a_compressed_batch_inflating_past_the_limit_is_held_back_or_sent_as_stored(
    dictionary: Dictionary, events: list[bytes]
) -> None:
    bomb = encode_batch([NewRecord(b"\0" * (4 << 20), headers=[("zd", b"0")])], codec="zstd")
    assert len(bomb) < 1024
    small = encode_batch(_encoded(dictionary, events[:3]))
    decoder = PartitionDecoder(_decoder(dictionary))

    later = decoder.rewrite(small + bomb, limit=1 << 20, first=True, work=DecodeWork(LIMIT))
    assert later.held_back is not None and "inflates past" in later.held_back
    assert _values(decode_batches(later.data, LIMIT)) == events[:3], "cut before the bomb"

    first = decoder.rewrite(bomb + small, limit=1 << 20, first=True, work=DecodeWork(LIMIT))
    assert first.data.startswith(bomb), "the first batch goes out, as stored"
    assert first.failed == 1


def test_the_partition_stops_at_a_batch_boundary_at_the_limit(
    dictionary: Dictionary, events: list[bytes]
) -> None:
    batches = [encode_batch(_encoded(dictionary, events[i : i + 50])) for i in range(0, 200, 50)]
    decoder = PartitionDecoder(_decoder(dictionary))
    two = len(
        decoder.rewrite(b"".join(batches[:2]), limit=LIMIT, first=True, work=DecodeWork(LIMIT)).data
    )

    result = decoder.rewrite(b"".join(batches), limit=two + 10, first=True, work=DecodeWork(LIMIT))

    assert _values(decode_batches(result.data, LIMIT)) == events[:100]
    assert result.held_back is not None
    nothing = decoder.rewrite(b"".join(batches), limit=10, first=False, work=DecodeWork(LIMIT))
    assert nothing.data == b"" and nothing.decoded == 0


def test_recent_misses_are_not_looked_up_again(dictionary: Dictionary) -> None:
    calls: list[int] = []

    class Counting(StaticResolver):
        def get(self, dict_id: int) -> Dictionary:
            calls.append(dict_id)
            return super().get(dict_id)

    now = [0.0]
    resolver = RecentMisses(Counting([dictionary]), ttl=5.0, clock=lambda: now[0])
    for _ in range(3):
        with pytest.raises(UnknownDictionary):
            resolver.get(40000)
    assert resolver.get(32768) is dictionary
    now[0] = 6.0
    with pytest.raises(UnknownDictionary):
        resolver.get(40000)
    assert calls == [40000, 32768, 40000]


def test_a_registry_that_does_not_answer_is_not_waited_for_again_at_once() -> None:
    calls: list[int] = []

    class Down:
        def get(self, dict_id: int) -> Dictionary:
            calls.append(dict_id)
            raise RegistryUnavailable("registry topic t: read up to offset 3 of 9 within 30 s")

        def describe(self) -> str:
            return "registry topic t"

    now = [0.0]
    resolver = RecentMisses(Down(), ttl=5.0, clock=lambda: now[0])
    for _ in range(3):
        with pytest.raises(RegistryUnavailable, match="within 30 s"):
            resolver.get(32768)
    now[0] = 5.0
    with pytest.raises(RegistryUnavailable):
        resolver.get(32768)
    assert calls == [32768, 32768]


# -- whole responses -------------------------------------------------------------------------


def _response_class(version: int, name: str) -> Any:
    return getattr(sys.modules[load_response_schema(FETCH, version).__module__], name)


def _fetch_response(version: int, topics: dict[Any, bytes], **fields: Any) -> Any:
    """A Fetch response of `version`: per topic (a name, or an id from v13) one partition."""
    partition_cls = _response_class(version, "PartitionData")
    aborted = _response_class(version, "AbortedTransaction")
    topic_cls = _response_class(version, "FetchableTopicResponse")
    named = "topic" if version < 13 else "topic_id"
    entries = tuple(
        filled(
            topic_cls,
            **{named: topic},
            partitions=(
                filled(
                    partition_cls,
                    partition_index=0,
                    high_watermark=500,
                    aborted_transactions=(aborted(producer_id=9, first_offset=3),),
                    records=Records(records),
                ),
            ),
        )
        for topic, records in topics.items()
    )
    return filled(load_response_schema(FETCH, version), responses=entries, **fields)


def _fetching(
    dictionary: Dictionary, topics: TopicView | None = None, **kwargs: Any
) -> tuple[FetchDecoding, CollectorRegistry]:
    registry = CollectorRegistry()
    fetch = FetchDecoding(
        _decoder(dictionary),
        topics=topics or TopicView(REGISTRY),
        metrics=FetchMetrics(registry),
        max_bytes=LIMIT,
        max_unread_bytes=LIMIT,
        decode_budget=LIMIT,
        **kwargs,
    )
    return fetch, registry


def _rewrite(
    fetch: FetchDecoding,
    version: int,
    body: Any,
    client_id: str = "app",
    free: int = 1 << 30,
) -> tuple[Any, list[int]]:
    held: list[int] = []

    async def locate(nodes: Any) -> dict[int, Address | None]:
        return {node: Address("127.0.0.1", 9100 + node) for node in nodes}

    frame = encode_response(11, body)[4:]
    out = asyncio.run(
        fetch.rewrite(
            version, frame, client_id=client_id, free=lambda: free, hold=held.append, locate=locate
        )
    )
    correlation_id, parsed = parse_response(FETCH, version, out[4:])
    assert correlation_id == 11
    return parsed, held


@pytest.mark.parametrize("version", [4, 12, 15, 16, 18])
def test_a_fetch_response_is_decoded_and_the_rest_written_back_as_it_came(
    dictionary: Dictionary, events: list[bytes], version: int
) -> None:
    stored = encode_batch(_encoded(dictionary, events[:30]), codec="zstd")
    orders: Any = "orders" if version < 13 else uuid.UUID(int=1)
    body = _fetch_response(version, {orders: stored})
    fetch, registry = _fetching(dictionary)
    fetch.topics.learn([filled(_class_metadata_topic(), name="orders", topic_id=uuid.UUID(int=1))])

    got, held = _rewrite(fetch, version, body)

    (partition,) = got.responses[0].partitions
    assert _values(decode_batches(partition.records, LIMIT)) == events[:30]
    assert dataclasses.replace(partition, records=None) == dataclasses.replace(
        body.responses[0].partitions[0], records=None
    ), "aborted transactions, offsets, tagged fields as upstream sent them"
    assert sum(held) == len(partition.records), "reserved, then the output kept"
    assert (
        registry.get_sample_value(
            "zdict_proxy_fetch_records_total", {"topic": "orders", "outcome": "decoded"}
        )
        == 30
    )
    if version >= 16:
        (endpoint,) = got.node_endpoints
        assert (endpoint.host, endpoint.port) == ("127.0.0.1", 9100 + endpoint.node_id)
    fetch.close()


def _class_metadata_topic() -> Any:
    return sys.modules[load_response_schema(METADATA, 12).__module__].MetadataResponseTopic


def test_raw_fetch_clients_and_fetch_decode_none_get_the_records_as_stored(
    dictionary: Dictionary, events: list[bytes]
) -> None:
    stored = encode_batch(_encoded(dictionary, events[:5]))
    body = _fetch_response(12, {"orders": stored})

    fetch, _ = _fetching(dictionary, raw_client_ids=("decodes-itself",))
    raw, _ = _rewrite(fetch, 12, body, client_id="decodes-itself")
    assert raw.responses[0].partitions[0].records == stored
    decoded, _ = _rewrite(fetch, 12, body, client_id="app")
    assert decoded.responses[0].partitions[0].records != stored

    nobody, _ = _fetching(dictionary, decode="none")
    none, _ = _rewrite(nobody, 12, body, client_id="app")
    assert none.responses[0].partitions[0].records == stored


@pytest.mark.parametrize("version", [12, 17])
def test_the_registry_topic_is_refused_unless_shown(
    dictionary: Dictionary, events: list[bytes], version: int
) -> None:
    registry_id = uuid.UUID(int=2)
    topic: Any = REGISTRY if version < 13 else registry_id
    body = _fetch_response(version, {topic: encode_batch([NewRecord(b"a dictionary")])})
    listed = [filled(_class_metadata_topic(), name=REGISTRY, topic_id=registry_id)]

    fetch, registry = _fetching(dictionary)
    fetch.topics.learn(listed)
    got, _ = _rewrite(fetch, version, body)
    (partition,) = got.responses[0].partitions
    assert partition.error_code == ErrorCode.topic_authorization_failed
    assert partition.records is None
    assert registry.get_sample_value("zdict_proxy_fetch_refused_partitions_total") == 1

    shown, _ = _fetching(dictionary, TopicView(REGISTRY, show_internal=True))
    shown.topics.learn(listed)
    got, _ = _rewrite(shown, version, body)
    assert got.responses[0].partitions[0].records == body.responses[0].partitions[0].records


def test_a_response_stops_growing_at_the_free_budget_and_later_partitions_come_empty(
    dictionary: Dictionary, events: list[bytes]
) -> None:
    first = encode_batch(_encoded(dictionary, events[:100]))
    second = encode_batch(_encoded(dictionary, events[100:200]))
    body = _fetch_response(12, {"a": first, "b": second})
    fetch, registry = _fetching(dictionary)

    got, held = _rewrite(fetch, 12, body, free=100)  # less than one batch decoded

    a, b = (t.partitions[0].records for t in got.responses)
    assert _values(decode_batches(a, LIMIT)) == events[:100], "a small first batch goes out"
    assert b == b""
    assert sum(held) == len(a)
    assert registry.get_sample_value("zdict_proxy_fetch_held_back_partitions_total") == 1


# -- listings ---------------------------------------------------------------------------------


def _listing_topic(api_key: int, version: int, name: str, **fields: Any) -> Any:
    cls = {
        METADATA: "MetadataResponseTopic",
        DESCRIBE_TOPIC_PARTITIONS: "DescribeTopicPartitionsResponseTopic",
        DESCRIBE_LOG_DIRS: "DescribeLogDirsTopic",
    }[api_key]
    topic_cls = getattr(sys.modules[load_response_schema(api_key, version).__module__], cls)
    return filled(topic_cls, name=name, **fields)


NAMES = ["orders", "__consumer_offsets", "__transaction_state", REGISTRY, "__remote_log_metadata"]


@pytest.mark.parametrize(
    ("api_key", "version"), [(METADATA, 1), (METADATA, 12), (DESCRIBE_TOPIC_PARTITIONS, 0)]
)
def test_internal_topics_and_the_registry_are_left_out_of_listings(
    api_key: int, version: int
) -> None:
    topics = tuple(
        _listing_topic(api_key, version, name, is_internal=name.startswith("__c")) for name in NAMES
    )
    body = filled(load_response_schema(api_key, version), topics=topics)

    got = TopicView(REGISTRY).filter(api_key, body)
    assert [t.name for t in got.topics] == ["orders"]
    shown = TopicView(REGISTRY, show_internal=True).filter(api_key, body)
    assert [t.name for t in shown.topics] == NAMES


def test_describe_log_dirs_lists_no_hidden_topic() -> None:
    schema = load_response_schema(DESCRIBE_LOG_DIRS, 4)
    result_cls = sys.modules[schema.__module__].DescribeLogDirsResult
    topics = tuple(_listing_topic(DESCRIBE_LOG_DIRS, 4, name) for name in NAMES)
    body = filled(schema, results=(filled(result_cls, topics=topics),))

    got = TopicView(REGISTRY).filter(DESCRIBE_LOG_DIRS, body)

    assert [t.name for t in got.results[0].topics] == ["orders"]


def test_topic_ids_are_learned_from_listings() -> None:
    view = TopicView(REGISTRY)
    orders = uuid.UUID(int=5)
    body = filled(
        load_response_schema(METADATA, 12),
        topics=(_listing_topic(METADATA, 12, "orders", topic_id=orders),),
    )
    view.filter(METADATA, body)
    assert view.name(orders) == "orders"
    assert view.name(uuid.UUID(int=6)) is None


# -- through a connection -------------------------------------------------------------------


def _request(api_key: int, version: int, correlation_id: int) -> bytes:
    """A request frame (size prefix included) with every field of its body filled."""
    schema = load_request_schema(api_key, version)
    header_class = schema.__header_schema__
    buffer = io.BytesIO()
    entity_writer(header_class)(
        buffer,
        header_class(
            request_api_key=i16(api_key),
            request_api_version=i16(version),
            correlation_id=i32(correlation_id),
            client_id="test-client",
        ),
    )
    entity_writer(schema)(buffer, filled(schema))
    return struct.pack(">i", buffer.tell()) + buffer.getvalue()


def test_through_the_proxy_fetched_records_are_decoded_and_listings_filtered(
    dictionary: Dictionary, events: list[bytes]
) -> None:
    stored = encode_batch(_encoded(dictionary, events[:40]), codec="gzip")
    fetched = _fetch_response(12, {"orders": stored})
    listing = filled(
        load_response_schema(METADATA, 12),
        brokers=(),
        topics=tuple(_listing_topic(METADATA, 12, name) for name in NAMES),
    )

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                api_key, _version, correlation_id = struct.unpack_from(">hhi", frame)
                writer.write(
                    encode_response(correlation_id, fetched if api_key == FETCH else listing)
                )
                await writer.drain()
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(upstream, "127.0.0.1", 0)
        address = Address("127.0.0.1", server.sockets[0].getsockname()[1])
        settings = ProxySettings(listen="127.0.0.1:0", max_buffered_bytes=1 << 26)
        fetch, registry = _fetching(dictionary)
        metrics = ForwardMetrics(registry)
        filters = functools.partial(
            proxy_filters, settings, metrics, fetch=fetch, topics=fetch.topics
        )
        listeners = Listeners(settings, [address], metrics, filters)
        bound = await listeners.start()
        try:
            reader, writer = await asyncio.open_connection(bound.host, bound.port)
            writer.write(_request(FETCH, 12, 1) + _request(METADATA, 12, 2))
            await writer.drain()
            answers = []
            for _ in range(2):
                size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))[0]
                answers.append(await asyncio.wait_for(reader.readexactly(size), 5))
            _, got = parse_response(FETCH, 12, answers[0])
            records = got.responses[0].partitions[0].records
            assert _values(decode_batches(records, LIMIT)) == events[:40]
            _, listed = parse_response(METADATA, 12, answers[1])
            assert [t.name for t in listed.topics] == ["orders"]
            writer.close()
            await asyncio.sleep(0.1)
            assert listeners.budget.used == 0, "the response's bytes were given back"
        finally:
            await listeners.stop()
            server.close()
            fetch.close()

    asyncio.run(main())


def test_the_service_decodes_with_the_store_without_a_registry(
    tmp_path: Path, dictionary: Dictionary, events: list[bytes]
) -> None:
    DictionaryStore(tmp_path).put(dictionary)
    settings = Settings(
        dictionaries=tmp_path,
        registry=RegistrySettings(enabled=False, topic="dicts"),
        proxy=ProxySettings(
            max_request_bytes=1 << 20,
            max_buffered_bytes=1 << 20,
            raw_fetch_client_ids=("raw",),
            fetch_compression="zstd",
        ),
    )
    fetch = _fetch_decoding(settings, CollectorRegistry(), None)
    try:
        assert fetch.max_bytes == 1 << 20, "a response fits the budget"
        assert fetch.topics.hidden("dicts") and not fetch.decodes_for("raw")
        stored = encode_batch(_encoded(dictionary, events[:5]))
        result = PartitionDecoder(fetch.decoder, "zstd").rewrite(
            stored, limit=LIMIT, first=True, work=DecodeWork(LIMIT)
        )
        assert _values(decode_batches(result.data, LIMIT)) == events[:5]
    finally:
        fetch.close()
