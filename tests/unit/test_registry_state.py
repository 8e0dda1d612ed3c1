"""The registry's rules, as every reader applies them: first claim wins, bad entries ignored."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from sidecar.codec import Decoder, Encoder
from sidecar.dictionaries import Dictionary
from sidecar.dictionaries.model import MIN_DICT_ID, DictionaryMeta, with_new_id
from sidecar.dictionaries.registry import Registry, RegistryResolver
from sidecar.dictionaries.registry_state import (
    FORMAT_HEADER,
    Activated,
    DictionaryAdded,
    DictionaryRetired,
    Ignored,
    Outgoing,
    RegistryState,
    TrainingRecorded,
    activation_record,
    dictionary_key,
    dictionary_record,
    index_records,
    training_record,
)
from sidecar.errors import RegistryError, UnknownDictionary
from tests.unit.registry_records import activation, consumed, make


def test_a_published_dictionary_is_read_back_verified(trained_bytes: bytes) -> None:
    state = RegistryState()
    dictionary = make(trained_bytes)
    event = state.apply(0, *consumed(dictionary_record(dictionary)))
    assert event == DictionaryAdded(dictionary, 0)
    assert state.dictionaries[dictionary.id] == dictionary
    assert state.position == 1
    assert state.apply(1, *consumed(dictionary_record(dictionary))) is None  # the same bytes again


def test_the_first_claim_of_an_id_wins_and_later_ones_are_ignored(trained_bytes: bytes) -> None:
    state = RegistryState()
    first = make(trained_bytes, "orders")
    second = make(trained_bytes[:-8] + b"other!!!", "users")
    state.apply(5, *consumed(dictionary_record(first)))
    event = state.apply(9, *consumed(dictionary_record(second)))
    assert isinstance(event, Ignored) and "claimed first at offset 5" in event.reason
    assert event.kind == "conflict"
    assert state.dictionaries[first.id].namespace == "orders"
    # Withdrawing the losing claim changes nothing.
    assert state.apply(10, dictionary_key(second), None, None) is None
    assert state.dictionaries[first.id].namespace == "orders"


def test_a_tombstone_retires_a_dictionary_out_of_use_and_its_id_is_never_reused(
    trained_bytes: bytes,
) -> None:
    state = RegistryState()
    old, current = make(trained_bytes), make(trained_bytes, dict_id=MIN_DICT_ID + 1)
    state.apply(0, *consumed(dictionary_record(old)))
    state.apply(1, *consumed(dictionary_record(current)))
    state.apply(2, *consumed(activation_record(activation("orders", current.id, (old.id,)))))
    # In the rollback stack, then active: a tombstone is refused, the dictionary stays.
    for offset, dict_id in ((3, old.id), (4, current.id)):
        refused = state.apply(offset, dictionary_key(state.dictionaries[dict_id]), None, None)
        assert isinstance(refused, Ignored) and refused.kind == "tombstone", refused
    assert old.id in state.dictionaries and current.id in state.dictionaries
    # Out of the stack, it goes: gone for every reader, its id still claimed.
    state.apply(5, *consumed(activation_record(activation("orders", current.id))))
    event = state.apply(6, dictionary_key(old), None, None)
    assert event == DictionaryRetired(old.id, "orders", 6)
    assert old.id not in state.dictionaries and state.dictionaries.get(old.id) is None
    assert state.retired == {old.id}
    assert state.next_id() == current.id + 1
    # The same id claimed again by other bytes is a conflict, not a new dictionary.
    again = make(trained_bytes[:-8] + b"other!!!")
    conflict = state.apply(7, *consumed(dictionary_record(again)))
    assert isinstance(conflict, Ignored) and conflict.kind == "conflict"
    assert old.id not in state.dictionaries


def test_a_dictionary_whose_bytes_do_not_match_its_metadata_is_ignored_but_keeps_its_id(
    trained_bytes: bytes,
) -> None:
    state = RegistryState()
    dictionary = make(trained_bytes)
    key, value, headers = consumed(dictionary_record(dictionary))
    event = state.apply(0, key, value[:-1] + b"?", headers)
    assert isinstance(event, Ignored) and "sha256" in event.reason
    assert event.kind == "integrity"
    assert dictionary.id not in state.dictionaries
    assert state.next_id() == dictionary.id + 1  # ids are never reused, even refused ones


def test_records_of_an_unknown_format_or_key_are_ignored(trained_bytes: bytes) -> None:
    state = RegistryState()
    key, value, _ = dictionary_record(make(trained_bytes))
    event = state.apply(0, key, value, [(FORMAT_HEADER, b"2")])
    assert isinstance(event, Ignored) and "newer" in event.reason and event.kind == "format"
    unknown = state.apply(1, b"something/else", b"{}", [(FORMAT_HEADER, b"1")])
    assert isinstance(unknown, Ignored) and unknown.reason == "unknown key"
    assert unknown.kind == "unknown_key"
    assert isinstance(state.apply(2, None, b"x", None), Ignored)


def test_activations_name_a_dictionary_of_their_own_namespace(trained_bytes: bytes) -> None:
    state = RegistryState()
    orders = make(trained_bytes, "orders")
    users = with_new_id(make(trained_bytes, "users"), MIN_DICT_ID + 1)
    state.apply(0, *consumed(dictionary_record(orders)))
    state.apply(1, *consumed(dictionary_record(users)))
    assert isinstance(
        state.apply(2, *consumed(activation_record(activation("orders", orders.id)))), Activated
    )
    assert state.active("orders") == orders
    wrong = state.apply(3, *consumed(activation_record(activation("orders", users.id))))
    assert isinstance(wrong, Ignored) and "not a dictionary of orders" in wrong.reason
    assert wrong.kind == "invalid"
    assert state.active("orders") == orders
    assert state.active("users") is None


def test_next_id_and_version_look_past_every_claim_and_the_local_store(
    trained_bytes: bytes,
) -> None:
    state = RegistryState()
    assert state.next_id() == MIN_DICT_ID
    state.apply(0, *consumed(dictionary_record(make(trained_bytes))))
    assert state.next_id() == MIN_DICT_ID + 1
    assert state.next_id(avoid=[MIN_DICT_ID + 7]) == MIN_DICT_ID + 8
    assert state.next_version("orders") == 2
    assert state.next_version("orders", at_least=5) == 5
    assert state.next_version("users") == 1
    with pytest.raises(RegistryError, match="used up"):
        state.next_id(avoid=[2**31 - 1])


def test_the_latest_training_run_per_namespace_is_kept() -> None:
    state = RegistryState()
    state.apply(0, *consumed(training_record("orders", {"decision": "rejected"})))
    event = state.apply(1, *consumed(training_record("orders", {"decision": "promoted"})))
    assert isinstance(event, TrainingRecorded)
    assert state.trainings["orders"] == {"decision": "promoted"}


class _ReadRegistry:
    """What `Registry.connect` returns, without Kafka: a state read already, and `close`."""

    def __init__(self, *dictionaries: Dictionary) -> None:
        self.topic = "_zdict_dictionaries"
        self.state = RegistryState()
        for offset, dictionary in enumerate(dictionaries):
            self.state.apply(offset, *consumed(dictionary_record(dictionary)))
        self.refreshes = 0
        self.closed = False

    def catch_up(self, timeout: float | None = None) -> None:
        self.refreshes += 1

    def close(self) -> None:
        self.closed = True


def test_a_decoder_on_a_connected_registry_resolver_decodes_and_closes_the_registry(
    monkeypatch: pytest.MonkeyPatch, trained_bytes: bytes, events: list[bytes]
) -> None:
    dictionary = make(trained_bytes)
    registry = _ReadRegistry(dictionary)
    connected: list[tuple[str | None, str, Mapping[str, str] | None]] = []

    def connect(
        bootstrap: str | None = None,
        *,
        topic: str,
        properties: Mapping[str, str] | None = None,
    ) -> _ReadRegistry:
        connected.append((bootstrap, topic, properties))
        return registry

    monkeypatch.setattr(Registry, "connect", connect)
    value, headers = Encoder(dictionary).encode(events[0])
    assert headers  # compressed: the decoder has to find the dictionary
    resolver = RegistryResolver.connect(
        "kafka:9092", topic="_reg", follow_interval=None, security_protocol="SASL_SSL"
    )
    with Decoder(resolver) as decoder:
        assert decoder.decode(value, headers) == events[0]
        with pytest.raises(UnknownDictionary, match="not in registry topic"):
            resolver.get(dictionary.id + 1)
        assert registry.refreshes == 1  # an unknown id reads the registry again first
        assert not registry.closed
    assert connected == [("kafka:9092", "_reg", {"security_protocol": "SASL_SSL"})]
    assert registry.closed


def _reader_at_start(
    dictionaries: list[Dictionary], cache_bytes: int
) -> tuple[RegistryState, list[int]]:
    """A state that reads `dictionaries` again by offset from a list, as a `Registry` does from
    its topic, having applied them at start (`cache_new` off); and the offsets it fetched."""
    fetched: list[int] = []

    def fetch(offset: int, meta: DictionaryMeta) -> Dictionary:
        fetched.append(offset)
        return Dictionary.verified(meta, dictionaries[offset].data, f"offset {offset}")

    state = RegistryState(fetch, cache_bytes)
    state.dictionaries.cache_new = False
    for offset, dictionary in enumerate(dictionaries):
        state.apply(offset, *consumed(dictionary_record(dictionary)))
    state.dictionaries.cache_new = True
    return state, fetched


def test_a_dictionary_read_at_start_is_kept_only_once_asked_for_read_again_by_its_offset(
    trained_bytes: bytes,
) -> None:
    dictionaries = [with_new_id(make(trained_bytes), MIN_DICT_ID + i) for i in range(3)]
    state, fetched = _reader_at_start(dictionaries, cache_bytes=10 * len(trained_bytes))
    assert state.dictionaries.cached_bytes == 0 and len(state.dictionaries) == 3
    assert [m.id for m in state.versions()] == [d.id for d in dictionaries]
    assert state.dictionaries[dictionaries[1].id] == dictionaries[1]
    assert state.dictionaries.get(dictionaries[1].id) == dictionaries[1]
    assert fetched == [1]  # once: then from the cache
    assert state.dictionaries.get(MIN_DICT_ID + 99) is None and fetched == [1]


def test_the_cache_holds_at_most_its_bytes_the_least_recently_used_out_first(
    trained_bytes: bytes,
) -> None:
    dictionaries = [with_new_id(make(trained_bytes), MIN_DICT_ID + i) for i in range(4)]
    size = len(dictionaries[0].data)
    state, fetched = _reader_at_start(dictionaries, cache_bytes=2 * size)
    for offset in (0, 1, 0, 2, 0, 1):
        state.dictionaries.get(dictionaries[offset].id)
    # 0 stays (used last but one each time); 1 went out for 2, and 2 for 1.
    assert fetched == [0, 1, 2, 1]
    assert state.dictionaries.cached_bytes == 2 * size


def test_a_dictionary_published_after_the_start_is_kept_as_it_is_read(trained_bytes: bytes) -> None:
    first, later = (with_new_id(make(trained_bytes), MIN_DICT_ID + i) for i in range(2))
    state, fetched = _reader_at_start([first], cache_bytes=10 * len(trained_bytes))
    state.apply(1, *consumed(dictionary_record(later)))
    assert state.dictionaries[later.id] == later and fetched == []


def _published(trained_bytes: bytes) -> tuple[list[Dictionary], list[Outgoing]]:
    """Three dictionaries of `orders` and the registry log that publishes and activates them in
    turn."""
    dictionaries = [make(trained_bytes, dict_id=MIN_DICT_ID + i) for i in range(3)]
    log: list[Outgoing] = []
    for dictionary in dictionaries:
        log += [
            dictionary_record(dictionary),
            activation_record(activation("orders", dictionary.id)),
        ]
    return dictionaries, log


#: The registry topic's id the index is written for.
REGISTRY_ID = "registry-topic-id"


#: An index record as read: a tombstone's value is None.
IndexRecord = tuple[bytes, bytes | None, object]


def _from_index(
    index: Sequence[IndexRecord],
    log: list[Outgoing],
    dictionaries: list[Dictionary],
    registry_id: str = REGISTRY_ID,
) -> RegistryState:
    """A reader's start: the index, then the registry from where the index ends."""
    by_offset = {2 * i: d for i, d in enumerate(dictionaries)}
    state = RegistryState(
        lambda offset, meta: Dictionary.verified(meta, by_offset[offset].data, "log"), 1 << 20
    )
    for i, (key, value, _) in enumerate(index):
        assert not isinstance(state.apply_index(i, key, value, registry_id), Ignored)
    state.position = state.index_through
    for offset in range(state.position, len(log)):
        state.apply(offset, *consumed(log[offset]))
    return state


