"""Dictionaries that keep themselves fresh, against the real broker: sampling, in-process
training, drift, one trainer per namespace, the registry topic, rollback and decoders that know
only the registry.

Every sidecar is a real `python -m sidecar` process; the registry is a real topic of the test's
own; the output is read back and decoded by a fresh `Decoder` over `RegistryResolver.connect`,
which shares no files with the sidecars. Figures are printed (run with ``-s``).
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # public, but not in __all__
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

from sidecar.bench.events import generate
from sidecar.codec import Decoder, header_cost, parse_tag
from sidecar.dictionaries.model import build_dictionary
from sidecar.dictionaries.registry import Registry, RegistryResolver

from .launch import RunCli, StartSidecar
from .matching import match_output
from .probe import KafkaProbe
from .process import Sidecar
from .records import ConsumeAll, Outgoing, ProduceEvents, ProduceRecords, Record
from .topics import MakeTopic
from .waiting import wait_until

HEADER = "zd"
#: Training that fits a test: a small first sample, two sizes and two levels, quick retries, and
#: the registry read every second.
FAST_TRAINING = {
    "ZDICT_SAMPLING__MIN_MESSAGES": "4000",
    "ZDICT_SAMPLING__EVERY": "2",
    "ZDICT_TRAINING__DICT_SIZES": "[8192, 32768]",
    "ZDICT_TRAINING__LEVELS": "[1, 3]",
    "ZDICT_TRAINING__MIN_INTERVAL": "3",
    "ZDICT_REGISTRY__FOLLOW_INTERVAL": "1",
}
#: Judge drift over 4 s of traffic; a 2 MiB reservoir turns over within seconds at these rates.
FAST_DRIFT = {
    "ZDICT_TRAINING__DRIFT_WINDOW": "4",
    "ZDICT_TRAINING__DRIFT_MIN_MESSAGES": "2000",
    "ZDICT_SAMPLING__MAX_BYTES": str(2 * 1024 * 1024),
}
SHORT_SESSION = {
    "ZDICT_CONSUMER__SESSION_TIMEOUT_MS": "6000",
    "ZDICT_CONSUMER__HEARTBEAT_INTERVAL_MS": "1000",
}


def _group() -> str:
    return f"zdict-it-life-{uuid.uuid4().hex[:12]}"


def _run(topic: str, store: Path, *extra: str, group: str | None = None) -> list[str]:
    return [
        "run",
        "--input-topic",
        topic,
        "--create-topics",
        "--dictionaries",
        str(store),
        "--group-id",
        group or _group(),
        *extra,
    ]


def _finished(proc: Sidecar, **match: Any) -> list[dict[str, Any]]:
    """`training_finished` lines of `proc` whose fields equal `match`."""
    return [
        e for e in proc.events("training_finished") if all(e.get(k) == v for k, v in match.items())
    ]


def _wait_finished(proc: Sidecar, timeout: float, **match: Any) -> dict[str, Any]:
    wait_until(lambda: _finished(proc, **match), timeout, f"training_finished {match}")
    return _finished(proc, **match)[0]


def _dict_id(record: Record) -> int | None:
    ids = [v for k, v in record.headers if k == HEADER]
    return parse_tag(ids[0]).dict_id if ids and ids[0] is not None else None


@pytest.fixture
def registry_decoder(kafka_bootstrap: str, registry_topic: str) -> Iterator[Callable[[], Decoder]]:
    """Factory: a fresh decoder that knows only the registry topic (no files of the sidecars)."""
    made: list[Decoder] = []

    def make() -> Decoder:
        decoder = Decoder(RegistryResolver.connect(kafka_bootstrap, topic=registry_topic))
        made.append(decoder)
        return decoder

    yield make
    for decoder in made:
        decoder.close()


class Background:
    """Runs `produce_events` on a thread (the sidecars consume meanwhile); `.records` after."""

    def __init__(self, produce: Callable[[], list[Record]]) -> None:
        self.records: list[Record] = []
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(produce,), daemon=True)
        self._thread.start()

    def _run(self, produce: Callable[[], list[Record]]) -> None:
        try:
            self.records = produce()
        except BaseException as exc:
            self.error = exc

    def join(self, timeout: float = 180.0) -> list[Record]:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the producer did not finish"
        if self.error is not None:
            raise self.error
        return self.records


def _read_all(kafka_probe: KafkaProbe, consume_all: ConsumeAll, topic: str) -> list[Record]:
    total = kafka_probe.count(topic)
    records = consume_all(topic, total, timeout=90)
    assert len(records) == total
    return records


def _ratio(records: Sequence[Record], raw: dict[tuple[int, int], int]) -> float:
    """Raw bytes / output bytes (value plus our header) of output `records`."""
    out = sum(
        len(r.value or b"") + sum(header_cost(k, v or b"") for k, v in r.headers if k == HEADER)
        for r in records
    )
    return sum(raw[(r.partition, r.offset)] for r in records) / out


# -- 1. drift ------------------------------------------------------------------------------------


class _Traffic:
    """`product_viewed` events produced to a topic a second at a time (`rate` records), before
    or after a schema drift; `records` as delivered, `drift_at` the index of the first drifted.

    The test decides when to drift and when to stop from what the relay logs, so that a slow
    training run (a loaded machine) lengthens the traffic instead of missing it.
    """

    def __init__(self, produce_records: ProduceRecords, topic: str, rate: int) -> None:
        self._produce = produce_records
        self._topic = topic
        self._rate = rate
        self._keys = random.Random(11)
        self._before = generate("product_viewed", 10**7, seed=11)
        self._after = generate("product_viewed", 10**7, seed=12, drift_at=0)
        self.records: list[Record] = []
        self.drift_at: int | None = None

    def until(
        self, *, drifted: bool, promotions: Callable[[], int], seconds: int, timeout: float
    ) -> None:
        """Produce for at least `seconds`, and until `promotions()` is non-zero and has not
        changed for the last 3 seconds (the dictionary it promoted is in use); fails after
        `timeout` seconds."""
        if drifted and self.drift_at is None:
            self.drift_at = len(self.records)
        events = self._after if drifted else self._before
        deadline = time.monotonic() + timeout
        produced, seen, quiet = 0, 0, 0
        while produced < seconds or not seen or quiet < 3:
            assert time.monotonic() < deadline, f"{promotions()} promotion(s) in {timeout:.0f} s"
            batch = [
                Outgoing(key=b"user-%04d" % self._keys.randrange(200), value=next(events))
                for _ in range(self._rate)
            ]
            self.records += self._produce(self._topic, batch, rate=self._rate)
            produced += 1
            now = promotions()
            quiet = quiet + 1 if now == seen else 0
            seen = now


def test_a_schema_drift_triggers_an_early_retrain_that_restores_the_ratio_and_all_decodes(
    make_topic: MakeTopic,
    sidecar: StartSidecar,
    produce_records: ProduceRecords,
    consume_all: ConsumeAll,
    kafka_probe: KafkaProbe,
    registry_decoder: Callable[[], Decoder],
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=3)
    proc = sidecar(
        *_run(topic, tmp_path / "store"), env={**FAST_TRAINING, **FAST_DRIFT}, name="relay"
    )
    proc.wait_for_event("partitions_assigned", timeout=60)
    started = time.monotonic()
    traffic = _Traffic(produce_records, topic, rate=4000)
    # Before the drift, a first dictionary and perhaps a retrained one (the traffic grew).
    traffic.until(
        drifted=False,
        promotions=lambda: len(_finished(proc, decision="promoted")),
        seconds=10,
        timeout=120,
    )
    drift_started = time.time()  # the clock of the sidecar's `started_at`
    traffic.until(
        drifted=True,
        promotions=lambda: len(_finished(proc, trigger="drift", decision="promoted")),
        seconds=15,
        timeout=120,
    )
    inputs, drift_at = traffic.records, traffic.drift_at
    assert drift_at is not None
    output = f"{topic}.zd"
    wait_until(lambda: kafka_probe.count(output) >= len(inputs), 120, "the relay to catch up")
    assert proc.stop() == 0, proc.tail()

    drifts = _finished(proc, trigger="drift")
    promoted = [e for e in drifts if e["decision"] == "promoted"]
    # The dictionaries of the old schema: promoted from runs that started before the drift (a
    # first one, perhaps one retrained as the sample grew).
    earlier = [e for e in _finished(proc, decision="promoted") if e["started_at"] < drift_started]
    earlier_ids = {e["stored_id"] for e in earlier}
    assert all(e["live_ratio"] < e["champion_heldout_ratio"] * 0.9 for e in drifts)

    outputs = _read_all(kafka_probe, consume_all, output)
    match = match_output(inputs, outputs, registry_decoder())
    assert (match.lost, match.duplicates) == (0, 0)

    # The ratio after the drift: the dictionaries of the old schema against the last retrained.
    by_place = {(r.partition, r.offset): i for i, r in enumerate(inputs)}
    raw = {(r.partition, r.offset): len(r.value or b"") for r in inputs}
    after = [r for r in outputs if by_place[(r.partition, r.offset)] >= drift_at]
    old = [r for r in after if _dict_id(r) in earlier_ids]
    last_id = promoted[-1]["stored_id"]
    new = [r for r in after if _dict_id(r) == last_id]
    assert old, f"no record after the drift was encoded with {sorted(earlier_ids)}"
    assert new, f"no record was encoded with dictionary {last_id}, the last one promoted"
    old_ratio, new_ratio = _ratio(old, raw), _ratio(new, raw)
    before = [
        r
        for r in outputs
        if by_place[(r.partition, r.offset)] < drift_at and _dict_id(r) in earlier_ids
    ]
    first = earlier[0]
    print(
        f"\ndrift: ratio before the drift {_ratio(before, raw):.3f} (dictionaries "
        f"{sorted(earlier_ids)}, triggers {[e['trigger'] for e in earlier]}); after it "
        f"{old_ratio:.3f} with them, {new_ratio:.3f} with dictionary {last_id} (promoted by "
        f"{len(promoted)} drift-triggered run(s)); first promotion "
        f"{first['finished_at'] - first['started_at']:.1f} s after its start; drift runs took "
        f"{', '.join(str(e['seconds']) for e in drifts)} s; {len(inputs)} records produced "
        f"({drift_at} before the drift) in "
        f"{time.monotonic() - started:.0f} s"
    )
    assert new_ratio > old_ratio * 1.3


# -- 2. one trainer per namespace ----------------------------------------------------------------


def _scrape(proc: Sidecar, name: str, **labels: str) -> float | None:
    for (sample, got), value in proc.metrics().items():
        if sample == name and all((k, v) in got for k, v in labels.items()):
            return value
    return None


def test_three_instances_elect_one_trainer_per_namespace_and_another_takes_over_when_it_dies(
    make_topic: MakeTopic,
    sidecar: StartSidecar,
    produce_events: ProduceEvents,
    consume_all: ConsumeAll,
    kafka_probe: KafkaProbe,
    registry_decoder: Callable[[], Decoder],
    tmp_path: Path,
) -> None:
    topics = [make_topic(partitions=6), make_topic(partitions=6)]
    group = _group()
    env = {**FAST_TRAINING, **SHORT_SESSION, "ZDICT_TRAINING__RETRAIN_INTERVAL": "15"}
    procs = [
        sidecar(
            "run",
            *[arg for t in topics for arg in ("--input-topic", t)],
            "--create-topics",
            "--group-id",
            group,
            "--dictionaries",
            str(tmp_path / f"store-{i}"),  # no shared files: the registry is the link
            env=env,
            name=f"instance-{i}",
        )
        for i in range(3)
    ]

    def feed(topic: str, seed: int) -> Background:
        return Background(lambda: produce_events(topic, 90_000, rate=2000, seed=seed))

    feeds = [feed(topic, seed) for topic, seed in zip(topics, (21, 22), strict=True)]

    def trainers(topic: str, alive: Sequence[Sidecar]) -> list[Sidecar]:
        return [p for p in alive if _scrape(p, "zdict_trainer", topic=topic) == 1.0]

    def settled(alive: Sequence[Sidecar]) -> bool:
        held = [p.assignment() for p in alive]
        return all(held) and sum(len(h) for h in held) == 12

    wait_until(lambda: settled(procs), 60, "the three instances to share 12 partitions")
    for topic in topics:
        wait_until(lambda: len(trainers(topic, procs)) == 1, 30, f"one trainer of {topic}")  # noqa: B023
        (trainer,) = trainers(topic, procs)
        assert f"{topic}[0]" in trainer.assignment()
    first_trainer = trainers(topics[0], procs)[0]
    first = _wait_finished(first_trainer, 60, namespace=topics[0], decision="promoted")
    for proc in procs:  # every instance picks the dictionary up from the registry
        proc.wait_for_event(
            "dictionary_loaded", 30, where=lambda e: e["dict_id"] == first["stored_id"]
        )
    for other in procs:
        if other is not first_trainer:
            assert not _finished(other, namespace=topics[0])

    first_trainer.kill()
    killed_at = time.monotonic()
    alive = [p for p in procs if p is not first_trainer]
    wait_until(lambda: settled(alive), 60, "the survivors to take the partitions over")
    (successor,) = trainers(topics[0], alive)
    run = successor.wait_for_event(
        "training_finished", 60, where=lambda e: e["namespace"] == topics[0]
    )
    print(
        f"\nelection: trainer of {topics[0]} killed; {successor.name} took partition 0 over and "
        f"finished a {run['trigger']} training run ({run['decision']}) "
        f"{time.monotonic() - killed_at:.0f} s later"
    )
    inputs = {t: f.join() for t, f in zip(topics, feeds, strict=True)}
    decoder = registry_decoder()
    for topic in topics:
        output = f"{topic}.zd"
        expected = len(inputs[topic])
        wait_until(
            lambda: kafka_probe.count(output) >= expected,  # noqa: B023
            120,
            f"{output} to hold every input",
        )
        outputs = _read_all(kafka_probe, consume_all, output)
        match = match_output(inputs[topic], outputs, decoder)
        print(f"{topic}: {match}")
        assert match.lost == 0
    for proc in alive:
        assert proc.stop() == 0, proc.tail()


# -- 3. the champion stays when the challenger is not better --------------------------------------


def test_a_challenger_no_better_than_the_champion_is_rejected_recorded_and_the_champion_stays(
    make_topic: MakeTopic,
    produce_events: ProduceEvents,
    cli: RunCli,
    kafka_bootstrap: str,
    registry_topic: str,
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=2)
    produce_events(topic, 30_000, seed=31)
    # No speed budget: the pick is then the smallest output, the same on the same data (with one,
    # a busy machine can move the pick between two runs).
    train = [
        *("train", "--topic", topic, "--publish", "--json", "--sample", "20000"),
        *("--budget-us", "0", "--budget-mb-per-s", "0"),
    ]
    first = cli(*train, "--dictionaries", str(tmp_path / "a"))
    assert first.returncode == 0, first.stderr.decode()
    champion = json.loads(first.stdout)
    assert champion["decision"] == "promoted"
    # Another host (another store) trains on the same data: not 2% better, so rejected.
    second = cli(*train, "--dictionaries", str(tmp_path / "b"))
    assert second.returncode == 0, second.stderr.decode()
    challenger = json.loads(second.stdout)
    assert challenger["decision"] == "rejected"
    assert challenger["champion_id"] == champion["stored_id"]
    assert "does not beat champion" in challenger["reason"]
    listed = cli("dicts", "list", "--registry", "--json")
    assert listed.returncode == 0, listed.stderr.decode()
    entries = json.loads(listed.stdout)
    assert [(e["id"], e["active"]) for e in entries] == [(champion["stored_id"], True)]
    runs = (tmp_path / "b" / topic / "TRAINING.jsonl").read_text().splitlines()
    assert json.loads(runs[-1])["decision"] == "rejected"
    registry = Registry.connect(kafka_bootstrap, topic=registry_topic)
    try:
        assert registry.state.trainings[topic]["decision"] == "rejected"
        assert registry.state.activations[topic].dict_id == champion["stored_id"]
    finally:
        registry.close()


# -- 4. a registry that does not take a publication changes nothing ------------------------------


def _set_topic_config(admin: AdminClient, topic: str, name: str, value: str) -> None:
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def test_when_the_registry_refuses_a_publication_the_relay_keeps_the_old_dictionary(
    make_topic: MakeTopic,
    sidecar: StartSidecar,
    produce_events: ProduceEvents,
    consume_all: ConsumeAll,
    kafka_probe: KafkaProbe,
    kafka_admin: AdminClient,
    registry_topic: str,
    registry_decoder: Callable[[], Decoder],
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=2)
    env = {**FAST_TRAINING, **FAST_DRIFT, "ZDICT_REGISTRY__TIMEOUT": "4"}
    proc = sidecar(*_run(topic, tmp_path / "store"), env=env, name="relay")
    proc.wait_for_event("partitions_assigned", timeout=60)
    inputs = produce_events(topic, 20_000, rate=5000, seed=41)
    first = _wait_finished(proc, 60, decision="promoted")
    proc.wait_for_event("dictionary_loaded", 30, where=lambda e: e["dict_id"] == first["stored_id"])

    # The registry refuses every write from now on (no record fits in 100 bytes); reading it
    # still works, as when its partition leader cannot take writes.
    _set_topic_config(kafka_admin, registry_topic, "max.message.bytes", "100")
    feed = Background(lambda: produce_events(topic, 40_000, rate=4000, seed=42, drift_at=0))
    refused = _wait_finished(proc, 90, decision="failed")
    assert "not published" in refused["reason"]
    assert _scrape(proc, "zdict_registry_publications_total", result="failed") == 1.0
    assert proc.running()
    drifted = feed.join()

    # The registry takes writes again: the retried run publishes and the relay switches.
    _set_topic_config(kafka_admin, registry_topic, "max.message.bytes", str(2 * 1024 * 1024))
    recovered = _wait_finished(proc, 90, decision="promoted", trigger="scheduled")
    proc.wait_for_event(
        "dictionary_loaded", 30, where=lambda e: e["dict_id"] == recovered["stored_id"]
    )
    later = produce_events(topic, 5_000, rate=5000, seed=43, drift_at=0)
    output = f"{topic}.zd"
    total = 20_000 + len(drifted) + len(later)
    wait_until(lambda: kafka_probe.count(output) >= total, 60, "the relay to catch up")
    assert proc.stop() == 0, proc.tail()

    outputs = _read_all(kafka_probe, consume_all, output)
    match = match_output([*inputs, *drifted, *later], outputs, registry_decoder())
    assert (match.lost, match.duplicates) == (0, 0)
    ids = Counter(_dict_id(r) for r in outputs)
    # While the registry refused, nothing referenced an unpublished dictionary (0: the records
    # compressed without one before the first dictionary).
    assert set(ids) <= {first["stored_id"], recovered["stored_id"], 0, None}
    late = {(r.partition, r.offset) for r in later}
    assert {_dict_id(r) for r in outputs if (r.partition, r.offset) in late} <= {
        recovered["stored_id"],
        None,
    }
    print(
        f"\nregistry refusal: a promoted dictionary was not published ({refused['reason'][:80]}…)"
        f"; the retry {recovered['finished_at'] - refused['finished_at']:.1f} s later published "
        f"{recovered['stored_id']}; output records by dictionary id: {dict(ids)}"
    )


# -- 5. rollback ---------------------------------------------------------------------------------


def test_a_rollback_through_the_cli_switches_new_records_to_the_older_dictionary(
    make_topic: MakeTopic,
    sidecar: StartSidecar,
    produce_events: ProduceEvents,
    consume_all: ConsumeAll,
    kafka_probe: KafkaProbe,
    cli: RunCli,
    registry_decoder: Callable[[], Decoder],
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=2)
    train = ["train", "--topic", topic, "--publish", "--json", "--sample", "10000"]
    store = ["--dictionaries", str(tmp_path / "operator")]
    phase1 = produce_events(topic, 10_000, seed=51)
    v1 = json.loads(cli(*train, *store).stdout)["stored_id"]
    proc = sidecar(
        *_run(topic, tmp_path / "relay-store", "--no-training"), env=FAST_TRAINING, name="relay"
    )
    proc.wait_for_event("dictionary_loaded", 60, where=lambda e: e["dict_id"] == v1)
    phase2 = produce_events(topic, 10_000, seed=52, drift_at=0)
    trained = cli(*train, *store)
    assert trained.returncode == 0, trained.stderr.decode()
    v2 = json.loads(trained.stdout)["stored_id"]
    assert v2 not in (None, v1)
    proc.wait_for_event("dictionary_loaded", 30, where=lambda e: e["dict_id"] == v2)
    phase3 = produce_events(topic, 5_000, seed=53, drift_at=0)

    rolled = cli("dicts", "rollback", "--registry", "--namespace", topic, *store)
    assert rolled.returncode == 0, rolled.stderr.decode()
    assert f"dictionary {v1} " in rolled.stdout.decode()
    wait_until(
        lambda: [e for e in proc.events("dictionary_loaded") if e["dict_id"] == v1][1:],
        30,
        "the relay to switch back",
    )
    phase4 = produce_events(topic, 5_000, seed=54, drift_at=0)
    output = f"{topic}.zd"
    inputs = [*phase1, *phase2, *phase3, *phase4]
    wait_until(lambda: kafka_probe.count(output) >= len(inputs), 60, "the relay to catch up")
    assert proc.stop() == 0, proc.tail()

    outputs = _read_all(kafka_probe, consume_all, output)
    match = match_output(inputs, outputs, registry_decoder())
    assert (match.lost, match.duplicates) == (0, 0)
    by_place = {(r.partition, r.offset): r for r in outputs}

    def ids(phase: list[Record]) -> set[int | None]:
        return {_dict_id(by_place[(r.partition, r.offset)]) for r in phase}

    assert ids(phase3) <= {v2, None} and v2 in ids(phase3)
    assert ids(phase4) <= {v1, None} and v1 in ids(phase4)
    listed = json.loads(cli("dicts", "list", "--registry", "--json").stdout)
    assert {e["id"]: e["active"] for e in listed} == {v1: True, v2: False}


# -- 6. decoders that know only the registry -----------------------------------------------------


def test_decode_mode_and_cat_restore_every_record_from_the_registry_alone(
    make_topic: MakeTopic,
    sidecar: StartSidecar,
    produce_events: ProduceEvents,
    consume_all: ConsumeAll,
    kafka_probe: KafkaProbe,
    cli: RunCli,
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=2)
    inputs = produce_events(topic, 12_000, seed=61)
    assert cli("train", "--topic", topic, "--publish", "--dictionaries", "a").returncode == 0
    encode = sidecar(*_run(topic, tmp_path / "b", "--no-training"), name="encode")
    compressed = f"{topic}.zd"
    wait_until(lambda: kafka_probe.count(compressed) >= len(inputs), 60, "the encoder")
    decode = sidecar(
        *_run(compressed, tmp_path / "c", "--mode", "decode"), name="decode"
    )  # an empty store of its own: every dictionary comes from the registry
    decoded_topic = f"{compressed}.decoded"
    wait_until(lambda: kafka_probe.count(decoded_topic) >= len(inputs), 60, "the decoder")
    assert encode.stop() == 0 and decode.stop() == 0, decode.tail()

    decoded = _read_all(kafka_probe, consume_all, decoded_topic)
    by_place = {(r.partition, r.offset): r for r in inputs}
    for record in decoded:
        source = by_place[(record.partition, record.offset)]
        assert (record.key, record.value, record.headers, record.timestamp) == (
            source.key,
            source.value,
            source.headers,
            source.timestamp,
        )
    assert len(decoded) == len(inputs)

    printed = cli("cat", "-t", compressed, "-e", "--dictionaries", str(tmp_path / "d"))
    assert printed.returncode == 0, printed.stderr.decode()
    assert sorted(printed.stdout.splitlines()) == sorted(r.value or b"" for r in inputs)
    as_json = cli("cat", "-t", compressed, "-e", "--json", "-c", "5", "-p", "1")
    lines = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert len(lines) == 5 and all(line["partition"] == 1 and line["dict_id"] for line in lines)
    assert [line["value"].encode() for line in lines] == [
        r.value for r in sorted(inputs, key=lambda r: (r.partition, r.offset)) if r.partition == 1
    ][:5]


# -- 7. ids are claimed in log order ---------------------------------------------------------------


def test_a_writer_that_loses_the_race_for_an_id_withdraws_its_claim_and_takes_the_next(
    kafka_bootstrap: str,
    registry_topic: str,
    sidecar_env: Callable[..., dict[str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sidecar.config import load_settings

    monkeypatch.setenv("ZDICT_REGISTRY__TOPIC", registry_topic)
    writer_a = Registry.open(load_settings(), "writer-a")
    writer_b = Registry.open(load_settings(), "writer-b")
    try:
        orders = _candidate("orders", b"a")
        users = _candidate("users", b"b")
        # B read the registry before A published; its next read happens only after its claim,
        # as when both publish at the same moment.
        real_refresh = writer_b.refresh
        reads = Counter[str]()

        def stale_first(timeout: float | None = None) -> list[Any]:
            reads["b"] += 1
            return [] if reads["b"] == 1 else real_refresh(timeout)

        monkeypatch.setattr(writer_b, "refresh", stale_first)
        published_a = writer_a.publish_dictionary(orders)
        published_b = writer_b.publish_dictionary(users)
        assert published_a.id == orders.id
        assert published_b.id == orders.id + 1
        reader = Registry.connect(kafka_bootstrap, topic=registry_topic)
        try:
            assert reader.state.dictionaries[published_a.id].namespace == "orders"
            assert reader.state.dictionaries[published_b.id].namespace == "users"
            assert reader.state.dictionaries[published_a.id].meta.sha256 == orders.meta.sha256
        finally:
            reader.close()
    finally:
        writer_a.close()
        writer_b.close()


def _candidate(namespace: str, salt: bytes) -> Any:
    import zstandard

    from sidecar.bench.events import generate
    from sidecar.dictionaries.model import MIN_DICT_ID, TrainingSample

    data = zstandard.train_dictionary(4096, list(generate("product_viewed", 2000, seed=7)))
    return build_dictionary(
        namespace,
        data.as_bytes() + salt,
        dict_id=MIN_DICT_ID,
        version=1,
        level=3,
        heldout_ratio=2.0,
        nodict_ratio=1.0,
        break_even_size=0,
        training=TrainingSample(count=1, bytes=1, heldout_count=1, heldout_bytes=1),
    )


# -- 8. the sampler's memory ---------------------------------------------------------------------


def _preload(bootstrap: str, topic: str, count: int, large_every: int) -> tuple[int, int, int]:
    """Produce `count` records, one in `large_every` of 4-160 KB (some above the sampler's
    value limit); returns the bytes produced and the smallest and largest large value."""
    import random

    from confluent_kafka import Producer

    from sidecar.bench.events import generate

    rng = random.Random(81)
    blobs = [
        json.dumps({"blob": f"x{i:02d}" * rng.randrange(1000, 40_000)}).encode() for i in range(50)
    ]
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 500_000}
    )
    produced = 0
    for i, value in enumerate(generate("product_viewed", count, seed=82)):
        if i % large_every == large_every - 1:
            value = blobs[i % len(blobs)]
        while True:
            try:
                producer.produce(topic, value, key=b"%d" % (i % 1000))
                break
            except BufferError:
                producer.poll(0.05)
        produced += len(value)
    assert producer.flush(120) == 0
    return produced, min(map(len, blobs)), max(map(len, blobs))


def test_the_sampler_stays_under_its_memory_bound_over_a_million_small_and_large_records(
    make_topic: MakeTopic,
    sidecar: StartSidecar,
    kafka_bootstrap: str,
    kafka_probe: KafkaProbe,
    tmp_path: Path,
) -> None:
    n, bound = 1_000_000, 1024 * 1024
    topic = make_topic(partitions=4)
    raw, smallest, largest = _preload(kafka_bootstrap, topic, n, large_every=1000)
    proc = sidecar(
        *_run(topic, tmp_path / "store"),
        env={
            **FAST_TRAINING,
            "ZDICT_SAMPLING__MAX_BYTES": str(bound),
            "ZDICT_SAMPLING__MIN_MESSAGES": "2000",
        },
        name="relay",
    )
    peak_sample = peak_rss = 0.0
    kept: list[float] = []
    output = f"{topic}.zd"
    deadline = time.monotonic() + 240
    while kafka_probe.count(output) < n:
        assert time.monotonic() < deadline, "the relay did not relay a million records in 240 s"
        assert proc.running(), proc.tail()
        if proc.events("relay_started"):
            peak_sample = max(peak_sample, _scrape(proc, "zdict_sample_bytes") or 0.0)
            peak_rss = max(peak_rss, _scrape(proc, "process_resident_memory_bytes") or 0.0)
            kept.append(_scrape(proc, "zdict_sample_records") or 0.0)
        time.sleep(0.25)
    peak_sample = max(peak_sample, _scrape(proc, "zdict_sample_bytes") or 0.0)
    assert proc.stop() == 0, proc.tail()
    print(
        f"\nsampler: {n:,} records ({raw / 2**20:.0f} MiB, one in 1,000 of "
        f"{smallest // 1024}-{largest // 1024} KiB) relayed; "
        f"reservoir peak {peak_sample / 2**20:.3f} MiB of a {bound / 2**20:.0f} MiB bound, up to "
        f"{max(kept):,.0f} values; process peak RSS {peak_rss / 2**20:.0f} MiB"
    )
    assert 0.5 * bound < peak_sample <= bound
    assert _finished(proc, decision="promoted"), "the sample never trained a dictionary"
