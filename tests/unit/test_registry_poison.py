"""Poison in the registry topic: no record is applied unless valid, and no record stops a reader.

Every case of issue 12's "Registry records" is a row of `POISON`: a record a hostile or broken
writer could publish, and the class of reason it must be ignored for. Each is applied to a state
that already holds a champion (a valid dictionary of `orders`, activated): the record is
ignored, the champion stays active, and the valid record published after it is still applied.
The property test does the same with arbitrary keys, values and headers. The reader around the
state (`Registry.refresh`, the resolver's and the trainer's follow) logs, counts and goes on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
import structlog
from confluent_kafka import Consumer, TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from sidecar.codec import CodecStats, Decoder, Encoder
from sidecar.config import load_settings
from sidecar.dictionaries import Dictionary, DictionaryMeta
from sidecar.dictionaries.model import (
    DICT_MAGIC,
    MAX_DICT_ID,
    MIN_DICT_ID,
    sha256_hex,
    with_dict_id,
)
from sidecar.dictionaries.registry import Registry, RegistryResolver
from sidecar.dictionaries.registry_state import (
    FORMAT,
    FORMAT_HEADER,
    IGNORED_REASONS,
    MAX_JSON_VALUE,
    META_HEADER,
    Activated,
    DictionaryAdded,
    Event,
    Ignored,
    RegistryState,
    TrainingRecorded,
    activation_record,
    dictionary_record,
    training_record,
)
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import ConfigError, DictionaryIntegrityError, RegistryUnavailable
from sidecar.metrics import Metrics
from sidecar.training.trainer import Trainer
from tests.hypothesis_profiles import examples
from tests.unit.registry_records import activation, consumed, make

Record = tuple[bytes | None, bytes | None, list[tuple[str, Any]]]
FMT = (FORMAT_HEADER, FORMAT)
#: A sha256 that no dictionary here has.
OTHER_SHA = "ab" * 32


@pytest.fixture(scope="module")
def champion(trained_bytes: bytes) -> Dictionary:
    return make(trained_bytes, "orders", MIN_DICT_ID)


@pytest.fixture(scope="module")
def successor(trained_bytes: bytes) -> Dictionary:
    """The valid dictionary published after the poison (an id no poison row claims)."""
    return make(trained_bytes, "orders", MIN_DICT_ID + 100)


def with_champion(champion: Dictionary) -> RegistryState:
    state = RegistryState()
    assert isinstance(state.apply(0, *consumed(dictionary_record(champion))), DictionaryAdded)
    assert isinstance(
        state.apply(1, *consumed(activation_record(activation("orders", champion.id)))), Activated
    )
    return state


# -- records as a hostile writer makes them: nothing validated on the way out --------------------


def dictionary_poison(
    base: Dictionary,
    dict_id: int,
    data: bytes | None = None,
    key: bytes | None = None,
    nest: int = 0,
    **meta: Any,
) -> Record:
    """A dictionary record for `dict_id`, metadata fields overridden (`nest`: plus a field
    nested that deep). Dictionary bytes get `dict_id` in their header, other bytes stay."""
    data = base.data if data is None else data
    if data[:4] == DICT_MAGIC:
        data = with_dict_id(data, dict_id % 2**32)
    fields = base.meta.model_dump(mode="json") | {
        "id": dict_id,
        "sha256": sha256_hex(data),
        "size": len(data),
    }
    fields.update(meta)
    if key is None:
        key = b"dictionary/%d/%s" % (dict_id, fields["sha256"].encode())
    return key, data, [FMT, (META_HEADER, _with_nested(json.dumps(fields).encode(), nest))]


def activation_poison(
    namespace: str = "orders", key: bytes | None = None, nest: int = 0, **fields: Any
) -> Record:
    value = {
        "namespace": namespace,
        "dict_id": MIN_DICT_ID,
        "action": "activate",
        "by": "poison",
        "at": "2026-01-01T00:00:00Z",
        "stack": [],
    }
    value.update(fields)
    return key or f"active/{namespace}".encode(), _with_nested(json.dumps(value), nest), [FMT]


def _with_nested(obj_json: str | bytes, depth: int) -> bytes:
    """A JSON object's text with one more field, a list nested `depth` deep (0: none)."""
    text = obj_json.encode() if isinstance(obj_json, str) else obj_json
    if not depth:
        return text
    return text[:-1] + b', "x": ' + b"[" * depth + b"]" * depth + b"}"


