"""`dicts retire` against a real broker: a dictionary that is neither active nor in the rollback
stack is kept while a partition of its namespace's topic still holds records from before the
namespace's activation (or while a compacted topic is named for it), and listed for retirement
once they are gone. The records are removed with DeleteRecords, which advances the partition's
oldest offset as time-based retention does (the broker's retention check runs every 5 minutes:
too slow for a test). `--apply` retires it: a running reader, a fresh one and `dicts list`
forget it, its files leave the store, a record naming it is one clear error, and its id is
never claimed again.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from sidecar.bench.events import generate
from sidecar.codec import Encoder
from sidecar.config import KafkaSettings, RegistrySettings, Settings
from sidecar.dictionaries import Dictionary
from sidecar.dictionaries.model import with_new_id
from sidecar.dictionaries.registry import Registry
from sidecar.dictionaries.store import DictionaryStore
from sidecar.kafka import plain_producer

from .launch import RunCli
from .registry_dictionaries import dictionaries
from .topics import MakeTopic


def _settings(kafka_bootstrap: str, registry_topic: str) -> Settings:
    return Settings(
        kafka=KafkaSettings.model_validate({"bootstrap.servers": kafka_bootstrap}),
        registry=RegistrySettings(topic=registry_topic),
    )


def _old_and_current(
    kafka_bootstrap: str, registry_topic: str, topic: str
) -> tuple[Dictionary, Dictionary]:
    """Ten records of `topic` written with a dictionary never active, then the activation of
    another one and ten records written with it."""
    settings = _settings(kafka_bootstrap, registry_topic)
    old, current = dictionaries(2, namespace=topic)
    events = list(generate("order", 20, seed=3))
    producer = plain_producer(kafka_bootstrap)
    writer = Registry.open(settings, "test")
    try:
        writer.publish_dictionary(old)  # never active: only records name it
        for event in events[:10]:
            value, headers = Encoder(old, min_size=1).encode(event)
            producer.produce(topic, value=value, headers=list(headers))
        assert producer.flush(30) == 0
        time.sleep(0.01)  # the activation's time is after every record above
        writer.publish_dictionary(current)
        writer.publish_activation(topic, current.id, "promote")
    finally:
        writer.close()
    time.sleep(0.01)
    for event in events[10:]:
        value, headers = Encoder(current, min_size=1).encode(event)
        producer.produce(topic, value=value, headers=list(headers))
    assert producer.flush(30) == 0
    return old, current


def test_a_dictionary_whose_records_are_gone_is_retired_for_every_reader_and_its_id_kept(
    cli: RunCli,
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    registry_topic: str,
    make_topic: MakeTopic,
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=1)
    old, current = _old_and_current(kafka_bootstrap, registry_topic, topic)
    bounds = ("--older-than-days", "0", "--margin-hours", "0")

    def retire(*named: str) -> dict[int, dict[str, object]]:
        """The dry run's verdicts, by id."""
        flags = [f for t in named for f in ("--topic", t)]
        done = cli("dicts", "retire", *flags, *bounds, "--json")
        assert done.returncode == 0, done.stderr.decode()
        return {row["dict_id"]: row for row in json.loads(done.stdout)}

    before = retire(topic)
    why = str(before[old.id]["why"])
    assert before[old.id]["retire"] is False and "still holds records" in why
    assert "retention.ms takes them from" in why  # the topic's 7 days, read from the broker
    assert before[current.id] == {
        "dict_id": current.id,
        "namespace": topic,
        "retire": False,
        "why": "active",
    }

    # The records written with the old dictionary go, as retention would take them.
    tp = TopicPartition(topic, 0, 10)
    kafka_admin.delete_records([tp])[tp].result(timeout=30)
    assert retire(topic)[old.id]["retire"] is True
    # A compacted topic of the namespace keeps it: its retention is read from the broker.
    compacted = make_topic(partitions=1, config={"cleanup.policy": "compact"})
    kept = retire(topic, f"{topic}={compacted}")[old.id]
    assert kept["retire"] is False and "cleanup.policy=compact" in str(kept["why"]), kept
    shown = cli("dicts", "retire", "--topic", topic, *bounds)
    assert "dry run: 1 of 2 dictionaries" in shown.stdout.decode(), shown.stdout.decode()
    print(shown.stdout.decode())

    # A running reader, and the local store that holds the old dictionary.
    running = Registry.open(_settings(kafka_bootstrap, registry_topic), "test")
    store = DictionaryStore(tmp_path / "dictionaries")  # the cli's default store (its cwd)
    store.put(old)
    try:
        applied = cli("dicts", "retire", "--topic", topic, *bounds, "--apply")
        out = applied.stdout.decode()
        assert applied.returncode == 0, applied.stderr.decode()
        assert "retired 1 of 2 dictionaries" in out and "1 removed from the store" in out, out
        print(out)
        assert store.versions(topic) == []
        running.refresh()
        assert old.id not in running.state.dictionaries and old.id in running.state.retired
    finally:
        running.close()

    # A fresh reader's start (through the index) and dicts list: gone, not an error.
    listed = cli("dicts", "list", "--registry", "--json")
    assert listed.returncode == 0, listed.stderr.decode()
    assert [row["id"] for row in json.loads(listed.stdout)] == [current.id]
    assert retire(topic).keys() == {current.id}
    # What the topic still holds was written with the active dictionary: all of it decodes.
    kept_records = cli("cat", "--topic", topic, "--exit")
    assert kept_records.returncode == 0, kept_records.stderr.decode()
    assert kept_records.stdout.splitlines() == list(generate("order", 20, seed=3))[10:]
    # A record that names it: one clear error line, the retirement named.
    named = make_topic(partitions=1)
    value, headers = Encoder(old, min_size=1).encode(next(iter(generate("order", 1, seed=9))))
    assert headers  # compressed with it
    producer = plain_producer(kafka_bootstrap)
    producer.produce(named, value=value, headers=list(headers))
    assert producer.flush(30) == 0
    shown = cli("cat", "--topic", named, "--exit")
    err = shown.stderr.decode()
    assert shown.returncode == 1 and f"unknown dictionary id {old.id}: retired" in err, err
    assert "Traceback" not in err
    # A new publication never takes its id, whatever a fresh writer read.
    writer = Registry.open(_settings(kafka_bootstrap, registry_topic), "test")
    try:
        # The retired dictionary's own bytes again: published under the next free id.
        newer = with_new_id(dictionaries(3, namespace=topic)[2], old.id)
        published = writer.publish_dictionary(newer)
    finally:
        writer.close()
    assert published.id == current.id + 1