def test_a_reader_of_the_index_then_the_rest_of_the_registry_agrees_with_one_that_read_it_all(
    trained_bytes: bytes,
) -> None:
    dictionaries, log = _published(trained_bytes)
    writer = RegistryState()
    for offset, record in enumerate(log[:4]):  # two published when the index was written
        writer.apply(offset, *consumed(record))
    index, through = index_records(writer, 0, {}, REGISTRY_ID)
    assert through == 4
    for offset in range(4, len(log)):
        writer.apply(offset, *consumed(log[offset]))

    reader = _from_index(index, log, dictionaries)
    assert reader.activations == writer.activations
    assert reader.versions() == writer.versions()
    assert reader.claims == writer.claims and reader.next_id() == writer.next_id()
    assert reader.dictionaries[dictionaries[0].id] == dictionaries[0]  # read by its offset


def test_a_stale_activation_written_to_the_index_late_does_not_win(trained_bytes: bytes) -> None:
    dictionaries, log = _published(trained_bytes)
    behind, ahead = RegistryState(), RegistryState()
    for offset, record in enumerate(log):
        ahead.apply(offset, *consumed(record))
        if offset < 4:
            behind.apply(offset, *consumed(record))
    index = (
        index_records(ahead, 0, {}, REGISTRY_ID)[0] + index_records(behind, 0, {}, REGISTRY_ID)[0]
    )
    reader = _from_index(index, log, dictionaries)
    assert reader.activations["orders"].dict_id == dictionaries[2].id


