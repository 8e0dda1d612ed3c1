"""The wire format: skip rules, round trips, and a Decoder that survives hostile input."""

from __future__ import annotations

import gzip
import threading
import tracemalloc

import pytest
import zstandard
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sidecar.codec import (
    BATCH_API_MIN,
    DEFAULT_MAX_OUTPUT_SIZE,
    NO_DICTIONARY,
    ZSTD_MAGIC,
    CodecStats,
    Decoder,
    Encoder,
    FrameOptions,
    Outcome,
    StaticResolver,
    Tag,
    WireFormat,
    fingerprint,
    header_cost,
    looks_compressed,
    parse_tag,
    tag_value,
)
from sidecar.codec import decoder as decoder_module
from sidecar.dictionaries import Dictionary
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import CorruptFrame, OutputTooLarge, UnknownDictionary
from tests.hypothesis_profiles import examples
from tests.unit.dictionaries import AddDictionary, add_to_store

MiB = 1024 * 1024


@pytest.fixture
def dictionary(add_dictionary: AddDictionary) -> Dictionary:
    return add_dictionary()


@pytest.fixture
def encoder(dictionary: Dictionary) -> Encoder:
    return Encoder(dictionary)


@pytest.fixture
def decoder(dictionary: Dictionary) -> Decoder:
    return Decoder(StaticResolver([dictionary]))


# -- skip rules ----------------------------------------------------------------------------------


def test_tombstones_pass_through_unchanged(encoder: Encoder) -> None:
    encoded = encoder.encode_record(None, [("trace", b"1")])
    assert encoded.value is None
    assert encoded.headers == [("trace", b"1")]
    assert encoded.outcome == Outcome.TOMBSTONE


def test_values_already_carrying_our_header_are_never_compressed_twice(
    encoder: Encoder, events: list[bytes]
) -> None:
    value, headers = encoder.encode(events[4000])
    again = encoder.encode_record(value, headers)
    assert (again.value, again.headers, again.outcome) == (value, headers, Outcome.ALREADY_ENCODED)


def test_values_under_the_size_threshold_pass_through(dictionary: Dictionary) -> None:
    encoder = Encoder(dictionary, min_size=64)
    encoded = encoder.encode_record(b'{"short":true}' * 4)
    assert encoded.outcome == Outcome.BELOW_THRESHOLD
    assert encoded.headers == []


@pytest.mark.parametrize(
    "value",
    [
        zstandard.ZstdCompressor().compress(b"x" * 500),
        gzip.compress(b"y" * 500),
        b"\x89PNG\r\n\x1a\n" + bytes(300),
        b"\xff\xd8\xff\xe0" + bytes(300),
        b"PK\x03\x04" + bytes(300),
        b"\x50\x2a\x4d\x18" + bytes(300),  # zstd skippable frame
    ],
    ids=["zstd", "gzip", "png", "jpeg", "zip", "zstd-skippable"],
)
def test_recognisably_compressed_values_pass_through(dictionary: Dictionary, value: bytes) -> None:
    encoded = Encoder(dictionary, min_size=0).encode_record(value)
    assert encoded.outcome == Outcome.PRECOMPRESSED
    assert encoded.value == value


def test_plain_text_is_not_mistaken_for_compressed_data() -> None:
    assert not looks_compressed(b'{"event":"x"}')
    assert not looks_compressed(b"")
    assert not looks_compressed(b"P")  # first byte of zip and of skippable frames, alone


def test_values_that_would_not_shrink_with_the_header_counted_pass_through(
    dictionary: Dictionary,
) -> None:
    encoder = Encoder(dictionary, min_size=0)
    value = b"\x07\x93q"  # 3 random-looking bytes: any frame plus header is larger
    encoded = encoder.encode_record(value)
    assert encoded.outcome == Outcome.NO_GAIN
    assert (encoded.value, encoded.headers) == (value, [])


def test_compressed_records_keep_every_input_header_and_add_the_dictionary_id(
    encoder: Encoder, dictionary: Dictionary, events: list[bytes]
) -> None:
    headers = [("trace-id", b"abc"), ("empty", None), ("dup", b"1"), ("dup", b"2")]
    encoded = encoder.encode_record(events[4001], headers)
    assert encoded.outcome == Outcome.COMPRESSED
    assert encoded.headers == [*headers, ("zd", compact_tag(dictionary))]


