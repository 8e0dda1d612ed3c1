"""Produce requests rewritten in place by the proxy (`produce`,
`produce_request`, `batches`): built with kio, rewritten, read again by kio;
only values, headers, CRCs and sizes change. Every refusal, the bounded reader, compression in
and out, and local answers given in request order."""

from __future__ import annotations

import asyncio
import datetime
import functools
import random
import struct
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from sidecar.batch_compression import CODEC_IDS, Compression
from sidecar.codec import Decoder, Encoder
from sidecar.config import ProxySettings, RegistrySettings, Settings, TrainingSettings
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import ProduceRefused, ProtocolError
from sidecar.metrics import Metrics
from sidecar.namespaces import Namespace
from sidecar.proxy.addresses import Address
from sidecar.proxy.allowlist import TopicAllowList
from sidecar.proxy.batch_choice import (
    COMPARE_EVERY,
    COMPARED_SIZES,
    Comparisons,
    FramesOrRaw,
    write,
)
from sidecar.proxy.batches import Allowance, BatchLimits, BatchRewriter
from sidecar.proxy.filters import proxy_filters
from sidecar.proxy.frames import read_request_header
from sidecar.proxy.listeners import Listeners
from sidecar.proxy.metrics import ForwardMetrics
from sidecar.proxy.produce import ProduceRewriter
from sidecar.proxy.produce_request import FIRST_VERSION, LAST_VERSION, parse_produce
from sidecar.proxy.routes import ProxyRoutes
from sidecar.proxy.versions import request_header_version
from sidecar.training.sampling import Reservoir
from sidecar.wire.record_batch import CONTROL_BIT, record_bytes
from tests.kafka_frames import nested, read_response, request_frame
from tests.record_batches import TRANSACTIONAL_BIT, NewRecord, decode_batches, encode_batch
from tests.unit.dictionaries import AddDictionary

VERSIONS = range(FIRST_VERSION, LAST_VERSION + 1)
HEADER_KEY = "zd"
_HEADER = struct.Struct(">qiiBIhiqqqhii")


def _records(events: Sequence[bytes], start: int = 0) -> list[NewRecord]:
    """Records with keys, headers, a null value and timestamps that move back and forth."""
    out = []
    for i, value in enumerate(events):
        out.append(
            NewRecord(
                value=None if i == 3 else value,
                key=None if i % 4 == 1 else f"key-{start + i}".encode(),
                headers=[("trace", f"t{i}".encode()), ("empty", None)] if i % 2 else [],
                timestamp=1_700_000_000_000 + (i * 37) % 11 - 5,
            )
        )
    return out


def _produce(version: int, topics: dict[str, list[tuple[int, bytes | None]]], **body: Any) -> bytes:
    topic_class = nested(0, version, "TopicProduceData")
    partition_class = nested(0, version, "PartitionProduceData")
    values: dict[str, Any] = {
        "transactional_id": "tx-1",
        "acks": -1,
        "timeout": datetime.timedelta(milliseconds=12_345),
        **body,
    }
    values["topic_data"] = tuple(
        topic_class(
            name=name,
            partition_data=tuple(partition_class(index=i, records=r) for i, r in partitions),
        )
        for name, partitions in topics.items()
    )
    return request_frame(0, version, 77, **values)


def _read_request(frame: bytes) -> Any:
    version = struct.unpack_from(">h", frame, 6)[0]
    schema = load_request_schema(0, version)
    _header, used = entity_reader(schema.__header_schema__)(frame, 4)
    body, size = entity_reader(schema)(frame, 4 + used)
    assert 4 + used + size == len(frame)
    return body


def _namespace(topic: str, encoder: Encoder, metrics: Metrics) -> Namespace:
    reservoir = Reservoir(
        topic, max_bytes=1 << 20, every=1, min_messages=1, max_value_bytes=1 << 20
    )
    return Namespace(topic, encoder, reservoir, metrics.namespace(topic))


class Setup:
    """A ProduceRewriter over one dictionary-backed encoder per topic."""

    def __init__(
        self,
        encoder: Encoder,
        *,
        allowed: Sequence[str] = ("orders", "clicks"),
        output: str = "zstd",
        max_records: int = 100_000,
        max_decompressed: int = 64 << 20,
        max_batch: int = 1 << 20,
        max_value: int = 1 << 20,
    ) -> None:
        self.registry = CollectorRegistry()
        self.metrics = Metrics(self.registry)
        self.namespaces: dict[str, Namespace] = {}
        self.encoder = encoder
        limits = BatchLimits(max_batch, max_value, HEADER_KEY, output)
        self.rewriter = ProduceRewriter(
            batches=BatchRewriter(limits),
            allowed=TopicAllowList(allowed, ["_zdict_registry"]),
            namespace=self.namespace,
            metrics=ForwardMetrics(self.registry, self.metrics.stored),
            max_records=max_records,
            max_decompressed_bytes=max_decompressed,
        )

    def namespace(self, topic: str) -> Namespace:
        if topic not in self.namespaces:
            self.namespaces[topic] = _namespace(topic, self.encoder, self.metrics)
        return self.namespaces[topic]

    def rewrite(self, frame: bytes) -> Any:
        body = frame[4:]
        version = struct.unpack_from(">h", body, 2)[0]
        header_version = request_header_version(0, version)
        header = read_request_header(body, header_version)
        return self.rewriter.rewrite(body, header, header_version >= 2)


@pytest.fixture
def encoder(store: DictionaryStore, add_dictionary: AddDictionary) -> Encoder:
    add_dictionary("orders")
    return Encoder.from_store(store, "orders", min_size=16, header_key=HEADER_KEY)


@pytest.fixture
def decoder(store: DictionaryStore, encoder: Encoder) -> Decoder:
    return Decoder.from_store(store, header_key=HEADER_KEY)


