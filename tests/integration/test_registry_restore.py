"""The registry's disaster-recovery drill on a real broker: `dicts export`, the registry topic
deleted, `dicts import`, and every compressed record decodes again (issue 28, point 6).

A dictionary is trained and published with the real CLI (`train --publish`), records of a data
topic are compressed with it, the registry topic is backed up with `zdict-sidecar dicts export`
and deleted; a decoder that starts then has nothing to decode with. `zdict-sidecar dicts import`
restores the topic (created again, empty) from the file, and a fresh decoder over the restored
topic decodes every record of the data topic to its original value. Importing again into the
now non-empty topic is refused with one line that says what to do.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient

from sidecar.bench.events import generate
from sidecar.codec import Decoder, Encoder, Outcome
from sidecar.dictionaries.registry import Registry, RegistryResolver
from sidecar.kafka import plain_producer

from .launch import RunCli
from .records import ConsumeAll
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