def compact_tag(dictionary: Dictionary) -> bytes:
    """The compact header value an encoder writes for `dictionary`."""
    return tag_value(dictionary.id, "compact", fingerprint(dictionary))


def test_output_bytes_count_the_header_we_add(encoder: Encoder, events: list[bytes]) -> None:
    encoded = encoder.encode_record(events[4002])
    assert encoded.value is not None and encoder.dictionary is not None
    tag = compact_tag(encoder.dictionary)
    assert encoded.output_bytes == len(encoded.value) + header_cost("zd", tag)
    # 1 + 2 key bytes, 1 + 2 value bytes (fingerprint, id 32768 - 32767 = 1 as one varint byte)
    assert header_cost("zd", tag) == 6
    assert header_cost("zd", b"32768") == 9  # the standard form: the id in ASCII


def test_every_outcome_is_counted_with_its_bytes(
    dictionary: Dictionary, events: list[bytes]
) -> None:
    encoder = Encoder(dictionary, min_size=32)
    encoder.encode(None)
    encoder.encode(b"tiny")
    encoder.encode(gzip.compress(bytes(range(256))))
    encoder.encode(events[4003])
    encoder.encode(*Encoder(dictionary).encode(events[4004]))  # ours already
    stats = encoder.stats
    assert stats.outcomes == {
        Outcome.TOMBSTONE: 1,
        Outcome.BELOW_THRESHOLD: 1,
        Outcome.PRECOMPRESSED: 1,
        Outcome.COMPRESSED: 1,
        Outcome.ALREADY_ENCODED: 1,
    }
    assert stats.messages == 5
    assert stats.input_bytes > stats.output_bytes > 0


def test_values_no_dictionary_could_shrink_are_counted_as_excluded_on_both_sides(
    dictionary: Dictionary, events: list[bytes]
) -> None:
    encoder = Encoder(dictionary)
    encoder.encode_batch([(v, None) for v in events[4000:4100]])
    stats = encoder.stats
    clean = stats.ratio
    assert stats.excluded_bytes == 0
    foreign = gzip.compress(bytes(range(256)) * 40)
    ours, headers = Encoder(dictionary).encode(events[4100])
    assert ours is not None
    encoder.encode_batch([(foreign, None), (ours, headers)])
    assert stats.excluded_bytes == len(foreign) + len(ours)
    assert stats.ratio < clean
    # Left out of both totals (as the trainer's live ratio does), they leave the ratio as it was.
    dictionary_ratio = (stats.input_bytes - stats.excluded_bytes) / (
        stats.output_bytes - stats.excluded_bytes
    )
    assert dictionary_ratio == pytest.approx(clean)


def test_decode_batch_restores_records_and_drops_only_our_header(
    dictionary: Dictionary, events: list[bytes]
) -> None:
    encoder = Encoder(dictionary)
    records: list[tuple[bytes | None, list[tuple[str, bytes | None]] | None]] = [
        (events[4200], [("trace", b"1")]),
        (None, None),
        (b"tiny", None),
        (events[4201], None),
    ]
    encoded = encoder.encode_batch(records)
    decoder = Decoder(StaticResolver([dictionary]))
    decoded = decoder.decode_batch([(e.value, e.headers) for e in encoded])
    assert [(d.value, d.headers) for d in decoded] == [(v, h or []) for v, h in records]
    assert [d.outcome for d in decoded] == [
        Outcome.DECODED,
        Outcome.TOMBSTONE,
        Outcome.NOT_ENCODED,
        Outcome.DECODED,
    ]
    assert decoded[0].input_bytes == encoded[0].output_bytes
    assert decoded[0].output_bytes == len(events[4200])


def test_decode_batch_raises_at_a_record_it_cannot_decode(dictionary: Dictionary) -> None:
    decoder = Decoder(StaticResolver([dictionary]))
    with pytest.raises(CorruptFrame):
        decoder.decode_batch([(b"plain", None), (b"not a frame", [("zd", b"32768")])])