def _decoded(decoder: Decoder, records: Any) -> list[tuple[Any, ...]]:
    batches = decode_batches(records, 1 << 26)
    out = []
    for batch in batches:
        transformed = decoder.decode_batch(
            [(r.value, [(k.decode(), v) for k, v in r.headers]) for r in batch.records]
        )
        for record, plain in zip(batch.records, transformed, strict=True):
            out.append(
                (record.offset_delta, record.timestamp, record.key, plain.value, plain.headers)
            )
    return out


def _expected(records: Sequence[NewRecord]) -> list[tuple[Any, ...]]:
    return [(i, r.timestamp, r.key, r.value, list(r.headers)) for i, r in enumerate(records)]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_version_is_rewritten_and_only_values_headers_crc_and_sizes_change(
    version: int, encoder: Encoder, decoder: Decoder, events: list[bytes]
) -> None:
    first, second = _records(events[:40]), _records(events[40:45], 40)
    batch_a = encode_batch(first, producer_id=4242, producer_epoch=3, base_sequence=17)
    batch_b = encode_batch(
        second, producer_id=4242, producer_epoch=3, base_sequence=57, attributes=TRANSACTIONAL_BIT
    )
    batch_b = batch_b[:12] + struct.pack(">i", 9) + batch_b[16:]  # a leader epoch, CRC-free
    frame = _produce(
        version,
        {"orders": [(2, batch_a + batch_b), (0, None)], "clicks": [(5, batch_a)]},
    )
    setup = Setup(encoder)
    outcome = setup.rewrite(frame)
    assert outcome.answer is None and outcome.frame is not None and outcome.acks == -1
    before, after = _read_request(frame), _read_request(outcome.frame)
    assert (after.transactional_id, after.acks, after.timeout) == (
        before.transactional_id,
        before.acks,
        before.timeout,
    )
    assert [(t.name, [p.index for p in t.partition_data]) for t in after.topic_data] == [
        ("orders", [2, 0]),
        ("clicks", [5]),
    ]
    assert after.topic_data[0].partition_data[1].records is None
    rewritten = after.topic_data[0].partition_data[0].records
    assert len(rewritten) < len(batch_a + batch_b)
    assert _decoded(decoder, rewritten) == _expected(first) + _expected(second)
    # Every header field but length, CRC and codec bits as the client sent it.
    old = [_HEADER.unpack_from(b, 0) for b in (batch_a, batch_b)]
    new, pos = [], 0
    while pos < len(rewritten):
        fields = _HEADER.unpack_from(rewritten, pos)
        new.append(fields)
        pos += 12 + fields[1]
    for o, n in zip(old, new, strict=True):
        assert n[5] & 0x07 == CODEC_IDS["zstd"]
        assert (o[0], o[2], o[3], o[5] & ~0x07) == (n[0], n[2], n[3], n[5] & ~0x07)
        assert o[6:] == n[6:]
    kept = decode_batches(rewritten, 1 << 26)
    assert [(b.producer_id, b.producer_epoch, b.base_sequence, b.transactional) for b in kept] == [
        (4242, 3, 17, False),
        (4242, 3, 57, True),
    ]
    reservoir = setup.namespaces["orders"].reservoir
    assert reservoir is not None and reservoir.offered == 45
    # The raw values, at positions the proxy counts per partition (tombstones are not kept).
    sampled = [(p, o, v) for p, o, v in reservoir.snapshot()]
    raw = [r.value for r in first + second]
    assert sampled == [(2, i, v) for i, v in enumerate(raw) if v]


def test_a_control_batch_passes_untouched(encoder: Encoder, events: list[bytes]) -> None:
    control = encode_batch(
        [NewRecord(value=b"\x00\x00\x00\x00\x00\x00", key=b"\x00\x00\x00\x00")],
        producer_id=5,
        producer_epoch=0,
        attributes=CONTROL_BIT | TRANSACTIONAL_BIT,
    )
    data = encode_batch(_records(events[:10]))
    outcome = Setup(encoder).rewrite(_produce(9, {"orders": [(0, control + data)]}))
    records = _read_request(outcome.frame).topic_data[0].partition_data[0].records
    assert records.startswith(control)
    assert records[len(control) :] != data