def training_poison(value: bytes, key: bytes = b"training/orders") -> Record:
    return key, value, [FMT]


def _garbage_tables(champion: Dictionary) -> bytes:
    return champion.data[:8] + bytes(len(champion.data) - 8)


#: (row name, the poison record(s) built from the champion, the reason class of the last one).
POISON: list[tuple[str, Callable[[Dictionary], list[Record]], str]] = [
    # 1. ids out of range, wherever they enter; a poison activation is refused with them.
    ("id 0", lambda c: [dictionary_poison(c, 0), activation_poison(dict_id=0)], "invalid"),
    ("id 5", lambda c: [dictionary_poison(c, 5), activation_poison(dict_id=5)], "invalid"),
    (
        "id 2^32-1",
        lambda c: [dictionary_poison(c, 2**32 - 1), activation_poison(dict_id=2**32 - 1)],
        "invalid",
    ),
    (
        "id 0 in the metadata only",
        lambda c: [dictionary_poison(c, MIN_DICT_ID + 1, id=0)],
        "invalid",
    ),
    (
        "key's sha256 is not the metadata's",
        lambda c: [dictionary_poison(c, MIN_DICT_ID + 1, key=b"dictionary/32769/" + b"0" * 64)],
        "invalid",
    ),
    ("parent id 7", lambda c: [dictionary_poison(c, MIN_DICT_ID + 1, parent_id=7)], "invalid"),
    ("activation stack id 7", lambda c: [activation_poison(stack=[7])], "invalid"),
    ("id as a string", lambda c: [dictionary_poison(c, MIN_DICT_ID + 1, id="32769")], "invalid"),
    (
        "id '²' in the key",
        lambda c: [(b"dictionary/3276\xc2\xb2/" + b"0" * 64, b"x", [FMT])],
        "malformed",
    ),
    (
        "id '0032769' in the key",
        lambda c: [(b"dictionary/0032769/" + b"0" * 64, b"x", [FMT])],
        "malformed",
    ),
    (
        "id ' 32769' in the key",
        lambda c: [(b"dictionary/ 32769/" + b"0" * 64, b"x", [FMT])],
        "malformed",
    ),
    # 2. a claim is recorded only for a well-formed key.
    (
        "claim of 2^31-1 with a junk key",
        lambda c: [(b"dictionary/2147483647/x", b"junk", [FMT])],
        "malformed",
    ),
    (
        "claim with a short sha256",
        lambda c: [(b"dictionary/40000/abc", b"junk", [FMT])],
        "malformed",
    ),
    # 3. training values that are not a JSON object, or nest too deep.
    ("training [ x 100,000", lambda c: [training_poison(b"[" * 100_000)], "too_large"),
    ("training [ x 60,000", lambda c: [training_poison(b"[" * 60_000)], "malformed"),
    ("training []", lambda c: [training_poison(b"[]")], "malformed"),
    ("training a string", lambda c: [training_poison(b'"promoted"')], "malformed"),
    ("training not JSON", lambda c: [training_poison(b"{nope")], "malformed"),
    ("training finished_at NaN", lambda c: [training_poison(b'{"finished_at": NaN}')], "invalid"),
    (
        "training finished_at text",
        lambda c: [training_poison(b'{"finished_at": "soon"}')],
        "invalid",
    ),
    (
        "training bad UTF-8 key",
        lambda c: [training_poison(b"{}", b"training/\xff\xfe")],
        "malformed",
    ),
    ("training key .ids", lambda c: [training_poison(b"{}", b"training/.ids")], "invalid"),
    # 4. tables zstd cannot load behind a valid magic, id and sha256.
    (
        "entropy tables",
        lambda c: [dictionary_poison(c, MIN_DICT_ID + 1, _garbage_tables(c))],
        "integrity",
    ),
    (
        "not a dictionary",
        lambda c: [dictionary_poison(c, MIN_DICT_ID + 1, b"raw content" * 10)],
        "integrity",
    ),
    # 5. metadata fields out of range.
    ("level 2^40", lambda c: [dictionary_poison(c, MIN_DICT_ID + 1, level=2**40)], "invalid"),
    ("level 23", lambda c: [dictionary_poison(c, MIN_DICT_ID + 1, level=23)], "invalid"),
    ("level -8", lambda c: [dictionary_poison(c, MIN_DICT_ID + 1, level=-8)], "invalid"),
    ("version 0", lambda c: [dictionary_poison(c, MIN_DICT_ID + 1, version=0)], "invalid"),
    ("version 2^40", lambda c: [dictionary_poison(c, MIN_DICT_ID + 1, version=2**40)], "invalid"),
    ("size lies", lambda c: [dictionary_poison(c, MIN_DICT_ID + 1, size=2**40)], "invalid"),
    (
        "break-even 2^40",
        lambda c: [dictionary_poison(c, MIN_DICT_ID + 1, break_even_size=2**40)],
        "invalid",
    ),
    (
        "ratio NaN",
        lambda c: [dictionary_poison(c, MIN_DICT_ID + 1, heldout_ratio="NaN")],
        "invalid",
    ),
    (
        "namespace ../x",
        lambda c: [dictionary_poison(c, MIN_DICT_ID + 1, namespace="../x")],
        "invalid",
    ),
    (
        "namespace .ids",
        lambda c: [dictionary_poison(c, MIN_DICT_ID + 1, namespace=".ids")],
        "invalid",
    ),
    (
        "sha256 lies",
        lambda c: [dictionary_poison(c, MIN_DICT_ID + 1, sha256=OTHER_SHA)],
        "integrity",
    ),
    (
        "metadata nests deep",
        lambda c: [dictionary_poison(c, MIN_DICT_ID + 1, nest=5000)],
        "malformed",
    ),
    # Size caps: nothing past them is parsed.
    (
        "dictionary of 1 MiB + 1",
        lambda c: [dictionary_poison(c, MIN_DICT_ID + 1, c.data + bytes(2**20))],
        "too_large",
    ),
    (
        "metadata of 64 KiB + 1",
        lambda c: [dictionary_poison(c, MIN_DICT_ID + 1, pad="x" * 65536)],
        "too_large",
    ),
    (
        "activation of 64 KiB + 1",
        lambda c: [activation_poison(by="x" * MAX_JSON_VALUE)],
        "too_large",
    ),
    (
        "training of 64 KiB + 1",
        lambda c: [training_poison(b'{"x":"%s"}' % (b"y" * MAX_JSON_VALUE))],
        "too_large",
    ),
    # Activations that parse but must not switch anything.
    (
        "activation of an unknown id",
        lambda c: [activation_poison(dict_id=MIN_DICT_ID + 5)],
        "invalid",
    ),
    (
        "activation of another namespace",
        lambda c: [activation_poison("users", dict_id=MIN_DICT_ID)],
        "invalid",
    ),
    ("activation under another key", lambda c: [activation_poison(key=b"active/users")], "invalid"),
    ("activation action unknown", lambda c: [activation_poison(action="explode")], "invalid"),
    ("activation nests deep", lambda c: [activation_poison(nest=5000)], "malformed"),
    ("activation bad UTF-8 key", lambda c: [activation_poison(key=b"active/\xff")], "malformed"),
    ("activation tombstone", lambda c: [(b"active/orders", None, [])], "tombstone"),
    ("champion tombstone", lambda c: [(dictionary_record(c)[0], None, [])], "tombstone"),
    (
        "champion's id, other bytes",
        lambda c: [dictionary_poison(c, c.id, c.data[:-1] + b"!")],
        "conflict",
    ),
    # Records of no known format or kind.
    ("no key", lambda c: [(None, b"x", [FMT])], "format"),
    ("no format header", lambda c: [(b"training/orders", b"{}", [])], "format"),
    ("format 2", lambda c: [(b"training/orders", b"{}", [(FORMAT_HEADER, b"2")])], "format"),
    ("two format headers", lambda c: [(b"training/orders", b"{}", [FMT, FMT])], "format"),
    ("unknown key", lambda c: [(b"something/else", b"{}", [FMT])], "unknown_key"),
]


