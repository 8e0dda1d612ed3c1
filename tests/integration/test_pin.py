"""`dicts pin`, `unpin` and `status` against the real broker: a pinned topic keeps its dictionary
through a drift-triggered run, a scheduled run of the sidecar and the retraining CronJob's
`train --publish`; `status` shows it all, with the sidecar's live figures from its /metrics.

The sidecar is a real `python -m sidecar run`; the dictionary is the operator's, trained from
the topic by `train --topic --publish` as the CronJob does; the registry is a real topic of the
test's own.
"""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sidecar.bench.events import generate

from .launch import RunCli, StartSidecar
from .process import Sidecar
from .records import Outgoing, ProduceRecords
from .topics import MakeTopic
from .waiting import wait_until

#: Quick training and drift: a sample of 4,000, drift judged over 4 s of traffic.
FAST = {
    "ZDICT_SAMPLING__MIN_MESSAGES": "4000",
    "ZDICT_SAMPLING__EVERY": "2",
    "ZDICT_SAMPLING__MAX_BYTES": str(2 * 1024 * 1024),
    "ZDICT_TRAINING__DICT_SIZES": "[8192]",
    "ZDICT_TRAINING__LEVELS": "[3]",
    "ZDICT_TRAINING__MIN_INTERVAL": "3",
    "ZDICT_TRAINING__DRIFT_WINDOW": "4",
    "ZDICT_TRAINING__DRIFT_MIN_MESSAGES": "2000",
    "ZDICT_REGISTRY__FOLLOW_INTERVAL": "1",
    # As deployed (the tests' default is frames): the output mode is chosen, and exported.
    "ZDICT_CODEC__OUTPUT_MODE": "auto",
}
RATE = 4000


class _Traffic:
    """`product_viewed` events a second at a time, before or after a schema drift."""

    def __init__(self, produce_records: ProduceRecords, topic: str) -> None:
        self._produce = produce_records
        self._topic = topic
        self._keys = random.Random(21)
        self._before = generate("product_viewed", 10**7, seed=21)
        self._after = generate("product_viewed", 10**7, seed=22, drift_at=0)

    def second(self, *, drifted: bool) -> None:
        events = self._after if drifted else self._before
        batch = [
            Outgoing(key=b"user-%04d" % self._keys.randrange(200), value=next(events))
            for _ in range(RATE)
        ]
        self._produce(self._topic, batch, rate=RATE)

    def until(self, done: Any, *, drifted: bool, timeout: int, what: str) -> None:
        for _ in range(timeout):
            if done():
                return
            self.second(drifted=drifted)
        raise AssertionError(f"no {what} after {timeout} s of traffic")


def _skipped(proc: Sidecar, trigger: str) -> list[dict[str, Any]]:
    return [e for e in proc.events("training_skipped") if e.get("trigger") == trigger]


def _status(cli: RunCli, topic: str, *extra: str) -> dict[str, Any]:
    done = cli("dicts", "status", "--json", "--namespace", topic, *extra)
    assert done.returncode == 0, done.stderr.decode()
    (entry,) = json.loads(done.stdout)
    assert isinstance(entry, dict)
    return entry