def test_ids_are_never_reused_once_the_index_saw_them_claimed(trained_bytes: bytes) -> None:
    dictionaries, log = _published(trained_bytes)
    writer = RegistryState()
    for offset, record in enumerate(log):
        writer.apply(offset, *consumed(record))
    # Only the high-water mark is left (the dictionaries' records and entries compacted away).
    through = [r for r in index_records(writer, 0, {}, REGISTRY_ID)[0] if r[0] == b"through"]
    reader = RegistryState()
    reader.apply_index(0, through[0][0], through[0][1], REGISTRY_ID)
    assert reader.next_id() == dictionaries[-1].id + 1


def test_an_index_of_another_registry_topic_is_ignored_and_the_registry_read_whole(
    trained_bytes: bytes,
) -> None:
    dictionaries, log = _published(trained_bytes)
    lost = RegistryState()  # the registry topic as it was before a partial restore
    for offset, record in enumerate(log):
        lost.apply(offset, *consumed(record))
    index = index_records(lost, 0, {}, REGISTRY_ID)[0]
    restored = log[:4]  # the backup held the first two dictionaries and their activations
    reader = _from_index(index, restored, dictionaries, registry_id="the-restored-topic")
    assert reader.index_stale == len(index) and reader.index_through == 0
    assert reader.activations["orders"].dict_id == dictionaries[1].id
    assert [m.id for m in reader.versions()] == [d.id for d in dictionaries[:2]]
    assert reader.next_id() == dictionaries[-1].id + 1  # the lost ones' ids stay claimed


def test_a_retirement_in_the_index_is_forgotten_by_a_start_and_its_id_stays_claimed(
    trained_bytes: bytes,
) -> None:
    dictionaries, log = _published(trained_bytes)
    writer = RegistryState()
    for offset, record in enumerate(log):
        writer.apply(offset, *consumed(record))
    index, _ = index_records(writer, 0, {}, REGISTRY_ID)
    # The first dictionary retired: its record's tombstone, then its index record's, then the
    # index brought up to the registry (`Registry.retire`).
    key = dictionary_key(dictionaries[0])
    assert isinstance(writer.apply(len(log), key, None, []), DictionaryRetired)
    read: list[IndexRecord] = [*index, (key, None, [])]
    read += index_records(writer, len(log), {}, REGISTRY_ID)[0]
    read.append((b"training/orders", None, []))  # rebuild's tombstones forget nothing else
    reader = _from_index(read, log, dictionaries)
    assert reader.index_through == len(log) + 1  # the registry's tombstone is not read again
    assert [m.id for m in reader.versions()] == [d.id for d in dictionaries[1:]]
    assert reader.versions() == writer.versions()
    assert reader.next_id() == writer.next_id() == dictionaries[-1].id + 1
