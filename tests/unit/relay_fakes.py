"""Spec'd fakes of the relay's Kafka clients, shared by the relay's unit tests: consumed records,
a relay on fake clients, and the delivery reports it handed the producer."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple, cast
from unittest.mock import MagicMock

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from prometheus_client import CollectorRegistry

from sidecar.codec import Encoder
from sidecar.dictionaries.store import DictionaryStore
from sidecar.health import Health
from sidecar.kafka import Reachability
from sidecar.metrics import Metrics
from sidecar.namespaces import Namespaces
from sidecar.relay.commits import COMMIT_LIMIT, CommitLedger, CommitStrategy, OffsetCommits
from sidecar.relay.events import ClientEvents
from sidecar.relay.exactly_once import Transactions
from sidecar.relay.loop import Relay
from sidecar.relay.output import DEFAULT_DELIVERY_TIMEOUT
from sidecar.relay.output_modes import RelayOutputModes
from sidecar.relay.producer_level import ProducerLevel
from sidecar.relay.state import RelayState
from sidecar.relay.stored import RelayStored


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def record(
    offset: int, value: bytes | None = b'{"event":"x","n":1}' * 8, partition: int = 0
) -> MagicMock:
    msg = MagicMock(spec_set=Message)
    msg.error.return_value = None
    msg.topic.return_value = "in"
    msg.partition.return_value = partition
    msg.offset.return_value = offset
    msg.value.return_value = value
    msg.key.return_value = None
    msg.headers.return_value = None
    msg.timestamp.return_value = (1, 1_700_000_000_000)
    return msg


class Rig(NamedTuple):
    """A relay on fake clients, with the callbacks its clients would call."""

    relay: Relay
    consumer: MagicMock
    producer: MagicMock
    events: ClientEvents


def make_relay(
    tmp_path: Path,
    clock: Clock,
    *,
    commit_interval: float = 0.0,
    commit_limit: float = COMMIT_LIMIT,
    transaction_records: int | None = None,
    partitions: dict[str, int] | None = None,
    outputs: dict[str, str] | None = None,
    metrics: Metrics | None = None,
    hold: Mapping[str, float] | None = None,
    dead_letters: Mapping[str, str] | None = None,
    max_record_bytes: Mapping[str, int] | None = None,
    delivery_timeout: float = DEFAULT_DELIVERY_TIMEOUT,
    batch_size: int = 1000,
    poll_timeout: float = 0.5,
    output_modes: RelayOutputModes | None = None,
    producer_level: ProducerLevel | None = None,
) -> Rig:
    """A relay on spec'd client fakes, encoding with the dictionaries stored in `tmp_path`: by
    default one input topic "in" → "in.zd", every input partition assigned when it subscribes.
    At least once, or exactly once with `transaction_records`; `output_modes` decide which
    output partitions go raw (None: frames always); `producer_level` replaces the producer
    when the active dictionaries choose another batch level."""
    consumer = MagicMock(spec_set=Consumer)
    producer = MagicMock(spec_set=Producer)
    producer.flush.return_value = 0
    metrics = metrics if metrics is not None else Metrics(CollectorRegistry())
    outputs = outputs or {"in": "in.zd"}
    stored = RelayStored(metrics.stored, outputs, None)
    state = RelayState(metrics, Health(), Reachability(60.0, clock), clock, output_modes, stored)
    ledger = CommitLedger(state)
    commits: CommitStrategy = (
        OffsetCommits(consumer, state, ledger, commit_limit)
        if transaction_records is None
        else Transactions(consumer, producer, state, transaction_records)
    )
    namespaces = Namespaces(
        DictionaryStore(tmp_path), lambda s, ns: Encoder.from_store(s, ns), metrics, None, clock
    )
    relay = Relay(
        consumer=consumer,
        producer=producer,
        state=state,
        commits=commits,
        outputs=outputs,
        partitions=partitions if partitions is not None else {"in": 1, "in.zd": 1},
        namespaces=namespaces,
        dead_letters=dead_letters,
        max_record_bytes=max_record_bytes,
        hold=hold,
        batch_size=batch_size,
        poll_timeout=poll_timeout,
        commit_interval=commit_interval,
        delivery_timeout=delivery_timeout,
        producer_level=producer_level,
    )
    inputs = (partitions or {"in": 1}).get("in", 1)

    def subscribe(topics: list[str], on_assign: Callable[..., None], **_: object) -> None:
        # As a consumer joining its group: every input partition assigned.
        on_assign(consumer, [TopicPartition("in", p) for p in range(inputs)])

    consumer.subscribe.side_effect = subscribe
    return Rig(relay, consumer, producer, ClientEvents(state, ledger.answered))


def transactions(relay: Relay) -> Transactions:
    """The exactly-once relay's commit strategy."""
    assert isinstance(relay.commits, Transactions)
    return relay.commits


def report(call: Any) -> Callable[[KafkaError | None, Any], None] | None:
    """The delivery report one produce() call carries (None: a report later stands for it).

    The relay's batch path passes produce()'s arguments by position (the callback is the
    fifth, as in confluent-kafka's C signature); its slow path by keyword.
    """
    callback = call.kwargs.get("on_delivery") if call.kwargs else call.args[4]
    return cast(Callable[[KafkaError | None, Any], None] | None, callback)


def deliveries(producer: MagicMock) -> list[Callable[[KafkaError | None, Any], None]]:
    """The delivery reports of everything produced so far, in produce order."""
    found = (report(c) for c in producer.produce.call_args_list)
    return [r for r in found if r is not None]


def delivered_message() -> MagicMock:
    msg = MagicMock(spec_set=Message)
    msg.timestamp.return_value = (1, 1_700_000_000_000)
    return msg
