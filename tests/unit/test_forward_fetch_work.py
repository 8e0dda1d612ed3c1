"""The work a Fetch response's decoding may cost (issue 37): bombs stored on the broker and
records naming unknown dictionaries charged to the response's budget whether they decode or not,
the rest of the first batch sent as stored past it and later batches held back; values
decoded within what is left; unknown ids looked up at most once per interval for every client.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import pytest
import zstandard
from kio.index import load_response_schema
from kio.static.primitive import Records
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from sidecar.codec import Decoder, StaticResolver
from sidecar.codec.wire import tag_value
from sidecar.dictionaries.registry import RegistryResolver
from sidecar.errors import (
    DecodeLimitReached,
    OutputTooLarge,
    RegistryUnavailable,
    UnknownDictionary,
)
from sidecar.proxy.addresses import Address
from sidecar.proxy.fetch import FetchDecoding
from sidecar.proxy.fetch_metrics import FetchMetrics
from sidecar.proxy.fetched import FAILURE_COST, DecodeWork, PartitionDecoder
from sidecar.proxy.lookups import ThrottledLookups
from sidecar.proxy.responses import encode_response, parse_response
from sidecar.proxy.topics import TopicView
from sidecar.proxy.versions import FETCH
from tests.record_batches import NewRecord, decode_batches, encode_batch
from tests.unit.forward_messages import filled
from tests.unit.log_registry import LogRegistry, dictionary

MIB = 1024 * 1024
#: The decoder's value limit in these tests, and a bomb's output just past it.
MAX_VALUE = MIB
LIMIT = 1 << 28


def _bomb(size: int = MAX_VALUE + 1) -> bytes:
    """A frame of `size` zero bytes that does not declare its size: a few hundred bytes."""
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=20, write_content_size=0)
    cobj = zstandard.ZstdCompressor(compression_params=params).compressobj()
    return cobj.compress(bytes(size)) + cobj.flush()


def _ours(value: bytes, dict_id: int = 0, key: bytes = b"k") -> NewRecord:
    return NewRecord(value, key=key, headers=[("zd", tag_value(dict_id, "standard"))])


def _plain_zstd(value: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(value)


def test_bombs_cost_the_budget_and_the_rest_of_the_first_batch_goes_as_stored() -> None:
    good = _plain_zstd(b"sound value")
    records = [_ours(_bomb()) for _ in range(200)] + [_ours(good)]
    stored = encode_batch(records, codec="zstd")
    work = DecodeWork(8 * MIB)
    decoder = PartitionDecoder(Decoder(max_output_size=MAX_VALUE))

    started = time.process_time()
    result = decoder.rewrite(stored, limit=LIMIT, first=True, work=work)
    seconds = time.process_time() - started

    out = decode_batches(result.data, LIMIT)
    assert [r.value for r in out[0].records] == [r.value for r in records]
    # Each bomb inflates at most what is left: ~8 of the 200 are tried, the rest go as stored.
    assert result.failed <= 9
    assert result.failed + result.over_budget == 201
    assert result.budget_spent
    assert work.left() <= 0
    assert work.spent <= 8 * MIB + 9 * FAILURE_COST + 2 * MIB
    print(f"\n200 bombs of {MAX_VALUE + 1} B: {result.failed} tried, {seconds:.3f} s CPU")


def test_a_later_batch_past_the_budget_is_held_back_for_the_next_fetch() -> None:
    good = [_ours(_plain_zstd(b"value %d" % i)) for i in range(10)]
    bombs = encode_batch([_ours(_bomb()) for _ in range(20)])
    tail = encode_batch(good)
    decoder = PartitionDecoder(Decoder(max_output_size=MAX_VALUE))

    first = decoder.rewrite(tail + bombs + tail, limit=LIMIT, first=True, work=DecodeWork(4 * MIB))

    assert first.decoded == 10
    assert first.held_back is not None and "decoding work" in first.held_back
    assert decode_batches(first.data, LIMIT)[0].records[0].value == b"value 0"
    assert len(decode_batches(first.data, LIMIT)) == 1
    spent = DecodeWork(4 * MIB, spent=4 * MIB)
    later = decoder.rewrite(tail, limit=LIMIT, first=False, work=spent)
    assert later.data == b"" and later.held_back is not None


def test_sound_values_decode_within_the_budget_as_before() -> None:
    values = [bytes([i]) * 4000 for i in range(50)]
    stored = encode_batch([_ours(_plain_zstd(v)) for v in values], codec="lz4")
    work = DecodeWork(MIB)

    result = PartitionDecoder(Decoder()).rewrite(stored, limit=LIMIT, first=False, work=work)

    assert result.decoded == 50 and result.over_budget == 0 and result.held_back is None
    assert [r.value for r in decode_batches(result.data, LIMIT)[0].records] == values
    assert 200_000 <= work.spent < 300_000


def test_a_value_is_decoded_within_the_bound_it_is_given() -> None:
    declared = zstandard.ZstdCompressor().compress(bytes(5000))
    undeclared = _bomb(5000)
    decoder = Decoder(max_output_size=MAX_VALUE)
    headers = [("zd", b"0")]
    for frame in (declared, undeclared):
        assert decoder.decode(frame, headers, limit=5000) == bytes(5000)
        with pytest.raises(DecodeLimitReached, match="this call's bound is 4999 bytes"):
            decoder.decode(frame, headers, limit=4999)
    with pytest.raises(OutputTooLarge, match="max_output_size") as raised:
        decoder.decode(_bomb(), headers, limit=LIMIT)
    assert not isinstance(raised.value, DecodeLimitReached)


def test_unknown_ids_are_charged_so_a_response_of_them_is_bounded() -> None:
    records = [_ours(b"x" * 20, dict_id=40000 + i) for i in range(5000)]
    stored = encode_batch(records)
    work = DecodeWork(16 * MIB)

    result = PartitionDecoder(Decoder(StaticResolver())).rewrite(
        stored, limit=LIMIT, first=True, work=work
    )

    assert result.failed == 16 * MIB // (FAILURE_COST + 512 + 20) + 1
    assert result.failed + result.over_budget == 5000
    assert result.data == stored


def _registry_resolver(clock: list[float]) -> tuple[LogRegistry, ThrottledLookups]:
    registry = LogRegistry()
    inner = RegistryResolver(registry, follow_interval=None)
    return registry, ThrottledLookups(inner, interval=5.0, clock=lambda: clock[0])


def test_unknown_ids_read_the_registry_once_per_interval_for_all_ids() -> None:
    clock = [100.0]
    registry, lookups = _registry_resolver(clock)

    with pytest.raises(UnknownDictionary):
        lookups.get(40000)  # the first lookup reads the registry
    for dict_id in range(40001, 40100):
        with pytest.raises(RegistryUnavailable, match="looked up within 5 s"):
            lookups.get(dict_id)  # newer than that read: tried again later, no read now
    clock[0] += 1.0
    with pytest.raises(RegistryUnavailable):
        lookups.get(40050)
    assert registry.reads == 1

    clock[0] += 5.0
    with pytest.raises(UnknownDictionary):
        lookups.get(40001)  # the next read, after the interval
    for dict_id in range(40002, 40100):
        with pytest.raises(UnknownDictionary, match="when it was last read"):
            lookups.get(dict_id)  # asked for before that read: unknown without another
    assert registry.reads == 2
    assert lookups.reads == 2


def test_a_dictionary_published_after_a_read_is_found_by_the_next_one(
    trained_bytes: bytes,
) -> None:
    clock = [0.0]
    registry, lookups = _registry_resolver(clock)
    with pytest.raises(UnknownDictionary):
        lookups.get(40000)
    writer = LogRegistry()  # another process's registry, on the same log
    writer.log = registry.log
    writer.publish(dictionary(trained_bytes, 32768))
    with pytest.raises(RegistryUnavailable):
        lookups.get(32768)  # held back, not taken for unknown
    clock[0] = 6.0
    assert lookups.get(32768).id == 32768
    assert lookups.get(32768).id == 32768
    assert registry.reads == 2


def _response(records: bytes) -> bytes:
    """A Fetch v4 response frame (no size prefix) of one partition of topic `t`."""
    schema = load_response_schema(FETCH, 4)
    module = sys.modules[schema.__module__]
    partition = filled(module.PartitionData, partition_index=0, records=Records(records))
    topic = filled(module.FetchableTopicResponse, topic="t", partitions=(partition,))
    return encode_response(7, filled(schema, responses=(topic,)))[4:]


def test_a_response_over_its_budget_is_counted_and_logged_once_a_minute() -> None:
    prometheus = CollectorRegistry()
    now = [0.0]
    fetch = FetchDecoding(
        Decoder(max_output_size=MAX_VALUE),
        topics=TopicView("_zdict_dictionaries"),
        metrics=FetchMetrics(prometheus),
        max_bytes=LIMIT,
        max_unread_bytes=LIMIT,
        decode_budget=4 * MIB,
        clock=lambda: now[0],
    )
    frame = _response(encode_batch([_ours(_bomb()) for _ in range(30)]))

    async def locate(nodes: Any) -> dict[int, Address | None]:
        return {}

    async def twice() -> list[bytes]:
        return [
            await fetch.rewrite(
                4, frame, client_id="app", free=lambda: LIMIT, hold=lambda n: None, locate=locate
            )
            for _ in range(2)
        ]

    try:
        with capture_logs() as logs:
            outs = asyncio.run(twice())
    finally:
        fetch.close()

    for out in outs:
        records = parse_response(FETCH, 4, out[4:])[1].responses[0].partitions[0].records
        assert len(decode_batches(bytes(records), LIMIT)[0].records) == 30
    responses = prometheus.get_sample_value("zdict_proxy_fetch_over_budget_responses_total")
    over = prometheus.get_sample_value(
        "zdict_proxy_fetch_records_total", {"topic": "t", "outcome": "over_budget"}
    )
    failed = prometheus.get_sample_value(
        "zdict_proxy_fetch_records_total", {"topic": "t", "outcome": "failed"}
    )
    assert responses == 2
    assert over is not None and failed is not None and over + failed == 60
    spent = [e for e in logs if e["event"] == "fetch_decode_budget_spent"]
    assert len(spent) == 1
    assert "ZDICT_PROXY__FETCH_DECODE_BUDGET_BYTES" in spent[0]["error"]
