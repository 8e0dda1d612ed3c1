"""`train --topic` samples a real topic; the relay then uses the dictionary and reports lag.
`train --configured-topics` (the retraining CronJob's run) trains and publishes every topic of
the settings."""

from __future__ import annotations

import json
import time
from pathlib import Path

from sidecar.dictionaries.store import DictionaryStore

from .launch import RunCli, StartSidecar
from .probe import KafkaProbe
from .records import ProduceEvents
from .topics import MakeTopic


def test_train_from_a_topic_sample_then_relay_with_it_and_export_consumer_lag(
    make_topic: MakeTopic,
    produce_events: ProduceEvents,
    sidecar: StartSidecar,
    kafka_probe: KafkaProbe,
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=2)
    produce_events(topic, 6000, seed=5)
    store_dir = tmp_path / "dicts"

    train = sidecar(
        "train",
        "--topic",
        topic,
        "--sample",
        "4000",
        "--dictionaries",
        str(store_dir),
        name="train",
    )
    assert train.wait(120) == 0, train.tail()
    active = DictionaryStore(store_dir).active(topic)
    assert active is not None, train.tail()
    sample = active.meta.training
    assert sample.count + sample.heldout_count == 4000  # the last 2,000 of each partition
    assert f"topic {topic}" in sample.window

    relay = sidecar(
        "run", "--input-topic", topic, "--create-topics", "--dictionaries", str(store_dir)
    )
    deadline = time.monotonic() + 90
    while kafka_probe.count(f"{topic}.zd") < 6000 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert kafka_probe.count(f"{topic}.zd") == 6000, relay.tail()
    assert relay.events("dictionary_loaded")[0]["dict_id"] == active.id

    lags: dict[str, float] = {}
    while not lags and time.monotonic() < deadline:  # statistics arrive every 5 s
        lags = {
            dict(labels)["partition"]: value
            for (name, labels), value in relay.metrics().items()
            if name == "zdict_consumer_lag_records" and dict(labels)["topic"] == topic
        }
        time.sleep(0.5)
    assert set(lags) == {"0", "1"}, relay.tail()
    assert all(lag == 0 for lag in lags.values())
    assert relay.stop() == 0


def test_train_configured_topics_trains_and_publishes_every_topic_of_the_settings_in_one_run(
    make_topic: MakeTopic, produce_events: ProduceEvents, cli: RunCli, tmp_path: Path
) -> None:
    """was: the CronJob trained the first of ZDICT_RELAY__INPUT_TOPICS only."""
    relayed, proxied = make_topic(partitions=1), make_topic(partitions=1)
    produce_events(relayed, 3000, seed=5)
    produce_events(proxied, 3000, seed=6)
    settings = {
        "ZDICT_RELAY__INPUT_TOPICS": json.dumps([relayed]),
        "ZDICT_PROXY__TOPICS": json.dumps([proxied]),
        "ZDICT_TRAINING__DICT_SIZES": "[8192]",
        "ZDICT_TRAINING__LEVELS": "[3]",
    }
    trainer = ("--dictionaries", str(tmp_path / "trainer"))
    argv = ("train", "--configured-topics", "--publish", "--json", "--sample", "2000")
    done = cli(*argv, *trainer, env=settings)
    assert done.returncode == 0, done.stderr.decode()
    runs = json.loads(done.stdout)
    assert [(run["namespace"], run["decision"]) for run in runs] == [
        (relayed, "promoted"),
        (proxied, "promoted"),
    ]
    # Published: the registry, read into another store, has each as its topic's active one.
    listed = cli("dicts", "list", "--registry", "--json", "--dictionaries", str(tmp_path / "op"))
    assert listed.returncode == 0, listed.stderr.decode()
    active = {
        entry["namespace"]: entry["id"]
        for entry in json.loads(listed.stdout)
        if entry["active"] and entry["namespace"] in (relayed, proxied)
    }
    assert active == {relayed: runs[0]["stored_id"], proxied: runs[1]["stored_id"]}