@pytest.mark.parametrize(("records", "kind"), [pytest.param(r, k, id=n) for n, r, k in POISON])
def test_a_poison_record_is_ignored_and_the_next_valid_one_applied(
    champion: Dictionary,
    successor: Dictionary,
    records: Callable[[Dictionary], list[Record]],
    kind: str,
) -> None:
    state = with_champion(champion)
    events = [state.apply(2 + i, *record) for i, record in enumerate(records(champion))]
    last = events[-1]
    assert isinstance(last, Ignored), last
    assert last.kind == kind, last
    assert all(isinstance(e, Ignored) for e in events), events
    assert state.active("orders") == champion
    assert set(state.dictionaries) == {champion.id}
    assert set(state.activations) == {"orders"}
    assert "orders" not in state.trainings
    assert MIN_DICT_ID < state.next_id() <= MIN_DICT_ID + 2  # no poison used the ids up
    # Following goes on: the valid records after the poison are applied.
    offset = 2 + len(events)
    assert isinstance(state.apply(offset, *consumed(dictionary_record(successor))), DictionaryAdded)
    switch = consumed(activation_record(activation("orders", successor.id, (champion.id,))))
    assert isinstance(state.apply(offset + 1, *switch), Activated)
    assert state.active("orders") == successor


def test_a_dictionary_zstd_cannot_load_is_refused_for_that_reason(champion: Dictionary) -> None:
    state = with_champion(champion)
    event = state.apply(2, *dictionary_poison(champion, MIN_DICT_ID + 1, _garbage_tables(champion)))
    assert isinstance(event, Ignored) and "zstd refuses the dictionary" in event.reason
    assert MIN_DICT_ID + 1 not in state.dictionaries