def test_encode_batch_gives_the_same_records_as_one_by_one(
    dictionary: Dictionary, events: list[bytes]
) -> None:
    records: list[tuple[bytes | None, list[tuple[str, bytes | None]] | None]] = [
        (v, [("k", b"v")] if i % 3 else None) for i, v in enumerate(events[4000:4500])
    ]
    records += [(None, None), (b"", None), Encoder(dictionary).encode(events[4600])]
    one_by_one = Encoder(dictionary)
    batched = Encoder(dictionary)
    assert batched.encode_batch(records) == [one_by_one.encode_record(v, h) for v, h in records]
    assert batched.stats == one_by_one.stats


def test_encode_batch_compresses_in_one_call_exactly_what_compress_gives_one_by_one(
    dictionary: Dictionary, events: list[bytes]
) -> None:
    encoder = Encoder(dictionary, min_size=0)
    values = [*events[4000:4200], b"", gzip.compress(events[4300]), b"x"]
    encoded = encoder.encode_batch([(v, None) for v in values])
    for value, enc in zip(values, encoded, strict=True):
        assert enc.value == (encoder.compress(value) if enc.outcome == "compressed" else value)
    assert sum(e.outcome == "compressed" for e in encoded) == 200
    assert [e.outcome for e in encoded[-3:]] == ["no_gain", "precompressed", "no_gain"]


def test_a_spoofed_header_in_a_batch_raises_before_anything_is_counted(
    dictionary: Dictionary, events: list[bytes]
) -> None:
    encoder = Encoder(dictionary)
    spoofed = (b"not a zstd frame at all", [("zd", b"\x80\x01")])
    with pytest.raises(CorruptFrame, match="not a zstd frame"):
        encoder.encode_batch([(events[4000], None), (None, None), spoofed])
    assert encoder.stats == CodecStats(dictionary_id=dictionary.id)


def test_no_dictionary_mode_compresses_larger_values_with_id_zero(events: list[bytes]) -> None:
    encoder = Encoder(None)
    value = b"".join(events[:5])  # ~500 bytes of JSON
    out, headers = encoder.encode(value)
    assert headers == [("zd", b"\x80\x00")]  # compact, fingerprint 0, no dictionary
    assert out is not None and len(out) < len(value)
    assert Decoder().decode(out, headers) == value
    assert encoder.dict_id == NO_DICTIONARY


def test_a_custom_header_key_is_used_on_both_sides(
    dictionary: Dictionary, events: list[bytes]
) -> None:
    encoder = Encoder(dictionary, header_key="x-zdict")
    value, headers = encoder.encode(events[4005])
    assert headers[-1][0] == "x-zdict"
    assert (
        Decoder(StaticResolver([dictionary]), header_key="x-zdict").decode(value, headers)
        == events[4005]
    )
    assert Decoder(StaticResolver([dictionary])).decode(value, headers) == value  # not ours


# -- round trips ---------------------------------------------------------------------------------

header_lists = st.lists(
    st.tuples(
        st.text(max_size=12).filter(lambda k: k != "zd"),
        st.none() | st.binary(max_size=16),
    ),
    max_size=4,
)


@settings(
    max_examples=examples(10_000), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    value=st.none() | st.binary(max_size=1500), headers=header_lists, min_size=st.integers(0, 64)
)
def test_decode_of_encode_is_the_input_for_any_bytes_and_headers(
    dictionary_for_hypothesis: Dictionary,
    value: bytes | None,
    headers: list[tuple[str, bytes | None]],
    min_size: int,
) -> None:
    encoder = Encoder(dictionary_for_hypothesis, min_size=min_size)
    decoder = Decoder(StaticResolver([dictionary_for_hypothesis]))
    encoded = encoder.encode_record(value, headers)
    assert decoder.decode(encoded.value, encoded.headers) == value
    if encoded.outcome == Outcome.COMPRESSED:
        ours = compact_tag(dictionary_for_hypothesis)
        assert encoded.headers == [*headers, ("zd", ours)]
        assert value is not None and encoded.output_bytes < len(value)
    else:
        assert encoded.headers == headers
        assert encoded.value == value