@pytest.mark.parametrize("codec_in", ["none", "gzip", "snappy-raw", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("codec_out", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_client_compression_is_read_and_the_output_compressed_per_setting(
    codec_in: str, codec_out: str, encoder: Encoder, decoder: Decoder, events: list[bytes]
) -> None:
    records = _records(events[:60])
    batch = _compressed(records, codec_in)
    frame = _produce(11, {"orders": [(1, batch)]})
    outcome = Setup(encoder, output=codec_out).rewrite(frame)
    rewritten = _read_request(outcome.frame).topic_data[0].partition_data[0].records
    assert rewritten[21 + 1] & 0x07 in (CODEC_IDS[codec_out], 0)
    # Read back: a rewriter with no output compression writes the records as it read them.
    reader = BatchRewriter(BatchLimits(1 << 20, 1 << 20, "unused", "none"))
    plain = reader.write_as_read(reader.read(rewritten, Allowance(10**6, 1 << 30)))
    assert _decoded(decoder, plain) == _expected(records)


def _compressed(records: Sequence[NewRecord], codec: str) -> bytes:
    """A batch of `records` compressed as a client would (snappy: xerial or raw)."""
    if codec in ("none", "gzip", "lz4", "zstd"):
        return encode_batch(records, codec=codec)
    plain = encode_batch(records)
    section = plain[61:]
    if codec == "snappy":
        body = Compression().compress(2, section)
    else:
        import cramjam

        body = bytes(cramjam.snappy.compress_raw(section))
    return _with_body(plain, body, 2)


def _with_body(batch: bytes, body: bytes, codec: int) -> bytes:
    from crc32c import crc32c

    attributes = (struct.unpack_from(">h", batch, 21)[0] & ~0x07) | codec
    after = struct.pack(">h", attributes) + batch[23:61] + body
    return (
        batch[:8]
        + struct.pack(">iiB", 49 + len(body), -1, 2)
        + struct.pack(">I", crc32c(after))
        + after
    )


# -- refusals -------------------------------------------------------------------------------------


def _answer(outcome: Any, version: int) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
    assert outcome.frame is None and outcome.answer is not None
    correlation_id, body = read_response(0, version, outcome.answer[4:])
    assert correlation_id == 77
    return {
        (t.name, p.index): (p.error_code, getattr(p, "error_message", None))
        for t in body.responses
        for p in t.partition_responses
    }


def test_what_is_forwarded_is_counted_as_stored_against_the_clients_batches_as_received(
    encoder: Encoder, events: list[bytes]
) -> None:
    control = encode_batch(
        [NewRecord(value=b"\x00\x00\x00\x00\x00\x00", key=b"\x00\x00\x00\x00")],
        producer_id=5,
        producer_epoch=0,
        attributes=CONTROL_BIT | TRANSACTIONAL_BIT,
    )
    first, second = encode_batch(_records(events[:40])), encode_batch(_records(events[40:44]))
    setup = Setup(encoder)
    frame = _produce(9, {"orders": [(0, first + control), (1, second)], "clicks": [(2, first)]})
    after = _read_request(setup.rewrite(frame).frame).topic_data
    sent = {t.name: sum(len(p.records) for p in t.partition_data) for t in after}
    setup.rewrite(_produce(9, {"orders": [(0, first)], "payments": [(0, first)]}))  # refused

    def stored(name: str, topic: str) -> float | None:
        return setup.registry.get_sample_value(name, {"topic": topic, "path": "proxy"})

    assert stored("zdict_stored_bytes_total", "orders") == sent["orders"]
    assert stored("zdict_stored_without_sidecar_bytes_total", "orders") == len(
        first + control + second
    )
    assert stored("zdict_stored_records_total", "orders") == 44
    assert stored("zdict_stored_batches_total", "orders") == 3
    assert stored("zdict_stored_bytes_total", "clicks") == sent["clicks"] < len(first)
    assert stored("zdict_stored_without_sidecar_bytes_total", "clicks") == len(first)


@pytest.mark.parametrize("topic", ["payments", "__consumer_offsets", "_zdict_registry"])
def test_a_topic_not_allowed_is_refused_and_nothing_forwarded(
    topic: str, encoder: Encoder, events: list[bytes]
) -> None:
    batch = encode_batch(_records(events[:5]))
    setup = Setup(encoder, allowed=("*",))
    outcome = setup.rewrite(_produce(9, {"orders": [(0, batch)], topic: [(0, batch)]}))
    if topic == "payments":  # allowed by "*": the request goes through
        assert outcome.frame is not None
        return
    answer = _answer(outcome, 9)
    assert answer[(topic, 0)][0] == ErrorCode.topic_authorization_failed
    assert answer[("orders", 0)][0] == ErrorCode.request_timed_out
    strict = Setup(encoder)
    assert _answer(strict.rewrite(_produce(3, {"payments": [(0, batch)]})), 3) == {
        ("payments", 0): (ErrorCode.topic_authorization_failed, None)
    }


@pytest.mark.parametrize("topic", ["pay)ments", "pay ments", "pay" + "x" * 247, ".pay"])
def test_a_name_a_pattern_allows_but_no_topic_can_have_is_refused_as_invalid(
    topic: str, encoder: Encoder, events: list[bytes]
) -> None:
    batch = encode_batch(_records(events[:5]))
    setup = Setup(encoder, allowed=("pay*", ".pay"))
    answer = _answer(setup.rewrite(_produce(9, {topic: [(0, batch)]})), 9)
    assert list(answer) == [(topic, 0)]
    assert answer[(topic, 0)][0] == ErrorCode.invalid_topic_exception
    assert setup.namespaces == {}  # no namespace set up for it


def test_payments_allowed_by_a_pattern_is_forwarded(encoder: Encoder, events: list[bytes]) -> None:
    batch = encode_batch(_records(events[:5]))
    outcome = Setup(encoder, allowed=("pay*",)).rewrite(_produce(9, {"payments": [(0, batch)]}))
    assert outcome.frame is not None


def _refusal(setup: Setup, batch: bytes, version: int = 9) -> tuple[ErrorCode, str | None]:
    answer = _answer(
        setup.rewrite(_produce(version, {"orders": [(0, batch)], "clicks": [(3, batch[:0])]})),
        version,
    )
    assert answer[("clicks", 3)][0] == ErrorCode.request_timed_out
    return answer[("orders", 0)]


def test_a_bad_crc_is_corrupt_message(encoder: Encoder, events: list[bytes]) -> None:
    batch = bytearray(encode_batch(_records(events[:5])))
    batch[-1] ^= 0xFF
    code, message = _refusal(Setup(encoder), bytes(batch))
    assert code == ErrorCode.corrupt_message and message is not None and "CRC" in message


def test_a_truncated_batch_is_invalid_record(encoder: Encoder, events: list[bytes]) -> None:
    batch = encode_batch(_records(events[:5]))
    assert _refusal(Setup(encoder), batch[:-3])[0] == ErrorCode.invalid_record


def test_a_client_sent_zd_header_is_refused(encoder: Encoder, events: list[bytes]) -> None:
    frame_value = encoder.encode(events[0])
    batch = encode_batch([NewRecord(value=frame_value[0], headers=frame_value[1])])
    code, message = _refusal(Setup(encoder), batch)
    assert code == ErrorCode.invalid_record and message is not None and "'zd'" in message


def test_a_header_key_read_as_zd_up_to_a_nul_byte_is_refused(
    encoder: Encoder, events: list[bytes]
) -> None:
    # librdkafka reads header keys as C strings: `zd\x00x` would reach its consumers as `zd`.
    batch = encode_batch([NewRecord(value=events[0], headers=[("zd\x00x", b"\x80\x01")])])
    code, message = _refusal(Setup(encoder), batch)
    assert code == ErrorCode.invalid_record and message is not None and "NUL" in message


def test_a_value_the_decoders_would_refuse_is_message_too_large(encoder: Encoder) -> None:
    batch = encode_batch([NewRecord(value=b"x" * 5000)])
    assert _refusal(Setup(encoder, max_value=4096), batch)[0] == ErrorCode.message_too_large


def test_a_timestamp_past_a_long_is_invalid_timestamp(encoder: Encoder) -> None:
    batch = encode_batch(
        [
            NewRecord(value=b"a" * 40, timestamp=2**63 - 2),
            NewRecord(value=b"b" * 40, timestamp=2**63 - 2),
        ]
    )
    # The second record's delta moved past 2^63 - 1 ms (the CRC fixed up, as a hostile client).
    body = bytearray(batch[61:])
    second = 1 + body[0] // 2  # where the second record starts (a one-byte length)
    assert body[2] == 0 and body[second + 2] == 0  # both timestamp deltas are 0
    body[second + 2] = 0x04  # the second's: 2
    assert (
        _refusal(Setup(encoder), _with_body(batch, bytes(body), 0))[0]
        == ErrorCode.invalid_timestamp
    )


def test_too_many_records_are_record_list_too_large(encoder: Encoder) -> None:
    batch = encode_batch([NewRecord(value=b"") for _ in range(50)])
    assert _refusal(Setup(encoder, max_records=40), batch)[0] == ErrorCode.record_list_too_large


def test_one_bomb_is_message_too_large(encoder: Encoder) -> None:
    batch = encode_batch([NewRecord(value=b"\0" * (2 << 20))], codec="zstd")
    assert len(batch) < 1000
    code, message = _refusal(Setup(encoder, max_batch=1 << 20), batch)
    assert code == ErrorCode.message_too_large and message is not None


def test_many_small_bombs_are_bounded_per_request(encoder: Encoder) -> None:
    bomb = encode_batch([NewRecord(value=b"\0" * (900 << 10))], codec="gzip")
    started = time.perf_counter()
    code, _ = _refusal(Setup(encoder, max_batch=1 << 20, max_decompressed=4 << 20), bomb * 128)
    assert code == ErrorCode.record_list_too_large
    assert time.perf_counter() - started < 2.0


def test_bad_acks_answer_every_partition_invalid_required_acks(
    encoder: Encoder, events: list[bytes]
) -> None:
    batch = encode_batch(_records(events[:3]))
    answer = _answer(Setup(encoder).rewrite(_produce(5, {"orders": [(0, batch)]}, acks=2)), 5)
    assert answer[("orders", 0)][0] == ErrorCode.invalid_required_acks


def test_a_refused_request_with_acks_0_closes_the_connection(encoder: Encoder) -> None:
    frame = _produce(9, {"payments": [(0, None)]}, acks=0)
    with pytest.raises(ProtocolError, match="acks=0"):
        Setup(encoder).rewrite(frame)


def test_refusals_are_counted_by_reason(encoder: Encoder) -> None:
    setup = Setup(encoder)
    setup.rewrite(_produce(9, {"payments": [(0, None)]}))
    value = setup.registry.get_sample_value(
        "zdict_proxy_refused_produce_requests_total", {"reason": "topic"}
    )
    assert value == 1.0


def test_a_topic_past_max_topics_is_refused_counted_and_logged_once(
    store: DictionaryStore, encoder: Encoder, events: list[bytes]
) -> None:
    setup = Setup(encoder, allowed=("*",))
    settings = Settings(
        dictionaries=store.root,
        registry=RegistrySettings(enabled=False),
        training=TrainingSettings(enabled=False),
        proxy=ProxySettings(max_topics=2),
    )
    routes = ProxyRoutes(settings, store, None, setup.metrics)
    setup.rewriter.namespace = lambda topic: routes.route(topic).namespace
    batch = encode_batch(_records(events[:5]))
    try:
        for topic in ("orders", "clicks", "orders"):
            assert setup.rewrite(_produce(9, {topic: [(0, batch)]})).frame is not None
        with capture_logs() as logs:
            answers = [setup.rewrite(_produce(9, {"payments": [(0, batch)]})) for _ in range(2)]
        code, message = _answer(answers[0], 9)[("payments", 0)]
        assert code == ErrorCode.policy_violation
        assert message is not None and "ZDICT_PROXY__MAX_TOPICS" in message
        assert routes.namespace_of("payments") is None, "no namespace was set up for it"
        assert setup.rewrite(_produce(9, {"clicks": [(0, batch)]})).frame is not None
    finally:
        routes.close()
    refused = setup.registry.get_sample_value(
        "zdict_proxy_refused_produce_requests_total", {"reason": "too_many_topics"}
    )
    assert refused == 2.0
    assert [line["kind"] for line in logs if line["event"] == "produce_refused"] == [
        "too_many_topics"
    ]


# -- the bounded reader ---------------------------------------------------------------------------


def _header_only(version: int) -> bytes:
    """A Produce frame (prefix excluded) up to its topic count."""
    frame = _produce(version, {})
    return frame[4:-4] if version < 9 else frame[4:-2]


@pytest.mark.parametrize("version", [3, 9])
def test_a_small_frame_declaring_a_huge_count_is_refused_without_allocating(
    version: int, encoder: Encoder
) -> None:
    head = _header_only(version)
    count = struct.pack(">i", 0x7FFFFFF0) if version < 9 else b"\xf0\xff\xff\xff\x0f"
    body = head + count + b"\0" * 4
    started = time.perf_counter()
    with pytest.raises(ProtocolError, match="declares"):
        Setup(encoder).rewrite(struct.pack(">i", len(body)) + body)
    assert time.perf_counter() - started < 0.1


@pytest.mark.parametrize("version", [3, 9])
def test_a_records_length_past_the_frame_is_refused(version: int, encoder: Encoder) -> None:
    frame = _produce(version, {"orders": [(0, b"x" * 10)]})
    cut = frame[:-15] + frame[-5:] if version < 9 else frame[:-14] + frame[-3:]
    cut = struct.pack(">i", len(cut) - 4) + cut[4:]
    with pytest.raises(ProtocolError):
        Setup(encoder).rewrite(cut)


def test_a_batch_declaring_more_records_than_its_bytes_is_refused(encoder: Encoder) -> None:
    batch = bytearray(encode_batch([NewRecord(value=b"v" * 20)]))
    struct.pack_into(">i", batch, 57, 50_000)
    fixed = _with_body(bytes(batch), bytes(batch[61:]), 0)
    code, message = _refusal(Setup(encoder), fixed)
    assert code == ErrorCode.invalid_record and message is not None and "50000" in message


@pytest.mark.parametrize("codec", ["none", "zstd"])
@pytest.mark.parametrize("deltas", [(1, 0, 2), (0, 0, 1), (0, 1, 3), (5, 6, 7)])
def test_offset_deltas_not_0_to_n_minus_1_in_order_are_invalid_record(
    codec: str, deltas: tuple[int, ...], encoder: Encoder
) -> None:
    # A broker takes an uncompressed batch's offset deltas as they come (LogValidator checks
    # the last offset delta against the count, not each record): stored offsets would not match.
    section = b"".join(
        record_bytes(f"value-{i}".encode() * 5, offset_delta=delta)
        for i, delta in enumerate(deltas)
    )
    plain = encode_batch([NewRecord(value=b"v") for _ in deltas])
    body = Compression().compress(CODEC_IDS[codec], section) if codec != "none" else section
    code, message = _refusal(Setup(encoder), _with_body(plain, body, CODEC_IDS[codec]))
    assert code == ErrorCode.invalid_record
    assert message is not None and "offset delta" in message and "0..n-1" in message


@pytest.mark.parametrize("last_offset_delta", [0, 1, 3, -1])
def test_a_last_offset_delta_other_than_count_minus_1_is_invalid_record(
    last_offset_delta: int, encoder: Encoder
) -> None:
    batch = bytearray(encode_batch([NewRecord(value=b"v" * 20) for _ in range(3)]))
    struct.pack_into(">i", batch, 23, last_offset_delta)
    code, message = _refusal(Setup(encoder), _with_body(bytes(batch), bytes(batch[61:]), 0))
    assert code == ErrorCode.invalid_record
    assert message == f"a batch of 3 records has last offset delta {last_offset_delta}, not 2"


# -- local answers in request order ---------------------------------------------------------------


@asynccontextmanager
async def _proxy(encoder: Encoder) -> AsyncIterator[tuple[int, list[bytes]]]:
    """A Listeners with Produce rewriting against a broker that answers after 0.2 s."""
    got: list[bytes] = []

    async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                got.append(frame)
                await asyncio.sleep(0.2)
                correlation = frame[4:8]
                answer = correlation + b"\0\0\0\0" + b"\0\0\0\0"  # Produce v5: no topics
                writer.write(struct.pack(">i", len(answer)) + answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(broker, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    setup = Setup(encoder)
    settings = ProxySettings(
        listen="127.0.0.1:0", max_request_bytes=1 << 20, max_buffered_bytes=4 << 20
    )
    metrics = ForwardMetrics(CollectorRegistry())
    filters = functools.partial(proxy_filters, settings, metrics, produce=setup.rewriter)
    listeners = Listeners(settings, [Address("127.0.0.1", port)], metrics, filters)
    await listeners.start()
    try:
        yield listeners._servers[None].sockets[0].getsockname()[1], got
    finally:
        await listeners.stop()
        server.close()


def test_local_answers_come_in_request_order(encoder: Encoder, events: list[bytes]) -> None:
    batch = encode_batch(_records(events[:5]))

    async def main() -> None:
        async with _proxy(encoder) as (port, got):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            good = bytearray(_produce(5, {"orders": [(0, batch)]}))
            bad = bytearray(_produce(5, {"payments": [(0, batch)]}))
            struct.pack_into(">i", good, 8, 1)
            struct.pack_into(">i", bad, 8, 2)
            writer.write(bytes(good) + bytes(bad))
            await writer.drain()
            order = []
            for _ in range(2):
                size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))[0]
                frame = await asyncio.wait_for(reader.readexactly(size), 5)
                order.append(struct.unpack_from(">i", frame)[0])
            assert order == [1, 2]
            assert len(got) == 1  # the refused request never went upstream
            # Nothing awaited: a refused request is answered at once.
            writer.write(bytes(bad))
            await writer.drain()
            size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))[0]
            frame = await asyncio.wait_for(reader.readexactly(size), 5)
            assert struct.unpack_from(">i", frame)[0] == 2
            writer.close()

    asyncio.run(main())


def test_a_refused_request_sets_up_nothing_and_samples_nothing(
    encoder: Encoder, events: list[bytes]
) -> None:
    setup = Setup(encoder)
    bad = bytearray(encode_batch(_records(events[:5])))
    bad[-1] ^= 1
    setup.rewrite(
        _produce(9, {"orders": [(0, encode_batch(_records(events[:5]))), (1, bytes(bad))]})
    )
    assert "orders" not in setup.namespaces  # refused before anything was encoded or sampled


def test_the_refusal_error_names_its_code() -> None:
    refused = ProduceRefused(87, "invalid_record", "why")
    assert (refused.code, refused.kind, str(refused)) == (87, "invalid_record", "why")


def test_a_refused_acks_0_request_closes_its_connection(encoder: Encoder) -> None:
    async def main() -> None:
        async with _proxy(encoder) as (port, got):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_produce(5, {"payments": [(0, None)]}, acks=0))
            await writer.drain()
            assert await asyncio.wait_for(reader.read(1), 5) == b""
            assert got == []
            writer.close()

    asyncio.run(main())


