"""Where `train --topic` finds the dictionaries of a topic that producers compress in-process
(decode, then train): the local store first, then the registry; read_sample's decoding runs on a
broker (tests/integration/test_serde.py)."""

from __future__ import annotations

import pytest

from sidecar.cli.dicts import SampleResolver
from sidecar.config import RegistrySettings, Settings
from sidecar.dictionaries.registry_state import RegistryState
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import UnknownDictionary
from tests.unit.dictionaries import AddDictionary
from tests.unit.log_registry import LogRegistry, dictionary


def test_the_store_answers_first_and_the_registry_is_not_opened(
    store: DictionaryStore, add_dictionary: AddDictionary
) -> None:
    stored = add_dictionary("orders")
    settings = Settings(registry=RegistrySettings(enabled=False))
    resolver = SampleResolver(settings, store, None)
    assert resolver.get(stored.id) == stored
    with pytest.raises(UnknownDictionary, match="ZDICT_REGISTRY__ENABLED=false"):
        resolver.get(stored.id + 1)


def test_an_id_the_store_lacks_is_read_from_the_registry_it_was_given(
    store: DictionaryStore, trained_bytes: bytes
) -> None:
    registry = LogRegistry()
    published = dictionary(trained_bytes, 32800)
    registry.publish(published)
    registry.state = RegistryState()  # a reader that has not read the log yet
    resolver = SampleResolver(Settings(), store, registry)
    assert resolver.get(published.id) == published  # the registry was read again for it
    assert "then registry topic" in resolver.describe()
    with pytest.raises(UnknownDictionary, match="not in registry topic _zdict_test"):
        resolver.get(published.id + 1)
    resolver.close()
    assert not registry.closed  # the caller's registry stays open for publishing