def test_every_reason_class_of_the_table_is_a_label_of_the_metric() -> None:
    assert {kind for _, _, kind in POISON} == set(IGNORED_REASONS)


def test_an_ignored_record_shows_its_key_escaped_and_cut(champion: Dictionary) -> None:
    state = with_champion(champion)
    event = state.apply(2, b"active/\n\x1b[31m" + b"x" * 300, b"{}", [FMT])
    assert isinstance(event, Ignored)
    assert event.key.startswith("active/\\n\\x1b[31m")
    assert len(event.key) <= 130 and event.key.endswith("…")


def test_dictionary_verified_refuses_ids_out_of_range_and_tables_zstd_cannot_load(
    champion: Dictionary,
) -> None:
    zero = champion.meta.model_copy(update={"id": 0})
    with pytest.raises(DictionaryIntegrityError, match=r"outside 32768\.\.2147483647"):
        Dictionary.verified(zero, with_dict_id(champion.data, 0), "test")
    broken = _garbage_tables(champion)
    meta = champion.meta.model_copy(update={"sha256": sha256_hex(broken)})
    with pytest.raises(DictionaryIntegrityError, match=r"\(test\): zstd refuses the dictionary"):
        Dictionary.verified(meta, broken, "test")


@pytest.mark.parametrize("dict_id", [0, 5, MIN_DICT_ID - 1, MAX_DICT_ID + 1, 2**32 - 1])
def test_the_encoder_refuses_a_dictionary_whose_id_is_out_of_range(
    champion: Dictionary, dict_id: int
) -> None:
    meta = champion.meta.model_copy(update={"id": dict_id})
    poison = Dictionary(meta=meta, data=with_dict_id(champion.data, dict_id % 2**32))
    with pytest.raises(ConfigError, match=f"dictionary id {dict_id} is outside"):
        Encoder(poison)


def test_metadata_from_the_wire_is_bounded(champion: Dictionary) -> None:
    fields = champion.meta.model_dump(mode="json")
    DictionaryMeta.model_validate_json(json.dumps(fields))
    for field, value in [("level", 2**40), ("id", 0), ("version", 0), ("break_even_size", -1)]:
        with pytest.raises(ValueError, match=field):
            DictionaryMeta.model_validate_json(json.dumps(fields | {field: value}))


# -- property: arbitrary records -----------------------------------------------------------------