def _mutations(seed: int, frame: bytes, count: int) -> list[bytes]:
    """`count` copies of `frame` with a few bytes changed, the CRC of each batch fixed up
    where the change fell inside one (so the reader goes past the CRC check)."""
    import random

    from crc32c import crc32c

    rng = random.Random(seed)
    out = []
    for _ in range(count):
        data = bytearray(frame)
        for _ in range(rng.randint(1, 4)):
            # After the api key and version, which the connection checks before the rewriter.
            data[rng.randrange(8, len(data))] = rng.randrange(256)
        start = frame.index(b"\x00\x00\x00\x00\x00\x00\x00\x00", 30)  # the first batch
        if rng.random() < 0.7 and start + 61 < len(data):
            length = struct.unpack_from(">i", data, start + 8)[0]
            end = min(len(data), start + 12 + max(length, 49))
            struct.pack_into(">I", data, start + 17, crc32c(bytes(data[start + 21 : end])))
        out.append(bytes(data))
    return out


@pytest.mark.parametrize("codec", ["none", "zstd", "gzip", "lz4", "snappy", "snappy-raw"])
def test_mutated_frames_are_answered_or_refused_never_raise_otherwise(
    codec: str, encoder: Encoder, events: list[bytes]
) -> None:
    batch = _compressed(_records(events[:8]), codec)
    frame = _produce(9, {"orders": [(0, batch)]})
    setup = Setup(encoder, max_batch=64 << 10, max_decompressed=256 << 10)
    started = time.perf_counter()
    outcomes = {"forwarded": 0, "answered": 0, "closed": 0}
    for mutated in _mutations(len(codec), frame, 1500):
        try:
            outcome = setup.rewrite(mutated)
        except ProtocolError:
            outcomes["closed"] += 1
            continue
        outcomes["forwarded" if outcome.frame is not None else "answered"] += 1
        if outcome.frame is not None:  # what goes upstream is a well-formed request
            body = outcome.frame[4:]
            assert struct.unpack_from(">i", outcome.frame)[0] == len(body)
            parse_produce(body, read_request_header(body, 2), True)
    assert outcomes["answered"] > 0 and outcomes["closed"] > 0
    assert time.perf_counter() - started < 20