@settings(max_examples=examples(3_000), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    value=st.none()
    | st.binary(max_size=600)
    | st.sampled_from([b"\x1f\x8b\x08" + b"x" * 200, ZSTD_MAGIC + b"y" * 200, b"a" * 300]),
    headers=header_lists,
    min_size=st.integers(0, 64),
)
def test_one_record_or_value_is_encoded_as_the_batch_path_would(
    dictionary_for_hypothesis: Dictionary,
    value: bytes | None,
    headers: list[tuple[str, bytes | None]],
    min_size: int,
) -> None:
    # encode_record and encode_value take a short cut for the common case; outcome, bytes,
    # headers and the stats must be those of encode_batch, where the rules live.
    one = Encoder(dictionary_for_hypothesis, min_size=min_size)
    batch = Encoder(dictionary_for_hypothesis, min_size=min_size)
    expected = batch.encode_batch([(value, headers)])[0]
    assert one.encode_record(value, headers) == expected
    assert one.stats == batch.stats
    if value is not None and not any(k == one.header_key for k, _ in headers):
        lone = Encoder(dictionary_for_hypothesis, min_size=min_size)
        assert lone.encode_value(value) == (expected.value, expected.outcome)
        assert lone.stats.messages == 0  # the caller counts


def test_a_record_already_encoded_is_passed_through_by_the_one_record_path(
    dictionary: Dictionary, events: list[bytes]
) -> None:
    encoder = Encoder(dictionary)
    first = encoder.encode_record(events[4000], [("trace", b"t")])
    assert first.outcome == Outcome.COMPRESSED
    again = encoder.encode_record(first.value, first.headers)
    assert (again.outcome, again.value, again.headers) == (
        Outcome.ALREADY_ENCODED,
        first.value,
        first.headers,
    )


#: Records that take a batch off the plain path (or test its edges), put among plain events.
unusual_records = st.sampled_from(
    [
        (None, None),  # tombstone
        (b"", None),
        (b"tiny", None),  # under most min_size draws
        (b"[2026-12-03 21:00:01] INFO a log line, starting like a skippable frame", None),
        (b"P\x2a\x4d\x18" + b"s" * 120, None),  # a zstd skippable frame's magic
        (gzip.compress(b"already compressed " * 20), None),
        (bytes(range(256)) * 2, None),  # does not shrink
        (b'{"event": "with a header of the application"}' * 3, [("trace", b"1")]),
    ]
)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Plain: without headers, one that does not shrink, a suspect first byte; all below min_size
# (the pass-through baseline), one of them empty; then every record with headers.
@example(unusual=[], min_size=0, headed=False)
@example(unusual=[(50, (bytes(range(256)) * 2, None))], min_size=0, headed=False)
@example(unusual=[(7, (b"[2026-12-03] a log line" * 4, None))], min_size=0, headed=False)
@example(unusual=[], min_size=2**62, headed=False)
@example(unusual=[(3, (b"", None))], min_size=1024, headed=False)
@example(unusual=[], min_size=0, headed=True)
@example(unusual=[(9, (bytes(range(256)) * 2, None))], min_size=0, headed=True)
@example(unusual=[], min_size=2**62, headed=True)
@given(
    unusual=st.lists(st.tuples(st.integers(0, BATCH_API_MIN), unusual_records), max_size=4),
    # Up to 130: plain events on both sides of it; from 600 on, every record is under it.
    min_size=st.integers(0, 130) | st.integers(600, 2**62),
    headed=st.booleans(),
)
def test_a_batch_is_encoded_as_its_records_one_by_one_would_be(
    dictionary_for_hypothesis: Dictionary,
    plain_events: list[bytes],
    unusual: list[tuple[int, tuple[bytes | None, list[tuple[str, bytes | None]] | None]]],
    min_size: int,
    headed: bool,
) -> None:
    # A batch of plain records takes a path of its own (no Python step per record), with or
    # without the application's headers on every record, so does one all under min_size; with
    # any record it cannot decide that way, the record-by-record loop: all as one record alone.
    records: list[tuple[bytes | None, list[tuple[str, bytes | None]] | None]] = [
        (v, None) for v in plain_events[:BATCH_API_MIN]
    ]
    for position, record in unusual:
        records.insert(position, record)
    if headed:
        records = [(v, h or [("trace", b"%d" % i)]) for i, (v, h) in enumerate(records)]
    batched = Encoder(dictionary_for_hypothesis, min_size=min_size)
    alone = Encoder(dictionary_for_hypothesis, min_size=min_size)
    assert batched.encode_batch(records) == [alone.encode_batch([r])[0] for r in records]
    assert batched.stats == alone.stats