_PREFIXES = [b"dictionary/", b"active/", b"training/", b""]
_SUFFIXES = [
    b"orders",
    b"users",
    b".ids",
    b"32768/" + b"0" * 64,
    b"2147483647/" + b"a" * 64,
    b"0/" + b"f" * 64,
    b"32769/x",
]
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)


@st.composite
def _keys(draw: st.DrawFn) -> bytes | None:
    if draw(st.integers(0, 9)) == 0:
        return None
    prefix = draw(st.sampled_from(_PREFIXES))
    suffix = draw(st.sampled_from(_SUFFIXES) | st.binary(max_size=24))
    return prefix + suffix


@st.composite
def _values(draw: st.DrawFn) -> bytes | None:
    kind = draw(st.sampled_from(["none", "binary", "json", "activation", "nested"]))
    if kind == "none":
        return None
    if kind == "binary":
        return draw(st.binary(max_size=64))
    if kind == "nested":
        opener = draw(st.sampled_from([b"[", b'{"a":']))
        return opener * draw(st.integers(1, 5000))
    if kind == "activation":
        fields = {
            "namespace": draw(st.sampled_from(["orders", "users", ".ids"])),
            "dict_id": draw(st.sampled_from([0, 5, MIN_DICT_ID, MIN_DICT_ID + 1, 2**32 - 1])),
            "action": draw(st.sampled_from(["activate", "rollback", "x"])),
            "by": "fuzz",
            "at": "2026-01-01T00:00:00Z",
            "stack": draw(st.lists(st.integers(-1, 2**32), max_size=3)),
        }
        return json.dumps(fields).encode()
    return json.dumps(draw(_json_values)).encode()


_headers = st.lists(
    st.tuples(
        st.sampled_from([FORMAT_HEADER, META_HEADER, "zd", "x"]),
        st.none() | st.just(FORMAT) | st.binary(max_size=32),
    ),
    max_size=4,
)


@pytest.fixture(scope="module")
def metadata_headers(champion: Dictionary) -> list[bytes]:
    """Metadata of the champion with one field replaced by something out of range."""
    fields = champion.meta.model_dump(mode="json")
    changes: list[dict[str, Any]] = [
        {"id": 0},
        {"level": 2**40},
        {"namespace": ".ids"},
        {"size": -1},
        {"sha256": OTHER_SHA},
        {},
    ]
    return [json.dumps(fields | change).encode() for change in changes]


@settings(
    max_examples=examples(300),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    records=st.lists(st.tuples(_keys(), _values(), _headers, st.integers(0, 6)), max_size=6),
)
def test_arbitrary_records_never_raise_never_apply_anything_invalid_and_following_goes_on(
    champion: Dictionary,
    successor: Dictionary,
    metadata_headers: list[bytes],
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, Any]], int]],
) -> None:
    state = with_champion(champion)
    offset = 2
    for key, value, headers, meta_choice in records:
        if meta_choice < len(metadata_headers):
            headers = [*headers, (META_HEADER, metadata_headers[meta_choice])]
        event = state.apply(offset, key, value, headers)
        offset += 1
        assert event is None or isinstance(
            event, Ignored | DictionaryAdded | Activated | TrainingRecorded
        )
        if isinstance(event, Ignored):
            assert event.kind in IGNORED_REASONS
        _assert_only_valid_state(state, champion)
    assert state.active("orders") == champion  # no junk is a dictionary it could activate
    # Following goes on: a valid dictionary and its activation after the junk are applied.
    fresh = successor if successor.id not in state.claims else None
    if fresh is not None:
        assert isinstance(state.apply(offset, *consumed(dictionary_record(fresh))), DictionaryAdded)
        switch = consumed(activation_record(activation("orders", fresh.id)))
        assert isinstance(state.apply(offset + 1, *switch), Activated)
        assert state.active("orders") == fresh
    training = state.apply(
        offset + 2, *consumed(training_record("orders", {"decision": "promoted"}))
    )
    assert isinstance(training, TrainingRecorded)