@pytest.fixture
def crossover_encoder(store: DictionaryStore, add_dictionary: AddDictionary) -> Encoder:
    """An encoder whose dictionary says raw values + zstd win from 8 records per batch."""
    added = add_dictionary("orders", raw_crossover={"zstd": 8.0, "lz4": None})
    store.activate("orders", added.id)
    return Encoder.from_store(store, "orders", min_size=16, header_key=HEADER_KEY)


def _outcomes(setup: Setup) -> dict[str, float]:
    return {
        outcome: setup.registry.get_sample_value(
            "zdict_records_total", {"topic": "orders", "op": "encode", "outcome": outcome}
        )
        or 0.0
        for outcome in ("compressed", "raw")
    }


def _output_batches(setup: Setup) -> dict[tuple[str, str], float | None]:
    """`zdict_proxy_output_batches_total` of topic orders, by (partition, mode)."""
    return {
        (partition, mode): setup.registry.get_sample_value(
            "zdict_proxy_output_batches_total",
            {"topic": "orders", "partition": partition, "mode": mode},
        )
        for partition in ("0", "1")
        for mode in ("frames", "raw")
    }


@pytest.mark.parametrize("codec_in", ["none", "zstd"])
def test_a_batch_holding_the_crossover_goes_raw_and_a_smaller_one_as_frames(
    codec_in: str, crossover_encoder: Encoder, decoder: Decoder, events: list[bytes]
) -> None:
    full, small = _records(events[:16]), _records(events[16:18], 16)
    full_batch = _compressed(full, codec_in)
    frame = _produce(11, {"orders": [(0, full_batch), (1, encode_batch(small))]})
    setup = Setup(crossover_encoder)
    after = _read_request(setup.rewrite(frame).frame).topic_data[0].partition_data
    raw_batch, framed = after[0].records, after[1].records
    if codec_in == "zstd":  # the output codec's own batch: kept byte for byte
        assert raw_batch == full_batch
    (stored,) = decode_batches(raw_batch, 1 << 26)
    assert [r.value for r in stored.records] == [r.value for r in full]
    assert all(HEADER_KEY.encode() not in [k for k, _ in r.headers] for r in stored.records)
    assert _decoded(decoder, raw_batch) == _expected(full)
    (written,) = decode_batches(framed, 1 << 26)
    assert any(k == HEADER_KEY.encode() for r in written.records for k, _ in r.headers)
    assert _decoded(decoder, framed) == [
        (i, *rest) for i, (_, *rest) in enumerate(_expected(small))
    ]
    counts = _outcomes(setup)
    assert counts["raw"] == len(full) and counts["compressed"] >= 1
    assert _output_batches(setup) == {
        ("0", "frames"): 0,
        ("0", "raw"): 1,
        ("1", "frames"): 1,
        ("1", "raw"): 0,
    }