def test_a_headed_batch_with_a_record_already_encoded_is_encoded_as_one_by_one(
    dictionary: Dictionary, events: list[bytes]
) -> None:
    first = Encoder(dictionary).encode_record(events[4000], [("trace", b"t")])
    records: list[tuple[bytes | None, list[tuple[str, bytes | None]] | None]] = [
        (v, [("trace", b"%d" % i)]) for i, v in enumerate(events[4001 : 4001 + BATCH_API_MIN])
    ]
    records.insert(17, (first.value, first.headers))
    batched, alone = Encoder(dictionary), Encoder(dictionary)
    encoded = batched.encode_batch(records)
    assert encoded == [alone.encode_batch([r])[0] for r in records]
    assert encoded[17].outcome == Outcome.ALREADY_ENCODED
    assert batched.stats == alone.stats


@pytest.fixture(scope="module")
def plain_events(events: list[bytes]) -> list[bytes]:
    """Held-out events, the plain records of the batch tests (module scope, for hypothesis)."""
    return events[4000 : 4000 + BATCH_API_MIN]


@pytest.fixture(scope="module")
def dictionary_for_hypothesis(
    tmp_path_factory: pytest.TempPathFactory, trained_bytes: bytes
) -> Dictionary:
    # hypothesis runs a test body many times per fixture instance: module scope, built once.
    store = DictionaryStore(tmp_path_factory.mktemp("hypothesis-store"))
    return add_to_store(store, "roundtrip", trained_bytes)


@pytest.mark.parametrize("wire", ["compact", "standard"])
@pytest.mark.parametrize(
    "frame",
    [FrameOptions(), FrameOptions(checksum=True), FrameOptions(dict_id=False, content_size=False)],
    ids=["default", "checksum", "bare"],
)
def test_every_frame_option_round_trips_in_both_wire_formats(
    dictionary: Dictionary, events: list[bytes], frame: FrameOptions, wire: WireFormat
) -> None:
    encoder = Encoder(dictionary, frame=frame, wire=wire)
    decoder = Decoder(StaticResolver([dictionary]))
    for raw in events[4000:4200]:
        assert decoder.decode(*encoder.encode(raw)) == raw


