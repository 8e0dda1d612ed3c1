"""The relay's batching: what it takes from the consumer and when it waits, with spec'd fakes."""

from __future__ import annotations

from pathlib import Path
from typing import cast
from unittest.mock import MagicMock

from confluent_kafka import Message
from prometheus_client import CollectorRegistry

from sidecar.bench.relay import percentile
from sidecar.metrics import Metrics
from sidecar.relay.loop import ACK_WAIT, Relay
from tests.unit.relay_fakes import Clock, make_relay, record


def make(tmp_path: Path) -> tuple[Relay, MagicMock, MagicMock, CollectorRegistry]:
    registry = CollectorRegistry()
    relay, consumer, producer, _events = make_relay(
        tmp_path, Clock(), metrics=Metrics(registry), batch_size=100, poll_timeout=0.5
    )
    return relay, consumer, producer, registry


def test_records_already_there_are_taken_without_waiting_for_a_full_batch(tmp_path: Path) -> None:
    relay, consumer, _, _ = make(tmp_path)
    consumer.consume.side_effect = [[record(0), record(1)]]
    assert len(relay.consume_batch()) == 2
    consumer.consume.assert_called_once_with(100, 0)


def test_an_idle_relay_waits_for_the_first_record_only_then_takes_what_came_with_it(
    tmp_path: Path,
) -> None:
    relay, consumer, _, _ = make(tmp_path)
    consumer.consume.side_effect = [[], [record(0)], [record(1), record(2)]]
    assert [m.offset() for m in relay.consume_batch()] == [0, 1, 2]
    calls = [c.args for c in consumer.consume.call_args_list]
    assert calls == [(100, 0), (1, 0.5), (99, 0)]


def test_with_reports_due_the_wait_is_short_so_they_are_served(tmp_path: Path) -> None:
    relay, consumer, _, _ = make(tmp_path)
    relay.state.offsets.single("in", 0, 7, 0.0, 0)
    consumer.consume.side_effect = [[], []]
    assert relay.consume_batch() == []
    assert consumer.consume.call_args_list[1].args == (1, ACK_WAIT)


def test_a_batch_is_produced_in_order_and_counted_from_the_encoders_tallies(
    tmp_path: Path,
) -> None:
    relay, _, producer, registry = make(tmp_path)
    batch = [record(0), record(1, b"tiny"), record(2, None)]
    relay.relay_batch(cast("list[Message]", batch))  # mocks standing for consumed messages
    produced = producer.produce.call_args_list
    assert [c.args[0] for c in produced] == ["in.zd"] * 3
    assert [c.args[3] for c in produced] == [0, 0, 0]  # same partition as the input
    assert produced[0].args[7] == [("zd", b"\x80\x00")] and produced[1].args[7] is None
    assert produced[2].args[1] is None  # the tombstone stays one
    assert relay.state.offsets.in_flight() == 3

    def count(outcome: str) -> float | None:
        return registry.get_sample_value(
            "zdict_records_total", {"topic": "in", "op": "encode", "outcome": outcome}
        )

    assert count("compressed") == 1 and count("below_threshold") == 1 and count("tombstone") == 1
    assert (
        registry.get_sample_value("zdict_input_bytes_total", {"topic": "in", "op": "encode"})
        == 152 + 4
    )


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 1.0) == 100.0
    assert percentile([3.0], 0.99) == 3.0
