"""Registry records for the unit tests: as a reader consumes them, and the dictionaries and
activations they carry, with placeholder metadata."""

from __future__ import annotations

from datetime import UTC, datetime

from sidecar.dictionaries import Dictionary
from sidecar.dictionaries.model import MIN_DICT_ID, TrainingSample, build_dictionary
from sidecar.dictionaries.registry_state import Activation, Headers, Outgoing


def consumed(record: Outgoing) -> tuple[bytes, bytes, Headers]:
    """A record to publish as a reader consumes it: confluent-kafka sends a str header value
    UTF-8 encoded, so every header value comes back as bytes (or None)."""
    key, value, headers = record
    return key, value, [(name, v.encode() if isinstance(v, str) else v) for name, v in headers]


def make(trained_bytes: bytes, namespace: str = "orders", dict_id: int = MIN_DICT_ID) -> Dictionary:
    """A dictionary of `trained_bytes` as id `dict_id`, version 1, with placeholder metadata."""
    return build_dictionary(
        namespace,
        trained_bytes,
        dict_id=dict_id,
        version=1,
        level=3,
        heldout_ratio=2.0,
        nodict_ratio=1.0,
        break_even_size=0,
        training=TrainingSample(count=1, bytes=1, heldout_count=1, heldout_bytes=1),
    )


def activation(namespace: str, dict_id: int, stack: tuple[int, ...] = ()) -> Activation:
    """The promotion of `dict_id` in `namespace`; `stack`: the earlier active ids, latest last."""
    return Activation(
        namespace=namespace,
        dict_id=dict_id,
        action="promote",
        by="test",
        at=datetime(2026, 1, 1, tzinfo=UTC),
        stack=stack,
    )
