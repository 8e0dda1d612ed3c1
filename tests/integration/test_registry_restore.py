"""The registry's disaster-recovery drill on a real broker: `dicts export`, the registry topic
deleted, `dicts import`, and every compressed record decodes again (issue 28, point 6).

A dictionary is trained and published with the real CLI (`train --publish`), records of a data
topic are compressed with it, the registry topic is backed up with `zdict-sidecar dicts export`
and deleted; a decoder that starts then has nothing to decode with. `zdict-sidecar dicts import`
restores the topic (created again, empty) from the file, and a fresh decoder over the restored
topic decodes every record of the data topic to its original value. Importing again into the
now non-empty topic is refused with one line that says what to do.

The index after a restore: a partial backup restored leaves the index of the lost registry
topic, which readers ignore (`registry_index_stale`) and read the restored registry whole; `dicts
reindex` (which `dicts import` runs) writes the index anew, and readers then agree with the
restored registry while reading the index, the lost dictionaries' ids staying claimed. An index
entry that names the wrong record is caught when its dictionary is fetched, and the registry is
searched for the right one (`registry_index_disagrees`).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
import structlog
from confluent_kafka.admin import AdminClient

from sidecar.bench.events import generate
from sidecar.codec import Decoder, Encoder, Outcome
from sidecar.config import KafkaSettings, RegistrySettings, Settings
from sidecar.dictionaries.backup import import_records, read_backup
from sidecar.dictionaries.registry import Registry, RegistryResolver
from sidecar.dictionaries.registry_state import dictionary_key_of, dictionary_record
from sidecar.errors import UnknownDictionary
from sidecar.kafka import plain_producer

from .launch import RunCli
from .records import ConsumeAll
from .registry_dictionaries import NAMESPACE, dictionaries
from .topics import MakeTopic

RECORDS = 500


def _wait_deleted(admin: AdminClient, topic: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"topic {topic} still listed after {timeout:.0f} s"
        time.sleep(0.5)


def test_export_delete_import_and_every_record_decodes_again(
    cli: RunCli,
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    registry_topic: str,
    make_topic: MakeTopic,
    consume_all: ConsumeAll,
    tmp_path: Path,
) -> None:
    namespace = f"restore{uuid.uuid4().hex[:8]}"
    sample = tmp_path / "sample.ndjson"
    sample.write_bytes(b"".join(e + b"\n" for e in generate("product_viewed", 4_000, seed=7)))
    trained = cli("train", "--input", str(sample), "--namespace", namespace, "--publish")
    assert trained.returncode == 0, trained.stderr.decode()

    registry = Registry.connect(kafka_bootstrap, topic=registry_topic)
    try:
        dictionary = registry.state.active(namespace)
    finally:
        registry.close()
    assert dictionary is not None, "train --publish activated nothing"
    encoder = Encoder(dictionary)
    values = list(generate("product_viewed", RECORDS, seed=8))
    data_topic = make_topic(partitions=1)
    producer = plain_producer(kafka_bootstrap)
    compressed = 0
    for value in values:
        encoded = encoder.encode_record(value)
        compressed += encoded.outcome == Outcome.COMPRESSED
        producer.produce(data_topic, value=encoded.value, headers=list(encoded.headers))
    assert producer.flush(30) == 0
    # Nearly all need the dictionary (a few may pass through: no gain below the break-even).
    assert compressed > RECORDS * 0.9, compressed

    backup = tmp_path / "registry.backup"
    exported = cli("dicts", "export", str(backup))
    assert exported.returncode == 0, exported.stderr.decode()
    assert f"of registry topic {registry_topic}" in exported.stdout.decode()

    # The disaster: the registry topic is gone, and with it every dictionary.
    kafka_admin.delete_topics([registry_topic])[registry_topic].result(timeout=60)
    _wait_deleted(kafka_admin, registry_topic)

    imported = cli("dicts", "import", str(backup))
    assert imported.returncode == 0, imported.stderr.decode()
    assert "1 dictionaries, 1 active" in imported.stdout.decode(), imported.stdout.decode()

    resolver = RegistryResolver.connect(kafka_bootstrap, topic=registry_topic, follow_interval=None)
    try:
        decoder = Decoder(resolver)
        records = consume_all(data_topic, RECORDS)
        decoded = [decoder.decode(r.value, r.headers) for r in records]
    finally:
        resolver.close()
    assert decoded == values

    again = cli("dicts", "import", str(backup))
    assert again.returncode == 1
    (line,) = again.stderr.decode().strip().splitlines()
    assert "already holds records" in line and "Traceback" not in line


def _settings(bootstrap: str, topic: str) -> Settings:
    return Settings(
        kafka=KafkaSettings.model_validate({"bootstrap.servers": bootstrap}),
        registry=RegistrySettings(topic=topic),
    )


def test_after_a_partial_restore_the_stale_index_is_ignored_until_reindex_rewrites_it(
    cli: RunCli,
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    registry_topic: str,
    tmp_path: Path,
) -> None:
    settings = _settings(kafka_bootstrap, registry_topic)
    made = dictionaries(5)
    writer = Registry.open(settings, "test")
    try:
        kept = [writer.publish_dictionary(d) for d in made[:3]]
        writer.publish_activation(NAMESPACE, kept[-1].id, "promote")
        backup = tmp_path / "registry.backup"
        exported = cli("dicts", "export", str(backup))
        assert exported.returncode == 0, exported.stderr.decode()
        # Published after the backup: lost by the restore, but still in the index.
        lost = [writer.publish_dictionary(d) for d in made[3:]]
        writer.publish_activation(NAMESPACE, lost[-1].id, "promote")
    finally:
        writer.close()
    kafka_admin.delete_topics([registry_topic])[registry_topic].result(timeout=60)
    _wait_deleted(kafka_admin, registry_topic)

    def check(reader: Registry) -> None:
        state = reader.state
        assert state.activations[NAMESPACE].dict_id == kept[-1].id
        assert [m.id for m in state.versions()] == [d.id for d in kept]
        assert state.dictionaries[kept[0].id] == kept[0]
        assert state.next_id() == lost[-1].id + 1  # the lost ids are never claimed again

    # Restored as the library does it, the index left as it was: readers notice.
    import_records(settings, read_backup(backup)[1])
    with structlog.testing.capture_logs() as logs:
        reader = Registry.connect(kafka_bootstrap, topic=registry_topic)
    try:
        stale = [line for line in logs if line["event"] == "registry_index_stale"]
        assert len(stale) == 1 and stale[0]["records"] >= len(made)
        assert reader.state.index_through == 0  # the restored registry was read whole
        check(reader)
    finally:
        reader.close()

    reindexed = cli("dicts", "reindex")
    assert reindexed.returncode == 0, reindexed.stderr.decode()
    assert "3 dictionaries, 1 active" in reindexed.stdout.decode(), reindexed.stdout.decode()
    with structlog.testing.capture_logs() as logs:
        reader = Registry.connect(kafka_bootstrap, topic=registry_topic)
    resolver = RegistryResolver(reader, follow_interval=None)
    try:
        assert not [line for line in logs if line["event"] == "registry_index_stale"]
        assert reader.state.index_through > 0  # the index of the restored registry
        check(reader)
        with pytest.raises(UnknownDictionary):
            resolver.get(lost[0].id)
    finally:
        resolver.close()


def test_an_index_entry_naming_the_wrong_record_is_caught_on_fetch_and_found_in_the_registry(
    kafka_bootstrap: str, registry_topic: str
) -> None:
    settings = _settings(kafka_bootstrap, registry_topic)
    made = dictionaries(3)
    writer = Registry.open(settings, "test")
    try:
        writer.publish_dictionary(made[0])
        registry_id = writer.index.registry_id
        assert registry_id is not None
    finally:
        writer.close()
    # Published without an index entry, then indexed wrongly: at the offset of another record.
    producer = plain_producer(kafka_bootstrap)
    for record in (dictionary_record(made[1]), dictionary_record(made[2])):
        producer.produce(registry_topic, key=record[0], value=record[1], headers=record[2])
    meta = made[2].meta
    wrong = json.dumps({"offset": 0, "registry": registry_id, "meta": meta.model_dump(mode="json")})
    producer.produce(
        registry_topic + "-index",
        key=dictionary_key_of(meta),
        value=wrong.encode(),
        headers=[("zdict.format", b"1")],
    )
    assert producer.flush(30) == 0

    reader = Registry.connect(kafka_bootstrap, topic=registry_topic)
    try:
        with structlog.testing.capture_logs() as logs:
            assert reader.state.dictionaries[made[2].id] == made[2]
            assert reader.state.dictionaries[made[1].id] == made[1]
        disagrees = [line for line in logs if line["event"] == "registry_index_disagrees"]
        assert [(line["dict_id"], line["offset"]) for line in disagrees] == [(made[2].id, 0)]
    finally:
        reader.close()