def _assert_only_valid_state(state: RegistryState, champion: Dictionary) -> None:
    for dict_id in state.dictionaries:
        dictionary = state.dictionaries[dict_id]
        assert dict_id == dictionary.id and MIN_DICT_ID <= dict_id <= MAX_DICT_ID
        Dictionary.verified(dictionary.meta, dictionary.data, "state")
    for namespace, active in state.activations.items():
        target = state.dictionaries[active.dict_id]
        assert target.namespace == namespace == active.namespace
    assert all(MIN_DICT_ID <= dict_id <= MAX_DICT_ID for dict_id in state.claims)
    assert all(isinstance(entry, dict) for entry in state.trainings.values())
    assert state.active("orders") == champion


# -- the reader around the state: refresh, log, count, follow ------------------------------------


class _Message:
    def __init__(self, offset: int, record: Record, error: Any = None) -> None:
        self._offset, self._record, self._error = offset, record, error

    def error(self) -> Any:
        return self._error

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._record[0]

    def value(self) -> bytes | None:
        return self._record[1]

    def headers(self) -> list[tuple[str, Any]]:
        return self._record[2]


class _Reader:
    """The two calls `Registry.refresh` makes of its consumer, over a list of records."""

    def __init__(self, records: list[Record]) -> None:
        self.records = records
        self.next = 0

    def get_watermark_offsets(
        self, tp: TopicPartition, timeout: float, cached: bool
    ) -> tuple[int, int]:
        return 0, len(self.records)

    def consume(self, count: int, timeout: float) -> list[_Message]:
        batch = [_Message(o, self.records[o]) for o in range(self.next, len(self.records))][:count]
        self.next += len(batch)
        return batch

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tps[0].topic, 0, self.next)]

    def close(self) -> None:
        pass


def _registry(
    records: list[Record], metrics: Metrics | None = None, reader: _Reader | None = None
) -> Registry:
    """A registry reading `records` (or with `reader`) instead of a Kafka topic."""
    settings = load_settings(registry={"topic": "_reg"})
    scripted = reader if reader is not None else _Reader(records)
    return Registry(settings, metrics=metrics, reader=cast(Consumer, scripted))


def test_refresh_logs_and_counts_each_ignored_record_and_applies_the_rest_of_the_batch(
    champion: Dictionary, successor: Dictionary
) -> None:
    records: list[Record] = [
        dictionary_record(champion),
        training_poison(b"[" * 50_000),
        dictionary_poison(champion, 0),
        activation_poison(dict_id=0),
        activation_record(activation("orders", champion.id)),
        training_poison(b"[]"),
        training_record("orders", {"decision": "promoted", "finished_at": 1.5}),
    ]
    metrics = Metrics(CollectorRegistry())
    registry = _registry(records, metrics)
    with structlog.testing.capture_logs() as logs:
        events = registry.refresh()
    assert [type(e).__name__ for e in events] == [
        "DictionaryAdded",
        "Ignored",
        "Ignored",
        "Ignored",
        "Activated",
        "Ignored",
        "TrainingRecorded",
    ]
    assert registry.state.active("orders") == champion
    assert registry.state.trainings["orders"]["decision"] == "promoted"
    ignored = [line for line in logs if line["event"] == "registry_record_ignored"]
    assert [(line["offset"], line["kind"]) for line in ignored] == [
        (1, "malformed"),
        (2, "invalid"),
        (3, "invalid"),
        (5, "malformed"),
    ]
    assert all(line["topic"] == "_reg" and line["reason"] for line in ignored)
    assert ignored[0]["key"] == "training/orders"
    assert ignored[1]["key"].startswith("dictionary/0/")
    counts = {
        reason: metrics.registry_records_ignored.labels(reason)._value.get()
        for reason in IGNORED_REASONS
    }
    assert counts == {r: {"malformed": 2, "invalid": 2}.get(r, 0) for r in IGNORED_REASONS}


def test_a_read_error_in_a_batch_still_applies_the_records_around_it(champion: Dictionary) -> None:
    class Failing(_Reader):
        def consume(self, count: int, timeout: float) -> list[_Message]:
            self.next = 2
            fault = type("Err", (), {"str": lambda self: "broker said no", "code": lambda self: 1})
            return [
                _Message(0, dictionary_record(champion)),
                _Message(1, (b"x", b"x", []), error=fault()),
            ]

        def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
            return 0, 2

    registry = _registry([], reader=Failing([]))
    with pytest.raises(RegistryUnavailable, match="broker said no"):
        registry.refresh()
    assert champion.id in registry.state.dictionaries


