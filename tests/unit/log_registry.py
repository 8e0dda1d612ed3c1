"""A `Registry` over an in-memory log for the unit tests (the registry's real rules, no broker),
and the dictionaries to publish in it."""

from __future__ import annotations

import threading
from typing import Any

from sidecar.config import KafkaSettings, RegistrySettings, Settings
from sidecar.dictionaries.model import Dictionary, TrainingSample, build_dictionary
from sidecar.dictionaries.registry import Registry
from sidecar.dictionaries.registry_state import Ignored
from sidecar.errors import RegistryError, RegistryUnavailable

NAMESPACE = "orders"


class LogRegistry(Registry):
    """`Registry` over a list instead of a topic: the same rules, no broker. `gate` cleared
    makes reads block; `down` makes them fail as an unreachable cluster does."""

    def __init__(self) -> None:
        settings = Settings(
            kafka=KafkaSettings.model_validate({"bootstrap.servers": "unused:9092"}),
            registry=RegistrySettings(topic="_zdict_test", create=False),
        )
        super().__init__(settings, actor="test")
        self.log: list[tuple[bytes, bytes | None, list[tuple[str, Any]]]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.down = False
        self.missing = False
        self.reads = 0
        self.closed = False

    def ensure_topic(self) -> None:
        if self.missing:
            raise RegistryError(f"registry topic {self.topic} does not exist")

    def _produce(self, key: bytes, value: bytes | None, headers: Any) -> int:
        self.log.append((key, value, headers))
        return len(self.log) - 1

    def refresh(self, timeout: float | None = None) -> list[Any]:
        self.gate.wait(10.0)
        self.reads += 1
        if self.down:
            raise RegistryUnavailable(f"registry topic {self.topic}: no broker answered (test)")
        events = []
        while self.state.position < len(self.log):
            offset = self.state.position
            event = self.state.apply(offset, *self.log[offset])
            if event is not None and not isinstance(event, Ignored):
                events.append(event)
        return events

    def load(self, timeout: float | None = None, *, whole: bool = False) -> None:
        self.refresh(timeout)  # no index: the log read whole
        self.loaded = True

    def close(self) -> None:
        self.closed = True

    def publish(self, dictionary: Dictionary) -> None:
        """A trainer's promotion: the dictionary, then its activation (read on the next
        refresh of whoever follows)."""
        stored = self.publish_dictionary(dictionary, keep_id=True)
        self.publish_activation(stored.namespace, stored.id, "promote")


def dictionary(data: bytes, dict_id: int, namespace: str = NAMESPACE) -> Dictionary:
    return build_dictionary(
        namespace,
        data,
        dict_id=dict_id,
        version=dict_id - 32767,
        level=3,
        heldout_ratio=2.0,
        nodict_ratio=1.0,
        break_even_size=0,
        training=TrainingSample(count=1, bytes=1, heldout_count=1, heldout_bytes=1),
    )