def test_output_mode_frames_writes_frames_whatever_the_fill(
    crossover_encoder: Encoder, events: list[bytes]
) -> None:
    setup = Setup(crossover_encoder)
    setup.rewriter.raw_batches = False
    full = _records(events[:16])
    frame = _produce(11, {"orders": [(0, encode_batch(full))]})
    after = _read_request(setup.rewrite(frame).frame).topic_data[0].partition_data
    (written,) = decode_batches(after[0].records, 1 << 26)
    framed = [r for r in written.records if any(k == HEADER_KEY.encode() for k, _ in r.headers)]
    assert framed and _outcomes(setup)["raw"] == 0


@pytest.mark.parametrize("codec_in", ["none", "zstd"])
def test_a_batch_near_the_crossover_is_written_as_it_came_when_that_is_fewer_bytes(
    codec_in: str, crossover_encoder: Encoder, decoder: Decoder, events: list[bytes]
) -> None:
    # Under the crossover (8), 4 records or more and half of it: written both ways, the fewer
    # bytes kept (`_blob_batch`: fewer raw).
    copies = _blob_batch(events)
    below = _records(events[20:23], 6)  # 3 records: frames, not compared
    frame = _produce(
        11, {"orders": [(0, _compressed(copies, codec_in)), (1, _compressed(below, codec_in))]}
    )
    setup = Setup(crossover_encoder)
    after = _read_request(setup.rewrite(frame).frame).topic_data[0].partition_data
    (as_came,) = decode_batches(after[0].records, 1 << 26)
    assert all(HEADER_KEY.encode() not in [k for k, _ in r.headers] for r in as_came.records)
    (framed,) = decode_batches(after[1].records, 1 << 26)
    assert any(HEADER_KEY.encode() in [k for k, _ in r.headers] for r in framed.records)
    assert _decoded(decoder, after[0].records) == _expected(copies)
    assert _decoded(decoder, after[1].records) == _expected(below)
    assert _output_batches(setup) == {
        ("0", "frames"): 0,
        ("0", "raw"): 1,
        ("1", "frames"): 1,
        ("1", "raw"): 0,
    }


