"""What the relay's parts share: whether it goes on, what it holds, what is acknowledged.

Made before the Kafka clients, whose callbacks (`events.ClientEvents`) report into it, and
handed to the loop, its output and its commit strategy alike.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import TopicPartition

from sidecar.health import Health
from sidecar.kafka import Reachability
from sidecar.metrics import Metrics
from sidecar.relay.offsets import OffsetTracker
from sidecar.relay.output_modes import RelayOutputModes
from sidecar.relay.stored import RelayStored


@dataclass(slots=True)
class RelayStats:
    """Totals of one relay run, for the shutdown log line and tests."""

    consumed: int = 0
    produced: int = 0
    delivered: int = 0
    commits: int = 0
    queue_full_waits: int = 0
    dead_letters: int = 0
    errors: list[str] = field(default_factory=list)


class Control:
    """Whether the relay goes on: a stop asked for, or a failure (the first reason is kept)."""

    def __init__(self, stats: RelayStats) -> None:
        self._stats = stats
        self._stop = threading.Event()
        #: Why the relay had to stop (None: it did not have to).
        self.failure: str | None = None
        self._stall_seconds = 0.0

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        """Ask the loop to finish: stop fetching, flush, commit, close. Signal-handler safe."""
        self._stop.set()

    def stall(self, seconds: float) -> None:
        """Fault injection for tests: block the loop `seconds` at its next turn. Signal-handler
        safe. Taken between polls, never inside one: librdkafka counts a wait inside a poll
        call as polling, so only a stall there exceeds max.poll.interval.ms."""
        self._stall_seconds = seconds

    def take_stall(self) -> None:
        """Serve a stall asked for with `stall` (the loop calls this between polls)."""
        seconds, self._stall_seconds = self._stall_seconds, 0.0
        if seconds:
            time.sleep(seconds)

    def fail(self, reason: str) -> None:
        """Stop because of `reason`: nothing past what is acknowledged is committed."""
        if self.failure is None:
            self.failure = reason
            self._stats.errors.append(reason)
        self._stop.set()


class Assignment:
    """The input partitions this member of the group holds now."""

    def __init__(self) -> None:
        self.held: set[tuple[str, int]] = set()
        #: Rebalances that took partitions away (revoked or lost).
        self.releases = 0

    def __contains__(self, partition: object) -> bool:
        """Whether `partition`, a (topic, partition number) pair, is held."""
        return partition in self.held

    def __len__(self) -> int:
        return len(self.held)

    def add(self, partitions: list[TopicPartition]) -> None:
        self.held.update((tp.topic, tp.partition) for tp in partitions)

    def release(self, partitions: list[TopicPartition]) -> None:
        self.held.difference_update((tp.topic, tp.partition) for tp in partitions)
        self.releases += 1

    def partitions(self) -> list[TopicPartition]:
        """The held partitions, sorted."""
        return [TopicPartition(t, p) for t, p in sorted(self.held)]


class RelayState:
    """The relay's shared parts (see the module)."""

    def __init__(
        self,
        metrics: Metrics,
        health: Health,
        reachability: Reachability,
        clock: Callable[[], float] = time.monotonic,
        output_modes: RelayOutputModes | None = None,
        stored: RelayStored | None = None,
    ) -> None:
        """`output_modes`: which output partitions an encoding relay writes raw, fed by the
        producer's statistics (None: frames always); `stored`: what an encoding relay's output
        stores and saves, fed by the same statistics and the records consumed (None: a
        decoding relay, not counted)."""
        self.metrics = metrics
        self.output_modes = output_modes
        self.stored = stored
        self.health = health
        self.reachability = reachability
        self.clock = clock
        self.stats = RelayStats()
        self.control = Control(self.stats)
        self.offsets = OffsetTracker()
        self.assignment = Assignment()
