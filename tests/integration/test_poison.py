"""Poison input through a real relay: every record is either encoded or passed through (and
decodes byte-exact), or set aside in the dead-letter topic with the right reason; the relay
never crashes. Without a dead-letter topic the relay stops at the first such record and commits
nothing past it.

The records come from hypothesis strategies (a fixed seed, so the run is the same every time):
empty and 1-byte values, values at and above the output topic's max.message.bytes, random
binary, zstd and gzip values, tombstones, non-UTF-8 and duplicate header keys, and records that
spoof our header.
"""

from __future__ import annotations

import gzip
import random
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import zstandard
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from sidecar.codec import Decoder, Encoder
from sidecar.dictionaries.store import DictionaryStore
from sidecar.relay.dead_letters import PREFIX

from .launch import StartSidecar
from .probe import KafkaProbe
from .records import ConsumeAll, Outgoing, ProduceRecords, Record
from .topics import MakeTopic
from .waiting import wait_until

#: The output topic takes record batches up to this many bytes; the input topic (filled by a
#: batching producer) up to 32 times more.
OUTPUT_LIMIT = 64 * 1024


def _frame_of_dictionary(dict_id: int) -> bytes:
    """A zstd frame compressed with a dictionary whose header carries `dict_id`."""
    from sidecar.bench.events import generate
    from sidecar.dictionaries.model import with_dict_id

    raw = zstandard.train_dictionary(2048, list(generate("product_viewed", 500, seed=5)))
    zdict = zstandard.ZstdCompressionDict(with_dict_id(raw.as_bytes(), dict_id))
    return zstandard.ZstdCompressor(dict_data=zdict).compress(b'{"event":"x","n":1}' * 20)


FRAME_OF_32768 = _frame_of_dictionary(32768)


def _spoofed(draw: Any) -> Outgoing:
    """A record whose `zd` header lies: not a frame, doubled, malformed, or another frame's id."""
    kind = draw(st.sampled_from(["not_a_frame", "double", "malformed", "wrong_id"]))
    headers = {
        "not_a_frame": (("zd", b"32768"),),
        "double": (("zd", b"32768"), ("zd", b"32768")),
        "malformed": (("zd", b"abc"),),
        "wrong_id": (("zd", b"40000"),),
    }[kind]
    value = b"not a frame at all" if kind == "not_a_frame" else FRAME_OF_32768
    return Outgoing(b"k", value, headers)


KINDS = (
    "empty",
    "one_byte",
    "binary",
    "zstd",
    "gzip",
    "tombstone",
    "at_limit",
    "above_limit",
    "odd_headers",
    "spoof",
    "json",
)


