"""Exactly-once mode on the real broker: kill -9 the relay again and again, restart it, and let
`zdict-sidecar verify --exactly-once` (a read_committed reader) count lost and duplicated
records. Figures are printed (run with ``-s``).
"""

from __future__ import annotations

import json
import random
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # public, but not in __all__
    AdminClient,
    OffsetSpec,
)

from .conftest import (
    KafkaProbe,
    MakeTopic,
    ProduceEvents,
    RunCli,
    Sidecar,
    StartSidecar,
    wait_until,
)

#: A killed member leaves the group when its session times out; the transaction it left open
#: is aborted by its successor's init_transactions (same transactional.id) at once.
EOS = {
    "ZDICT_CONSUMER__SESSION_TIMEOUT_MS": "6000",
    "ZDICT_CONSUMER__HEARTBEAT_INTERVAL_MS": "1000",
    "ZDICT_PRODUCER__TRANSACTION_TIMEOUT_MS": "5000",
    "ZDICT_RELAY__TRANSACTION_RECORDS": "2000",
    "ZDICT_TRAINING__ENABLED": "false",
}


def _open_transactions(admin: AdminClient, topic: str, partitions: int) -> int:
    """Partitions whose last stable offset is behind the end: a transaction is still open."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    ends = {}
    for level in (IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED):
        futures = admin.list_offsets(
            {tp: OffsetSpec.latest() for tp in tps}, isolation_level=level, request_timeout=30
        )
        ends[level] = {tp.partition: f.result(30).offset for tp, f in futures.items()}
    return sum(
        ends[IsolationLevel.READ_UNCOMMITTED][p] != ends[IsolationLevel.READ_COMMITTED][p]
        for p in range(partitions)
    )


def _relaying(proc: Sidecar, probe: KafkaProbe, output: str, timeout: float = 90) -> None:
    """Wait until `proc` holds partitions and the output grows (a transaction committed)."""
    proc.wait_for_event("partitions_assigned", timeout=timeout)
    before = probe.count(output)
    wait_until(lambda: probe.count(output) > before, timeout, f"{proc.name} to commit")


def test_repeated_kill_9_loses_nothing_and_duplicates_nothing_read_committed(
    make_topic: MakeTopic,
    produce_events: ProduceEvents,
    sidecar: StartSidecar,
    cli: RunCli,
    kafka_probe: KafkaProbe,
    kafka_admin: AdminClient,
    tmp_path: Path,
) -> None:
    n, kills, partitions = 100_000, 5, 3
    topic = make_topic(partitions=partitions)
    output = f"{topic}.zd"
    group = f"zdict-it-eos-{uuid.uuid4().hex[:8]}"
    args = [
        *("run", "--input-topic", topic, "--create-topics", "--group-id", group),
        *("--guarantee", "exactly-once", "--dictionaries", str(tmp_path / "store")),
    ]
    rng = random.Random(72)
    feed = ThreadPoolExecutor(1).submit(produce_events, topic, n, seed=71, rate=2500)
    started = time.monotonic()
    for i in range(kills):
        proc = sidecar(*args, env=EOS, name=f"relay-{i}")
        _relaying(proc, kafka_probe, output)
        # A random moment while records flow: a transaction is open at almost any moment.
        time.sleep(rng.uniform(0.1, 2.0))
        assert proc.running(), proc.tail()
        proc.kill()
        proc.wait()
    feed.result(timeout=180)
    last = sidecar(*args, env=EOS, name="relay-last")
    last.wait_for_event("partitions_assigned", timeout=90)
    wait_until(lambda: kafka_probe.caught_up(group, topic), 180, "the last relay to finish")
    assert last.stop() == 0, last.tail()
    recover = time.monotonic() - started

    verified = cli("verify", "--input", topic, "--exactly-once", "--json", timeout=300)
    report = json.loads(verified.stdout)
    print(
        f"\nexactly once: {n:,} records produced at 2,500/s, {kills} kill -9 and restarts, "
        f"{recover:.0f} s in all; output read_committed: {report['outputs']:,} records, lost "
        f"{report['lost']}, duplicated {report['duplicated']}, corrupted {report['corrupted']}, "
        f"unseen {report['unseen']}; offsets taken by aborted records and transaction markers: "
        f"{kafka_probe.count(output) - report['outputs']:,} (each restart's init_transactions "
        "aborted the transaction its killed predecessor left open)"
    )
    assert verified.returncode == 0, verified.stdout.decode() + verified.stderr.decode()
    assert (report["inputs"], report["lost"], report["duplicated"]) == (n, 0, 0)
    assert _open_transactions(kafka_admin, output, partitions) == 0
