"""The first dictionary, with default settings, against the real broker: a backlog waits for a
dictionary trained from it, and a live stream gets one within seconds.

Every sidecar is a real `python -m sidecar run` process with default training and sampling
settings; the output is decoded by a `Decoder` over the registry alone. Figures are printed
(run with ``-s``); the time to a first dictionary at 1,000 records/s is also a row of
`zdict-sidecar bench lifecycle --rate 1000`.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from sidecar.codec import Decoder, parse_tag
from sidecar.dictionaries.registry import RegistryResolver

from .launch import StartSidecar
from .matching import match_output
from .probe import KafkaProbe
from .records import ConsumeAll, ProduceEvents, Record
from .topics import MakeTopic
from .waiting import wait_until

HEADER = "zd"


def _run(topic: str, store: Path) -> list[str]:
    group = f"zdict-it-cold-{uuid.uuid4().hex[:12]}"
    return ["run", "--input-topic", topic, "--create-topics", "--dictionaries", str(store),
            "--group-id", group]  # fmt: skip


def _dict_ids(records: list[Record]) -> Counter[int | None]:
    """Records per dictionary id (0: compressed without one, None: passed through)."""
    ids: Counter[int | None] = Counter()
    for record in records:
        tags = [v for k, v in record.headers if k == HEADER]
        ids[parse_tag(tags[0]).dict_id if tags else None] += 1
    return ids


def _seconds_between(earlier: dict[str, Any], later: dict[str, Any]) -> float:
    """Seconds between two log lines (their ISO 8601 UTC `timestamp`s)."""

    def at(line: dict[str, Any]) -> datetime:
        return datetime.fromisoformat(str(line["timestamp"]))

    return (at(later) - at(earlier)).total_seconds()


@pytest.fixture
def decoder(kafka_bootstrap: str, registry_topic: str) -> Iterator[Callable[[], Decoder]]:
    """Factory: a decoder that knows only the registry topic (made once the sidecar created it)."""
    made: list[Decoder] = []

    def make() -> Decoder:
        made.append(Decoder(RegistryResolver.connect(kafka_bootstrap, topic=registry_topic)))
        return made[-1]

    yield make
    for each in made:
        each.close()


def test_a_backlog_is_compressed_with_a_dictionary_trained_from_it(
    make_topic: MakeTopic,
    sidecar: StartSidecar,
    produce_events: ProduceEvents,
    consume_all: ConsumeAll,
    kafka_probe: KafkaProbe,
    decoder: Callable[[], Decoder],
    tmp_path: Path,
) -> None:
    n = 30_000
    topic = make_topic(partitions=2)
    inputs = produce_events(topic, n, seed=21)  # waiting before any sidecar runs
    proc = sidecar(*_run(topic, tmp_path / "store"), name="relay")
    output = f"{topic}.zd"
    wait_until(lambda: kafka_probe.count(output) >= n, 180, "the relay to relay the backlog")
    assert proc.stop() == 0, proc.tail()

    held = proc.events("backlog_held")
    released = proc.events("backlog_released")
    assert held and released, proc.tail()
    assert released[0]["reason"] == "first dictionary active", released
    [first] = [e for e in proc.events("training_finished") if e["decision"] == "promoted"][:1]
    assert first["sample_source"] == "backlog", first
    outputs = consume_all(output, n, timeout=90)
    ids = _dict_ids(outputs)
    with_dictionary = ids[first["stored_id"]]
    waited = _seconds_between(held[0], released[0])
    print(
        f"\nbacklog: {n:,} records waited {waited:.1f} s for dictionary "
        f"{first['stored_id']} (held-out ratio {first['heldout_ratio']}, trained in "
        f"{first['seconds']} s from {first['sample_messages']:,} records of the backlog); "
        f"{with_dictionary:,} of {n:,} records compressed with it; ids: {dict(ids)}"
    )
    assert with_dictionary >= 0.99 * n
    match = match_output(inputs, outputs, decoder())
    assert (match.lost, match.duplicates) == (0, 0)


def test_a_live_stream_at_1000_records_per_second_gets_its_first_dictionary_within_seconds(
    make_topic: MakeTopic,
    sidecar: StartSidecar,
    produce_events: ProduceEvents,
    consume_all: ConsumeAll,
    kafka_probe: KafkaProbe,
    decoder: Callable[[], Decoder],
    tmp_path: Path,
) -> None:
    n, rate = 20_000, 1000
    topic = make_topic(partitions=2)
    proc = sidecar(*_run(topic, tmp_path / "store"), name="relay")
    proc.wait_for_event("partitions_assigned", timeout=60)
    started = time.time()
    inputs = produce_events(topic, n, rate=rate, seed=22)
    output = f"{topic}.zd"
    wait_until(lambda: kafka_probe.count(output) >= n, 120, "the relay to catch up")
    assert proc.stop() == 0, proc.tail()

    assert not proc.events("backlog_held"), "a live stream has no backlog to wait for"
    promoted = [e for e in proc.events("training_finished") if e["decision"] == "promoted"]
    assert promoted, proc.tail(60)
    first = promoted[0]
    outputs = consume_all(output, n, timeout=90)
    ids = _dict_ids(outputs)
    dictionaries = sum(count for dict_id, count in ids.items() if dict_id)
    print(
        f"\nlive stream at {rate:,}/s: first dictionary {first['stored_id']} trained on "
        f"{first['sample_messages']:,} records, finished {first['finished_at'] - started:.1f} s "
        f"after the first record (training {first['seconds']} s); {dictionaries:,} of {n:,} "
        f"records compressed with a dictionary; ids: {dict(ids)}"
    )
    assert first["trigger"] == "first" and first["sample_messages"] <= 5000
    assert dictionaries >= 0.5 * n
    match = match_output(inputs, outputs, decoder())
    assert (match.lost, match.duplicates) == (0, 0)
