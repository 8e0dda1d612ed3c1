"""Shared fixtures for the broker-free unit tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import zstandard

from sidecar.bench.events import generate
from sidecar.dictionaries import Dictionary
from sidecar.dictionaries.store import DictionaryStore
from tests.unit.dictionaries import AddDictionary, add_to_store


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