class _BrokenRegistry:
    """A registry whose reads fail with an exception no one expected, then succeed."""

    topic = "_reg"

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.reads = 0
        self.state = RegistryState()
        self.timeout = 1.0

    def refresh(self, timeout: float | None = None) -> list[Event]:
        self.reads += 1
        if self.reads <= self.failures:
            raise RecursionError("maximum recursion depth exceeded (a bug's stand-in)")
        return []

    catch_up = refresh  # the resolver's read; the trainer's is `refresh`

    def close(self) -> None:
        pass


def test_the_resolver_keeps_following_after_any_exception() -> None:
    registry = _BrokenRegistry(failures=3)
    resolver = RegistryResolver(registry, follow_interval=0.01)  # type: ignore[arg-type]
    try:
        deadline = time.monotonic() + 10
        while registry.reads < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert registry.reads >= 5
        assert resolver.following
    finally:
        resolver.close()


def test_a_decoder_over_a_poisoned_registry_decodes_what_the_champion_encoded(
    champion: Dictionary, events: list[bytes]
) -> None:
    # Active, so that the poison's tombstone of it is refused (retiring it is not poison).
    records: list[Record] = [
        dictionary_record(champion),
        activation_record(activation("orders", champion.id)),
    ]
    records += [r for _, build, _ in POISON for r in build(champion)]
    registry = _registry(records)
    registry.refresh()
    with Decoder(RegistryResolver(registry, follow_interval=None)) as decoder:
        encoder = Encoder(champion)
        for raw in events[4000:4050]:
            value, headers = encoder.encode(raw)
            assert decoder.decode(value, headers) == raw


# -- the trainer's follow ------------------------------------------------------------------------


class _LogRegistry(Registry):
    """`Registry` over a list: its records are read by `refresh`, as from the topic."""

    def __init__(self, records: list[Record]) -> None:
        super().__init__(load_settings(registry={"topic": "_reg"}), actor="test")
        self.records = records

    def refresh(self, timeout: float | None = None) -> list[Event]:
        events = []
        while self.state.position < len(self.records):
            offset = self.state.position
            event = self.state.apply(offset, *self.records[offset])
            if event is not None:
                events.append(event)
        return events


def _trainer(tmp_path: Path, registry: Registry) -> Trainer:
    return Trainer(
        settings=load_settings(dictionaries=tmp_path / "store", registry={"follow_interval": 1}),
        store=DictionaryStore(tmp_path / "store"),
        registry=registry,
        metrics=Metrics(CollectorRegistry()),
        reservoirs={},
        topics=["orders"],
        encoder_stats=lambda topic: CodecStats(),
        dictionaries_changed=lambda: None,
    )


def test_the_trainer_follows_past_poison_training_entries(
    tmp_path: Path, champion: Dictionary
) -> None:
    records: list[Record] = [
        dictionary_record(champion),
        activation_record(activation("orders", champion.id)),
        training_poison(b"[]"),
        training_poison(b"[" * 50_000),
        training_poison(b'{"finished_at": "yesterday"}'),
    ]
    registry = _LogRegistry(records)
    trainer = _trainer(tmp_path, registry)
    trainer.follow()
    assert trainer.store.active_id("orders") == champion.id  # synced past the poison
    records.append(training_record("orders", {"decision": "rejected", "finished_at": 1234.5}))
    trainer.follow()
    assert trainer.namespaces["orders"].schedule.last_run == 1234.5


def test_the_trainer_follows_on_after_a_read_fails_unexpectedly(tmp_path: Path) -> None:
    registry = _BrokenRegistry(failures=1)
    trainer = _trainer(tmp_path, registry)  # type: ignore[arg-type]
    with structlog.testing.capture_logs() as logs:
        trainer.follow()
        trainer.follow()
    assert registry.reads == 2
    assert [line["event"] for line in logs].count("registry_read_failed") == 1
