"""The registry's rules, as every reader applies them: first claim wins, bad entries ignored."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from sidecar.codec import Decoder, Encoder
from sidecar.dictionaries import Dictionary
from sidecar.dictionaries.model import MIN_DICT_ID, with_new_id
from sidecar.dictionaries.registry import Registry, RegistryResolver
from sidecar.dictionaries.registry_state import (
    FORMAT_HEADER,
    Activated,
    DictionaryAdded,
    Ignored,
    RegistryState,
    TrainingRecorded,
    activation_record,
    dictionary_key,
    dictionary_record,
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
    # Withdrawing the losing claim changes nothing; the winner's tombstone is refused.
    assert state.apply(10, dictionary_key(second), None, None) is None
    refused = state.apply(11, dictionary_key(first), None, None)
    assert isinstance(refused, Ignored)
    assert first.id in state.dictionaries


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

    def refresh(self, timeout: float | None = None) -> list[object]:
        self.refreshes += 1
        return []

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
