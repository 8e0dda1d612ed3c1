"""Shared fixtures for the broker-free unit tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard

from sidecar.bench.events import generate
from sidecar.dictionaries import Dictionary, TrainingSample
from sidecar.dictionaries.store import DictionaryStore

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


@pytest.fixture(scope="session")
def events() -> list[bytes]:
    """6,000 generated ~100-byte JSON events, the same on every run."""
    return list(generate("product_viewed", 6000, seed=7))


@pytest.fixture(scope="session")
def trained_bytes(events: list[bytes]) -> bytes:
    """An 8 KiB dictionary trained on the first 4,000 events (the rest are held out)."""
    # The zstandard stub's element type (its list is invariant).
    samples: list[bytes | bytearray | memoryview] = list(events[:4000])
    return zstandard.train_dictionary(8192, samples).as_bytes()


@pytest.fixture
def store(tmp_path: Path) -> DictionaryStore:
    return DictionaryStore(tmp_path / "dictionaries")


@pytest.fixture
def add_dictionary(store: DictionaryStore, trained_bytes: bytes) -> AddDictionary:
    """Factory: store a dictionary in `namespace` (default "orders") and return it."""

    def add(namespace: str = "orders", data: bytes | None = None, **meta: object) -> Dictionary:
        return add_to_store(store, namespace, data if data is not None else trained_bytes, **meta)

    return add