def _blob_batch(events: list[bytes]) -> list[NewRecord]:
    """6 events sharing a blob the dictionary does not know: fewer bytes raw under the batch
    codec (which stores it once) than as frames (each holds it entropy-coded)."""
    blob = random.Random(1).randbytes(150).hex().encode()
    return _records([e[:-1] + b',"blob":"' + blob + b'"}' for e in events[:6]])


@pytest.mark.parametrize("crossover", [16.0, 8.0])
def test_a_batch_below_half_the_crossover_or_with_the_comparison_off_is_written_as_frames(
    crossover: float, store: DictionaryStore, add_dictionary: AddDictionary, events: list[bytes]
) -> None:
    # 6 records: below half of 16 (not compared); at 8, compared unless compare_batches is off.
    added = add_dictionary("orders", raw_crossover={"zstd": crossover, "lz4": None})
    store.activate("orders", added.id)
    setup = Setup(Encoder.from_store(store, "orders", min_size=16, header_key=HEADER_KEY))
    setup.rewriter.compare_batches = crossover != 8.0
    frame = _produce(11, {"orders": [(0, encode_batch(_blob_batch(events)))]})
    after = _read_request(setup.rewrite(frame).frame).topic_data[0].partition_data
    (written,) = decode_batches(after[0].records, 1 << 26)
    assert any(HEADER_KEY.encode() in [k for k, _ in r.headers] for r in written.records)


def _framed_by(
    rewriter: BatchRewriter,
    encoder: Encoder,
    rule: FramesOrRaw,
    records: list[NewRecord],
    codec: str = "none",
) -> bool:
    """Whether the batch of `records` (compressed with `codec`) is written with frames by
    `rule` without a crossover: every batch of at least 4 records compared (or as its
    comparisons found lately)."""
    partition = rewriter.read(encode_batch(records, codec=codec), Allowance(100_000, 64 << 20))
    out = write(rewriter, partition, encoder.encode_batch(partition.inputs), rule)
    (written,) = decode_batches(out, 1 << 26)
    return any(HEADER_KEY.encode() in [k for k, _ in r.headers] for r in written.records)


def test_a_batch_size_compared_lately_is_written_the_way_that_won_until_compared_again(
    crossover_encoder: Encoder, events: list[bytes]
) -> None:
    # The blob batch of 6 goes as it came (fewer bytes); the 6 plain events after it would be
    # fewer bytes as frames, but their size was compared lately: as they came too, until the
    # size is compared again, `COMPARE_EVERY` batches later. Uncompressed batches: as they came
    # costs a compression in the output codec (zstd).
    rewriter = BatchRewriter(BatchLimits(1 << 20, 1 << 20, HEADER_KEY, "zstd"))
    rule = FramesOrRaw("zstd")
    plain = _records(events[100:106])
    assert not _framed_by(rewriter, crossover_encoder, rule, _blob_batch(events))
    framed = [_framed_by(rewriter, crossover_encoder, rule, plain) for _ in range(COMPARE_EVERY)]
    assert framed == [False] * (COMPARE_EVERY - 1) + [True]
    assert _framed_by(rewriter, crossover_encoder, rule, plain), "frames won, and stay"


def test_a_batch_in_the_output_codec_is_compared_every_time(
    crossover_encoder: Encoder, events: list[bytes]
) -> None:
    # As it came is the batch's own bytes: no size is followed the way it won lately.
    rewriter = BatchRewriter(BatchLimits(1 << 20, 1 << 20, HEADER_KEY, "zstd"))
    rule = FramesOrRaw("zstd")
    assert not _framed_by(rewriter, crossover_encoder, rule, _blob_batch(events), "zstd")
    plain = _records(events[100:106])
    assert _framed_by(rewriter, crossover_encoder, rule, plain, "zstd")


def test_comparisons_remember_a_bounded_number_of_sizes() -> None:
    comparisons = Comparisons(every=3)
    assert comparisons.known(5) is None
    comparisons.found(5, True)
    assert [comparisons.known(5), comparisons.known(5), comparisons.known(5)] == [True, True, None]
    for size in range(COMPARED_SIZES):
        comparisons.found(1000 + size, False)
    comparisons.found(5, False)  # one size more than it keeps: it starts again
    assert comparisons.known(1000) is None and comparisons.known(5) is False


def test_without_a_crossover_no_batch_goes_raw_unencoded_and_each_keeps_the_fewer_bytes(
    encoder: Encoder, decoder: Decoder, events: list[bytes]
) -> None:
    setup = Setup(encoder)
    full, small = _records(events[:64]), _records(events[64:67], 64)
    frame = _produce(11, {"orders": [(0, encode_batch(full)), (1, encode_batch(small))]})
    after = _read_request(setup.rewrite(frame).frame).topic_data[0].partition_data
    # Values encoded, none counted raw; the full batch written as it came, 64 events being fewer
    # bytes under the batch codec than as frames; 3 records as frames, not compared.
    counts = _outcomes(setup)
    assert counts["raw"] == 0 and counts["compressed"] > len(full) / 2
    (as_came,) = decode_batches(after[0].records, 1 << 26)
    assert all(HEADER_KEY.encode() not in [k for k, _ in r.headers] for r in as_came.records)
    (framed,) = decode_batches(after[1].records, 1 << 26)
    assert any(k == HEADER_KEY.encode() for r in framed.records for k, _ in r.headers)
    assert _decoded(decoder, after[0].records) == _expected(full)


