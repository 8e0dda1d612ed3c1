"""Dictionaries in a store for the unit tests, with placeholder metadata (the `add_dictionary`
fixture of conftest.py is built on them)."""

from __future__ import annotations

from collections.abc import Callable

from sidecar.dictionaries import Dictionary, TrainingSample
from sidecar.dictionaries.store import DictionaryStore

#: The `add_dictionary` fixture: `(namespace="orders", data=None, **meta) -> Dictionary`.
AddDictionary = Callable[..., Dictionary]


def add_to_store(store: DictionaryStore, namespace: str, data: bytes, **meta: object) -> Dictionary:
    """Store `data` with placeholder metadata (tests that care about a field pass it)."""
    fields: dict[str, object] = {
        "level": 3,
        "heldout_ratio": 2.0,
        "nodict_ratio": 1.0,
        "break_even_size": 0,
        "training": TrainingSample(count=4000, bytes=1, heldout_count=2000, heldout_bytes=1),
    }
    fields.update(meta)
    return store.add(namespace, data, **fields)  # type: ignore[arg-type]
