"""A backlog waits for its first dictionary: the relay holds a topic's partitions back (paused)
until a dictionary is active for it, or `backlog_wait` passes; spec'd client fakes."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest.mock import MagicMock

from confluent_kafka import TopicPartition

from sidecar.dictionaries.store import DictionaryStore
from tests.unit.dictionaries import add_to_store
from tests.unit.relay_fakes import Clock, make_relay


def partitions(call: Any) -> list[tuple[str, int]]:
    return [(tp.topic, tp.partition) for tp in call.args[0]]


def run_with_assignment(relay: Any, consumer: MagicMock, clock: Clock, turn: Any) -> None:
    """Run the loop: the first consume assigns partition 0; `turn(n)` runs on every consume."""
    turns = [0]

    def consume(*args: Any) -> list[Any]:
        if turns[0] == 0:
            relay.on_assign(consumer, [TopicPartition("in", 0)])
        turns[0] += 1
        clock.now += 5
        turn(turns[0])
        return []

    consumer.consume.side_effect = consume
    consumer.subscribe.side_effect = None  # assigned by the first consume above instead
    relay.run()


def test_a_held_topic_is_paused_until_its_first_dictionary_is_active(
    tmp_path: Path, trained_bytes: bytes
) -> None:
    clock = Clock()
    relay, consumer, _, _events = make_relay(tmp_path, clock, hold={"in": 60.0})

    def turn(n: int) -> None:
        if n == 3:  # the trainer activated a dictionary trained from the backlog
            store = DictionaryStore(tmp_path)
            store.activate("in", add_to_store(store, "in", trained_bytes).id)
            assert relay.namespaces is not None
            relay.namespaces.request_refresh()
        if n == 5:
            relay.stop()

    run_with_assignment(relay, consumer, clock, turn)
    assert [partitions(c) for c in consumer.pause.call_args_list] == [[("in", 0)]]
    assert [partitions(c) for c in consumer.resume.call_args_list] == [[("in", 0)]]
    assert relay.namespaces is not None
    assert relay.namespaces["in"].active_id is not None


def test_a_held_topic_goes_on_without_a_dictionary_once_the_wait_is_over(tmp_path: Path) -> None:
    clock = Clock()
    relay, consumer, _, _events = make_relay(tmp_path, clock, hold={"in": 30.0})
    resumed_at: list[float] = []
    consumer.resume.side_effect = lambda tps: resumed_at.append(clock.now)

    def turn(n: int) -> None:
        if n == 12:
            relay.stop()

    run_with_assignment(relay, consumer, clock, turn)
    assert consumer.pause.call_count == 1
    assert len(resumed_at) == 1 and 1030 <= resumed_at[0] <= 1040


def test_a_topic_with_a_dictionary_already_is_not_held(
    tmp_path: Path, trained_bytes: bytes
) -> None:
    store = DictionaryStore(tmp_path)
    store.activate("in", add_to_store(store, "in", trained_bytes).id)
    clock = Clock()
    relay, consumer, _, _events = make_relay(tmp_path, clock, hold={"in": 60.0})
    run_with_assignment(relay, consumer, clock, lambda n: n == 2 and relay.stop())
    consumer.pause.assert_not_called()