def test_an_encoder_and_a_decoder_can_be_shared_by_threads(
    dictionary: Dictionary, events: list[bytes]
) -> None:
    encoder = Encoder(dictionary)
    decoder = Decoder(StaticResolver([dictionary]))
    failures: list[str] = []

    def work(offset: int) -> None:
        failures.extend(
            f"mismatch at {offset}"
            for raw in events[offset : offset + 500]
            if decoder.decode(*encoder.encode(raw)) != raw
        )

    threads = [threading.Thread(target=work, args=(4000 + 500 * i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert encoder.stats.messages == 2000


# -- hostile input -------------------------------------------------------------------------------

HUGE_DECLARED_SIZE = bytes.fromhex("28b52ffde06c06060663636363")


def test_a_frame_declaring_a_huge_content_size_is_refused_before_allocating() -> None:
    tracemalloc.start()
    with pytest.raises(OutputTooLarge, match=r"declares \d+ bytes.*limit is 1048576"):
        Decoder(max_output_size=MiB).decode(HUGE_DECLARED_SIZE, [("zd", b"0")])
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < MiB


def test_a_zero_run_bomb_without_content_size_is_stopped_at_the_limit() -> None:
    # A 1 MiB window passes the window check, so the bounded decompression itself is tested.
    params = zstandard.ZstdCompressionParameters.from_level(19, window_log=20, write_content_size=0)
    cobj = zstandard.ZstdCompressor(compression_params=params).compressobj()
    bomb = b"".join(cobj.compress(bytes(MiB)) for _ in range(64)) + cobj.flush()  # 64 MiB of zeros
    assert len(bomb) < 64 * 1024
    assert zstandard.get_frame_parameters(bomb).content_size == zstandard.CONTENTSIZE_UNKNOWN
    tracemalloc.start()
    with pytest.raises(OutputTooLarge, match="no declared size"):
        Decoder(max_output_size=MiB).decode(bomb, [("zd", b"0")])
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 4 * MiB


def _frame_declaring(size: int) -> bytes:
    """A frame header alone: magic, descriptor 0xE0 (single segment, 8-byte content size)."""
    return bytes.fromhex("28b52ffde0") + size.to_bytes(8, "little")


@pytest.mark.parametrize(
    ("name", "bomb"),
    [
        ("a frame declaring 4 GiB", _frame_declaring(4 * 2**30)),
        # A real one: 50 MiB of zeros compress to a frame of ~1.6 KB that declares its size.
        ("a 50 MiB zero run", zstandard.ZstdCompressor().compress(bytes(50 * MiB))),
    ],
)
def test_bombs_declaring_more_than_the_default_limit_are_refused_before_allocating(
    name: str, bomb: bytes
) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(OutputTooLarge, match="limit is 8388608"):
            Decoder().decode(bomb, [("zd", b"0")])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    print(f"\n{name} ({len(bomb):,} B): refused, peak {peak / 1024:.0f} KiB traced")
    assert peak < MiB


def test_a_50_mib_zero_run_without_declared_size_stops_at_the_default_limit() -> None:
    cobj = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    bomb = b"".join(cobj.compress(bytes(MiB)) for _ in range(50)) + cobj.flush()
    tracemalloc.start()
    try:
        with pytest.raises(OutputTooLarge, match="no declared size"):
            Decoder().decode(bomb, [("zd", b"0")])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    print(f"\n50 MiB zero run, no declared size ({len(bomb):,} B): peak {peak / MiB:.1f} MiB")
    assert peak < 2 * DEFAULT_MAX_OUTPUT_SIZE


def test_a_frame_of_unknown_size_within_the_limit_decodes() -> None:
    raw = b"hello, streaming world " * 100
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(raw)
    assert Decoder().decode(frame, [("zd", b"0")]) == raw


def test_a_frame_needing_a_larger_window_than_allowed_is_refused() -> None:
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=24, write_content_size=0)
    cobj = zstandard.ZstdCompressor(compression_params=params).compressobj()
    frame = cobj.compress(bytes(4096)) + cobj.flush()
    with pytest.raises(OutputTooLarge, match="window"):
        Decoder(max_output_size=64 * 1024).decode(frame, [("zd", b"0")])


@pytest.mark.parametrize("cut", [1, 3, 6, 12])
def test_truncated_frames_are_corrupt(
    encoder: Encoder, decoder: Decoder, events: list[bytes], cut: int
) -> None:
    value, headers = encoder.encode(events[4010])
    assert value is not None
    with pytest.raises(CorruptFrame):
        decoder.decode(value[:-cut], headers)


def test_bytes_after_the_frame_are_corrupt(
    encoder: Encoder, decoder: Decoder, events: list[bytes]
) -> None:
    value, headers = encoder.encode(events[4011])
    assert value is not None
    with pytest.raises(CorruptFrame, match="after its zstd frame"):
        decoder.decode(value + b"\x00\x01", headers)
    with pytest.raises(CorruptFrame, match="after its zstd frame"):
        decoder.decode(value + value, headers)


def test_a_value_that_is_not_zstd_under_our_header_is_corrupt(
    decoder: Decoder, dictionary: Dictionary
) -> None:
    with pytest.raises(CorruptFrame, match="bad frame header"):
        decoder.decode(b'{"plain":"json"}', [("zd", str(dictionary.id).encode())])
    with pytest.raises(CorruptFrame, match=r"bad frame header|does not decompress"):
        decoder.decode(b'{"plain":"json"}', [("zd", compact_tag(dictionary))])


def test_a_record_labelled_with_the_wrong_dictionary_is_refused(
    add_dictionary: AddDictionary, events: list[bytes], trained_bytes: bytes
) -> None:
    first = add_dictionary()
    second = add_dictionary()
    value, _ = Encoder(first, wire="standard").encode(events[4012])
    decoder = Decoder(StaticResolver([first, second]))
    with pytest.raises(
        CorruptFrame, match=f"compressed with dictionary {first.id}.*names dictionary {second.id}"
    ):
        decoder.decode(value, [("zd", str(second.id).encode())])
    with pytest.raises(CorruptFrame, match=f"compressed with dictionary {first.id}"):
        decoder.decode(value, [("zd", b"0")])


def test_an_unknown_dictionary_id_names_the_id(encoder: Encoder, events: list[bytes]) -> None:
    value, headers = encoder.encode(events[4013])
    with pytest.raises(UnknownDictionary, match=f"unknown dictionary id {encoder.dict_id}"):
        Decoder().decode(value, headers)


def test_an_unknown_id_in_a_store_names_the_store(store: DictionaryStore) -> None:
    with pytest.raises(
        UnknownDictionary, match=r"unknown dictionary id 40000: not in dictionary store"
    ):
        Decoder.from_store(store).decode(b"\x28\xb5\x2f\xfd", [("zd", b"40000")])


@pytest.mark.parametrize(
    "headers",
    [
        [("zd", b"0"), ("zd", b"0")],
        [("zd", b"-1")],
        [("zd", b"12a")],
        [("zd", b"")],
        [("zd", None)],
        [("zd", b"\xd9\xa3")],  # a non-ASCII digit
        [("zd", b"99999999999")],
    ],
    ids=["duplicate", "negative", "letters", "empty", "none", "unicode-digit", "too-long"],
)
def test_malformed_or_duplicate_headers_are_corrupt(
    headers: list[tuple[str, bytes | None]],
) -> None:
    with pytest.raises(CorruptFrame):
        Decoder().decode(b"\x28\xb5\x2f\xfd", headers)


def test_a_tombstone_stays_a_tombstone_whatever_its_headers() -> None:
    assert Decoder().decode(None, [("zd", b"0")]) is None


@pytest.mark.parametrize(
    ("value", "headers", "complaint"),
    [
        (b'{"plain":"json"}', [("zd", b"32768")], "not a zstd frame"),
        (b"\x28\xb5\x2f\xfd\x00", [("zd", b"32768")], "not a zstd frame"),
        (b"\xff\xff", [("zd", b"\x80\x01")], "not a zstd frame"),
        (None, [("zd", b"1"), ("zd", b"2")], "exactly one"),
        (b"x", [("zd", b"abc")], "ASCII decimal"),
    ],
)
def test_a_record_that_spoofs_our_header_is_refused_not_passed_through(
    dictionary: Dictionary,
    value: bytes | None,
    headers: list[tuple[str, bytes | None]],
    complaint: str,
) -> None:
    if value is None:
        value, _ = Encoder(dictionary).encode(b"something longer than sixteen bytes" * 4)
    with pytest.raises(CorruptFrame, match=complaint):
        Encoder(dictionary).encode(value, headers)


def test_a_frame_of_another_dictionary_under_our_header_is_refused(
    dictionary: Dictionary, events: list[bytes]
) -> None:
    value, _ = Encoder(dictionary, wire="standard").encode(events[4700])
    with pytest.raises(CorruptFrame, match="names dictionary 32768"):
        Encoder(dictionary).encode(value, [("zd", b"40000")])


def test_records_without_our_header_come_back_untouched(decoder: Decoder) -> None:
    assert (
        decoder.decode(b"\x28\xb5\x2f\xfd garbage", [("other", b"1")])
        == b"\x28\xb5\x2f\xfd garbage"
    )
    assert decoder.decode(None, None) is None


# -- wire formats --------------------------------------------------------------------------------


def test_records_written_in_the_standard_format_still_decode(
    dictionary: Dictionary, decoder: Decoder, events: list[bytes]
) -> None:
    encoder = Encoder(dictionary, wire="standard")
    value, headers = encoder.encode(events[4100])
    assert headers == [("zd", str(dictionary.id).encode())]
    assert value is not None and value.startswith(ZSTD_MAGIC)
    assert decoder.decode(value, headers) == events[4100]


def test_a_compact_frame_is_a_standard_frame_without_its_magic_and_dictionary_id(
    dictionary: Dictionary, events: list[bytes]
) -> None:
    compact, _ = Encoder(dictionary).encode(events[4101])
    standard, _ = Encoder(dictionary, wire="standard").encode(events[4101])
    assert compact is not None and standard is not None
    assert len(standard) - len(compact) == 6  # the magic (4) and a 2-byte dictionary id
    assert zstandard.get_frame_parameters(ZSTD_MAGIC + compact).dict_id == 0


@pytest.mark.parametrize(
    ("dict_id", "raw"),
    [
        (0, b"\x80\x00"),
        (32768, b"\x80\x01"),
        (32768 + 126, b"\x80\x7f"),
        (32768 + 127, b"\x80\x80\x01"),
        (2**31 - 1, b"\x80\x80\x80\xfe\xff\x07"),
    ],
)
def test_compact_tags_carry_the_id_as_a_varint_above_32767(dict_id: int, raw: bytes) -> None:
    assert tag_value(dict_id, "compact") == raw
    assert parse_tag(raw) == Tag(dict_id, True, 0)
    assert parse_tag(bytes([0x80 | 0x55]) + raw[1:]).fingerprint == 0x55


@pytest.mark.parametrize(
    "raw",
    [
        b"\x80",  # no id
        b"\x80\x81",  # the varint does not end
        b"\x80\x01\x00",  # bytes after it
        b"\x80\xff\xff\xff\xff\x0f",  # above 2**31 - 1
        b"\x80\x80\x80\x80\x80\x80\x01",  # longer than 5 bytes
        b"\x01\x01",  # neither form
    ],
)
def test_malformed_compact_tags_are_corrupt(raw: bytes) -> None:
    with pytest.raises(CorruptFrame):
        parse_tag(raw)


def test_another_dictionary_under_the_same_id_is_caught_by_the_fingerprint(
    tmp_path_factory: pytest.TempPathFactory, trained_bytes: bytes, events: list[bytes]
) -> None:
    # Two registries (two clusters) gave id 32768 to different dictionaries.
    ours = add_to_store(DictionaryStore(tmp_path_factory.mktemp("a")), "orders", trained_bytes)
    samples: list[bytes | bytearray | memoryview[int]] = [*events[:2000]]
    other_bytes = zstandard.train_dictionary(8192, samples).as_bytes()
    theirs = add_to_store(DictionaryStore(tmp_path_factory.mktemp("b")), "orders", other_bytes)
    assert ours.id == theirs.id
    if fingerprint(ours) == fingerprint(theirs):
        pytest.fail("the two test dictionaries share a fingerprint; pick other training bytes")
    value, headers = Encoder(ours).encode(events[4102])
    decoder = Decoder(StaticResolver([theirs]))
    for _ in range(2):  # a refused header value is not remembered as a good one
        with pytest.raises(CorruptFrame, match="fingerprint"):
            decoder.decode(value, headers)


def test_a_decoder_past_the_header_values_it_keeps_still_decodes_each_record(
    add_dictionary: AddDictionary, events: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(decoder_module, "_KNOWN_ROUTES", 1)  # every new header value starts again
    first, second = add_dictionary("orders"), add_dictionary("payments")
    encoders = [Encoder(first), Encoder(second), Encoder(first, wire="standard"), Encoder(None)]
    decoder = Decoder(StaticResolver([first, second]))
    for i, raw in enumerate(events[4000:4080]):
        assert decoder.decode(*encoders[i % len(encoders)].encode(raw)) == raw


class _CountingResolver(StaticResolver):
    """A static resolver that counts the dictionaries it is asked for."""

    def __init__(self, dictionaries: list[Dictionary]) -> None:
        super().__init__(dictionaries)
        self.asked: list[int] = []

    def get(self, dict_id: int) -> Dictionary:
        self.asked.append(dict_id)
        return super().get(dict_id)


def test_a_decoder_keeps_a_bounded_number_of_dictionaries_loaded_and_still_decodes_each_record(
    add_dictionary: AddDictionary, events: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(decoder_module, "_KEPT_DICTIONARIES", 2)
    dictionaries = [add_dictionary(name) for name in ("orders", "payments", "refunds")]
    encoders = [Encoder(d) for d in dictionaries]
    resolver = _CountingResolver(dictionaries)
    decoder = Decoder(resolver)
    for i, raw in enumerate(events[4000:4060]):
        assert decoder.decode(*encoders[i % 3].encode(raw)) == raw
    # Three dictionaries taken in turn through room for two: each is loaded again when its turn
    # comes (a decoder that kept every dictionary would have asked three times).
    assert len(resolver.asked) > 3
    resolver.asked.clear()
    for raw in events[4060:4080]:  # one dictionary at a time stays loaded
        assert decoder.decode(*encoders[0].encode(raw)) == raw
    assert len(resolver.asked) <= 1