@st.composite
def poison(draw: Any, kind: str) -> Outgoing:
    """One record of a kind real producers send by mistake (module docstring)."""
    key = draw(st.none() | st.binary(max_size=8))
    # Large byte strings come from a drawn seed: hypothesis's own buffer is small on purpose.
    rng = random.Random(draw(st.integers(0, 2**32)))
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    if kind == "empty":
        value = b""
    elif kind == "one_byte":
        value = draw(st.binary(min_size=1, max_size=1))
    elif kind == "binary":
        value = rng.randbytes(draw(st.integers(2, 4000)))
    elif kind == "zstd":
        value = zstandard.ZstdCompressor().compress(rng.randbytes(draw(st.integers(0, 2000))))
    elif kind == "gzip":
        value = gzip.compress(rng.randbytes(draw(st.integers(0, 2000))))
    elif kind == "tombstone":
        value = None
    elif kind == "at_limit":
        value = draw(st.binary(min_size=16, max_size=16)) * (OUTPUT_LIMIT // 16)
    elif kind == "above_limit":
        value = rng.randbytes(OUTPUT_LIMIT + draw(st.integers(1, 3 * OUTPUT_LIMIT)))
    elif kind == "odd_headers":
        value = b'{"event":"clicked","id":%d}' % draw(st.integers(0, 10**9))
        headers = tuple(
            draw(
                st.lists(
                    st.tuples(
                        st.sampled_from(["trace", "trace", "\u00e9t\u00e9", "x" * 40]),
                        st.none() | st.binary(max_size=8),
                    ),
                    min_size=1,
                    max_size=5,
                )
            )
        )
    elif kind == "spoof":
        return _spoofed(draw)
    else:
        value = b'{"event":"viewed","sku":"SKU-%07d","n":%d}' % (
            draw(st.integers(0, 10**7)),
            draw(st.integers()),
        )
    return Outgoing(key, value, headers)


def _spoofs_our_header(record: Record) -> bool:
    return record.value is not None and any(k == "zd" for k, _ in record.headers)


def _dead_letter_origin(record: Record) -> tuple[int, int]:
    headers = dict(record.headers)
    return int(headers[PREFIX + "partition"] or b"-1"), int(headers[PREFIX + "offset"] or b"-1")


@seed(20261202)
@settings(
    max_examples=2,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,  # 110 records by design: one relay run per example
    ],
    database=None,
)
@given(
    records=st.tuples(*(st.lists(poison(kind), min_size=10, max_size=10) for kind in KINDS)),
    order=st.integers(0, 2**32),
)
def test_poison_records_are_relayed_byte_exact_or_set_aside_with_their_reason(
    records: tuple[list[Outgoing], ...],
    order: int,
    make_topic: MakeTopic,
    sidecar: StartSidecar,
    produce_records: ProduceRecords,
    consume_all: ConsumeAll,
    kafka_probe: KafkaProbe,
    tmp_path: Path,
) -> None:
    run = uuid.uuid4().hex[:8]
    topic = make_topic(partitions=2, config={"max.message.bytes": str(32 * OUTPUT_LIMIT)})
    output = make_topic(partitions=2, config={"max.message.bytes": str(OUTPUT_LIMIT)})
    dead = f"{topic}.dlq"
    mixed = [record for kind in records for record in kind]  # every kind in every example
    random.Random(order).shuffle(mixed)
    inputs = produce_records(topic, mixed)
    proc = sidecar(
        *("run", "--input-topic", topic, "--output-topic", output, "--create-topics"),
        *("--dictionaries", str(tmp_path / f"store-{run}"), "--no-training"),
        env={"ZDICT_RELAY__DEAD_LETTER_TOPIC": "{topic}.dlq"},
        name=f"relay-{run}",
    )
    wait_until(
        lambda: (
            kafka_probe.count(output) + kafka_probe.count(dead) >= len(inputs) or not proc.running()
        ),
        90,
        "every record relayed or set aside",
    )
    assert proc.running(), proc.tail()
    metrics = proc.metrics()
    assert proc.stop() == 0, proc.tail()

    relayed = consume_all(output, kafka_probe.count(output))
    aside = consume_all(dead, kafka_probe.count(dead))
    assert len(relayed) + len(aside) == len(inputs)
    decoder = Decoder.from_store(DictionaryStore(tmp_path / f"store-{run}"))
    by_place = {(r.partition, r.offset): r for r in inputs}
    # Relayed records: same partition, same order, byte-exact once decoded.
    relayed_places = set()
    for partition in {r.partition for r in inputs}:
        mine = [r for r in inputs if r.partition == partition]
        out = sorted((r for r in relayed if r.partition == partition), key=lambda r: r.offset)
        aside_here = {o for o in map(_dead_letter_origin, aside) if o[0] == partition}
        expected = [r for r in mine if (r.partition, r.offset) not in aside_here]
        assert [decoder.decode(r.value, list(r.headers)) for r in out] == [
            r.value for r in expected
        ]
        assert [r.key for r in out] == [r.key for r in expected]
        relayed_places |= {(r.partition, r.offset) for r in expected}
    # Dead letters: the original record, untouched, with where it came from and why.
    reasons: Counter[tuple[str, str]] = Counter()
    for letter in aside:
        origin = by_place[_dead_letter_origin(letter)]
        headers = dict(letter.headers)
        assert headers[PREFIX + "topic"] == topic.encode()
        assert (letter.key, letter.value) == (origin.key, origin.value)
        assert letter.headers[: len(origin.headers)] == origin.headers
        stage = (headers[PREFIX + "stage"] or b"").decode()
        cls = (headers[PREFIX + "class"] or b"").decode()
        reasons[(stage, cls)] += 1
        if _spoofs_our_header(origin):
            assert (stage, cls) == ("encode", "CorruptFrame")
        else:
            # Too large once encoded: a compressible value at the limit shrinks below it,
            # random bytes above it do not.
            assert (stage, cls) == ("produce", "RecordTooLarge"), (stage, cls)
            assert origin.value is not None and len(origin.value) > OUTPUT_LIMIT // 2
    for place, record in by_place.items():
        if _spoofs_our_header(record):
            assert place not in relayed_places, place
    counted = sum(
        v
        for (name, labels), v in metrics.items()
        if name == "zdict_dead_letters_total" and dict(labels).get("topic") == topic
    )
    assert counted == len(aside)
    print(
        f"\npoison: {len(inputs)} records, {len(relayed)} relayed, aside by reason {dict(reasons)}"
    )