def test_a_pinned_topic_keeps_its_dictionary_through_drift_schedule_and_cronjob(
    make_topic: MakeTopic,
    sidecar: StartSidecar,
    produce_records: ProduceRecords,
    cli: RunCli,
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=1)
    traffic = _Traffic(produce_records, topic)
    for _ in range(3):
        traffic.second(drifted=False)
    train = ("train", "--topic", topic, "--publish", "--json", "--sample", "10000")
    operator = ("--dictionaries", str(tmp_path / "operator"))
    trained = cli(*train, *operator)
    assert trained.returncode == 0, trained.stderr.decode()
    pinned_id = json.loads(trained.stdout)["stored_id"]
    assert pinned_id is not None

    pinned = cli("dicts", "pin", "--namespace", topic)
    assert pinned.returncode == 0, pinned.stderr.decode()
    assert f"dictionary {pinned_id} is pinned" in pinned.stdout.decode()
    entry = _status(cli, topic)
    assert (entry["dict_id"], entry["pinned"]) == (pinned_id, True)
    assert entry["last_training"]["decision"] == "promoted"
    assert entry["last_training"]["trigger"] == "manual"

    # 1. Drift: the sidecar notices it, and skips the run it would start.
    run = ["run", "--input-topic", topic, "--create-topics", "--group-id", f"pin-{topic}"]
    store = ("--dictionaries", str(tmp_path / "relay"))
    proc = sidecar(*run, *store, env=FAST, name="relay")
    proc.wait_for_event("dictionary_loaded", 60, where=lambda e: e["dict_id"] == pinned_id)
    for _ in range(6):  # a whole drift window at the dictionary's own ratio: the reference
        traffic.second(drifted=False)
    traffic.until(
        lambda: _skipped(proc, "drift"), drifted=True, timeout=90, what="skipped drift run"
    )
    (skip,) = _skipped(proc, "drift")
    assert skip["reason"] == "pinned" and skip["pinned_by"].endswith("(operator)")
    assert proc.events("training_started") == []

    # Its /metrics, read by `status --metrics` while traffic flows: the live ratio (of the last
    # drift window) and the partition's mode.
    url = f"http://127.0.0.1:{proc.metrics_port}/metrics"
    with ThreadPoolExecutor(1) as pool:
        reading = pool.submit(_status, cli, topic, "--metrics", url)
        while not reading.done():
            traffic.second(drifted=True)
        live = reading.result()
    # One output partition (or the whole topic, -1): frames or raw by how its batches fill.
    assert live["pinned"] is True
    ((partition, mode),) = live["output_modes"].items()
    assert partition in ("0", "-1") and mode in ("frames", "raw")
    assert live["live_ratio"] is not None and live["live_ratio"] < entry["heldout_ratio"]
    metrics = proc.metrics()
    assert metrics[("zdict_namespace_pinned", frozenset({("topic", topic)}))] == 1
    skipped = ("zdict_training_skipped_total", frozenset({("topic", topic), ("reason", "pinned")}))
    assert metrics[skipped] == 1
    assert proc.stop() == 0, proc.tail()

    # 2. The retraining CronJob's command: not trained, nothing published, exit 0.
    cronjob = cli(*train, *operator)
    assert cronjob.returncode == 0, cronjob.stderr.decode()
    assert f"namespace {topic} is pinned" in cronjob.stderr.decode()
    assert cronjob.stdout == b""
    recorded = _status(cli, topic)["last_training"]
    assert (recorded["decision"], recorded["trigger"]) == ("skipped", "manual")

    # 3. A scheduled run of the sidecar (retrain every 5 s): skipped as well.
    proc = sidecar(
        *run, *store, env={**FAST, "ZDICT_TRAINING__RETRAIN_INTERVAL": "5"}, name="scheduled"
    )
    proc.wait_for_event("dictionary_loaded", 60, where=lambda e: e["dict_id"] == pinned_id)
    traffic.until(
        lambda: _skipped(proc, "scheduled"), drifted=True, timeout=60, what="skipped scheduled run"
    )
    assert proc.events("training_started") == []
    # The skipped run, back from the registry, is its own result, not `other`.
    last = (
        "zdict_last_training_timestamp_seconds",
        frozenset({("topic", topic), ("trigger", "scheduled"), ("result", "skipped")}),
    )
    wait_until(lambda: last in proc.metrics(), 30, "the skipped run's series", interval=0.5)
    assert proc.stop() == 0, proc.tail()
    entry = _status(cli, topic)
    assert (entry["dict_id"], entry["pinned"]) == (pinned_id, True)

    # Unpinned, the next scheduled run trains (and, on the drifted data, promotes).
    unpinned = cli("dicts", "unpin", "--namespace", topic)
    assert unpinned.returncode == 0, unpinned.stderr.decode()
    assert _status(cli, topic)["pinned"] is False
    proc = sidecar(
        *run, *store, env={**FAST, "ZDICT_TRAINING__RETRAIN_INTERVAL": "5"}, name="unpinned"
    )
    proc.wait_for_event("dictionary_loaded", 60, where=lambda e: e["dict_id"] == pinned_id)
    traffic.until(
        lambda: proc.events("training_finished"), drifted=True, timeout=60, what="training run"
    )
    wait_until(lambda: _status(cli, topic)["dict_id"] != pinned_id, 30, "a new dictionary")
    assert proc.stop() == 0, proc.tail()