@pytest.mark.parametrize("codec_in", ["none", "zstd"])
def test_a_request_whose_batches_all_hold_the_crossover_is_written_raw_and_counted(
    codec_in: str, crossover_encoder: Encoder, decoder: Decoder, events: list[bytes]
) -> None:
    # Both at least twice the crossover (8): raw without encoding.
    first, second = _records(events[:16]), _records(events[16:34], 16)
    batches = [_compressed(first, codec_in), _compressed(second, codec_in)]
    frame = _produce(11, {"orders": [(0, batches[0]), (1, batches[1])]})
    setup = Setup(crossover_encoder)
    after = _read_request(setup.rewrite(frame).frame).topic_data[0].partition_data
    for written, sent, records in zip(after, batches, (first, second), strict=True):
        (stored,) = decode_batches(written.records, 1 << 26)
        assert stored.codec == "zstd"  # the output codec, whatever the client sent
        if codec_in == "zstd":
            assert written.records == sent  # already in the output codec: byte for byte
        assert [(r.value, list(r.headers)) for r in stored.records] == [
            (r.value, [(k.encode(), v) for k, v in r.headers]) for r in records
        ]
    counts = _outcomes(setup)
    assert counts == {"compressed": 0.0, "raw": float(len(first) + len(second))}
    raw_bytes = setup.registry.get_sample_value(
        "zdict_input_bytes_total", {"topic": "orders", "op": "encode"}
    )
    assert raw_bytes == sum(len(r.value or b"") for r in first + second)


def test_batches_past_a_crossover_that_moved_are_read_again_and_encoded(
    store: DictionaryStore,
    add_dictionary: AddDictionary,
    crossover_encoder: Encoder,
    decoder: Decoder,
    events: list[bytes],
) -> None:
    setup = Setup(crossover_encoder)
    full = _records(events[:16])
    frame = _produce(11, {"orders": [(0, encode_batch(full))]})
    for _ in range(2):  # the first request learns the crossover, the second reads values only
        after = _read_request(setup.rewrite(frame).frame).topic_data[0].partition_data
        (stored,) = decode_batches(after[0].records, 1 << 26)
        assert all(HEADER_KEY.encode() not in [k for k, _ in r.headers] for r in stored.records)
    moved = add_dictionary("orders", raw_crossover={"zstd": 64.0, "lz4": None})
    store.activate("orders", moved.id)
    setup.namespace("orders").encoder = Encoder.from_store(
        store, "orders", min_size=16, header_key=HEADER_KEY
    )
    after = _read_request(setup.rewrite(frame).frame).topic_data[0].partition_data
    assert _decoded(decoder, after[0].records) == _expected(full)
    # Read again whole and encoded (then written the fewer-bytes way), not raw unencoded.
    assert _outcomes(setup) == {"compressed": float(len(full) - 1), "raw": 2.0 * len(full)}


def test_a_batch_written_again_takes_the_batch_level_one_passed_as_it_came_the_clients(
    encoder: Encoder, decoder: Decoder, events: list[bytes]
) -> None:
    records = _records(events[:400])
    batch = encode_batch(records, codec="zstd")
    rewriter = BatchRewriter(BatchLimits(1 << 20, 1 << 20, HEADER_KEY, "zstd"))

    def written(level: int) -> bytes:
        partition = rewriter.read(batch, Allowance(10**6, 1 << 30))
        encoded = encoder.encode_batch(partition.inputs)
        return write(rewriter, partition, encoded, level=level)

    at_default, at_nine = written(3), written(9)
    assert len(at_nine) < len(at_default)
    assert _decoded(decoder, at_nine) == _decoded(decoder, at_default) == _expected(records)
    # As it came (the output codec is the client's): the client's bytes, whatever the level.
    as_read = rewriter.write_as_read(rewriter.read(batch, Allowance(10**6, 1 << 30)), level=9)
    assert as_read == batch


def test_a_namespace_writes_batches_again_at_its_dictionarys_batch_level(
    add_dictionary: AddDictionary,
) -> None:
    metrics = Metrics(CollectorRegistry())
    chosen = Encoder(add_dictionary("clicks", batch_level=9), header_key=HEADER_KEY)
    assert _namespace("clicks", chosen, metrics).batch_level == 9
    assert _namespace("none", Encoder(None), metrics).batch_level == 3


def test_the_crossover_is_measured_on_the_topics_latest_values(
    store: DictionaryStore, add_dictionary: AddDictionary, events: list[bytes]
) -> None:
    # Trained at 64; the topic's values share a blob the dictionary does not know, which raw
    # values under the batch codec store once: measured on the first request's values, the
    # second request's batch of 32 goes raw unencoded.
    added = add_dictionary("orders", raw_crossover={"zstd": 64.0, "lz4": None})
    store.activate("orders", added.id)
    setup = Setup(Encoder.from_store(store, "orders", min_size=16, header_key=HEADER_KEY))
    blob = random.Random(2).randbytes(150).hex().encode()
    frame = _produce(
        11,
        {
            "orders": [
                (
                    0,
                    encode_batch(
                        _records([e[:-1] + b',"b":"' + blob + b'"}' for e in events[:32]])
                    ),
                )
            ]
        },
    )
    setup.rewrite(frame)
    assert _outcomes(setup)["raw"] == 0, "the trained crossover: compared, encoded"
    setup.rewrite(frame)
    assert _outcomes(setup)["raw"] == 32