def test_without_a_dead_letter_topic_the_relay_stops_before_the_bad_record(
    make_topic: MakeTopic,
    sidecar: StartSidecar,
    produce_records: ProduceRecords,
    kafka_probe: KafkaProbe,
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=1)
    good = [Outgoing(b"k", b'{"n":%d,"pad":"%s"}' % (i, b"x" * 150)) for i in range(50)]
    bad = Outgoing(b"k", b"not a frame", (("zd", b"32768"),))
    inputs = produce_records(topic, [*good, bad, *good[:10]])
    group = f"zdict-it-poison-{uuid.uuid4().hex[:8]}"
    proc = sidecar(
        *("run", "--input-topic", topic, "--create-topics", "--group-id", group),
        *("--dictionaries", str(tmp_path / "store"), "--no-training"),
        name="relay",
    )
    assert proc.wait(60) == 1
    (failed,) = proc.events("relay_failed")
    assert f"cannot encode {topic}[0]@50: CorruptFrame" in failed["error"]
    assert "ZDICT_RELAY__DEAD_LETTER_TOPIC" in failed["error"]
    assert kafka_probe.committed(group, topic) == {0: 50}  # nothing past the bad record
    assert kafka_probe.count(f"{topic}.zd") == 50
    assert len(inputs) == 61


def test_decode_mode_sets_bombs_corrupt_frames_and_unknown_ids_aside(
    make_topic: MakeTopic,
    sidecar: StartSidecar,
    produce_records: ProduceRecords,
    consume_all: ConsumeAll,
    kafka_probe: KafkaProbe,
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=1)
    plain = b'{"event":"viewed","sku":"SKU-1234567"}' * 4
    frame, headers = Encoder(None).encode(plain)
    bad = {
        "bomb": (zstandard.ZstdCompressor().compress(bytes(50 * 2**20)), (("zd", b"0"),)),
        "corrupt": (b"\x28\xb5\x2f\xfd" + b"\x00" * 12, (("zd", b"0"),)),
        "unknown": (FRAME_OF_32768, (("zd", b"32768"),)),
    }
    records = [Outgoing(b"ok", frame, tuple(headers))]
    records += [Outgoing(name.encode(), v, h) for name, (v, h) in bad.items()]
    records += [Outgoing(b"ok", frame, tuple(headers)), Outgoing(b"plain", plain)]
    produce_records(topic, records)
    proc = sidecar(
        *("run", "--mode", "decode", "--input-topic", topic, "--create-topics"),
        *("--dictionaries", str(tmp_path / "store")),
        env={"ZDICT_RELAY__DEAD_LETTER_TOPIC": "{topic}.dlq"},
        name="decoder",
    )
    decoded_topic, dead = f"{topic}.decoded", f"{topic}.dlq"
    wait_until(
        lambda: kafka_probe.count(decoded_topic) + kafka_probe.count(dead) >= len(records),
        60,
        "every record decoded or set aside",
    )
    assert proc.stop() == 0, proc.tail()
    decoded = consume_all(decoded_topic, 3)
    assert [(r.key, r.value) for r in decoded] == [
        (b"ok", plain),
        (b"ok", plain),
        (b"plain", plain),
    ]
    aside = {r.key: dict(r.headers) for r in consume_all(dead, 3)}
    assert {k: (h[PREFIX + "stage"], h[PREFIX + "class"]) for k, h in aside.items()} == {
        b"bomb": (b"decode", b"OutputTooLarge"),
        b"corrupt": (b"decode", b"CorruptFrame"),
        b"unknown": (b"decode", b"UnknownDictionary"),
    }
