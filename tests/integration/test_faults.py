"""The relay under faults, on the real broker, counted by `zdict-sidecar verify`: kill -9 again
and again (at least once and exactly once), a rebalance storm, a loop stall past
max.poll.interval.ms, a producer queue too small. Figures are printed (run with ``-s``).

`make test` runs 100,000-record versions; `make soak` (ZDICT_SOAK=1) runs them with 1,000,000.
Broker faults (stop, restart, SIGSTOP) are in test_broker_faults.py.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # public, but not in __all__
    AdminClient,
    OffsetSpec,
)

from .launch import RunCli, StartSidecar
from .probe import KafkaProbe
from .process import Sidecar
from .records import ProduceEvents, Record
from .topics import MakeTopic
from .waiting import wait_until

SOAK = os.environ.get("ZDICT_SOAK") == "1"
#: Records of the kill runs, and the rate they are produced at while the relays are killed.
RECORDS, RATE = (1_000_000, 10_000) if SOAK else (100_000, 1_000)
KILLS = 10
#: A killed member leaves the group when its session times out; in exactly-once mode the
#: transaction it left open is aborted by its successor's init_transactions at once.
FAST_GROUP = {
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
            {tp: OffsetSpec.latest() for tp in tps}  # type: ignore[no-untyped-call]  # no annotations in confluent-kafka, isolation_level=level, request_timeout=30
        )
        ends[level] = {tp.partition: f.result(30).offset for tp, f in futures.items()}
    return sum(
        ends[IsolationLevel.READ_UNCOMMITTED][p] != ends[IsolationLevel.READ_COMMITTED][p]
        for p in range(partitions)
    )


def _relaying(proc: Sidecar, probe: KafkaProbe, output: str, timeout: float = 120) -> None:
    """Wait until `proc` holds partitions and the output grows."""
    proc.wait_for_event("partitions_assigned", timeout=timeout)
    before = probe.count(output)
    wait_until(lambda: probe.count(output) > before, timeout, f"{proc.name} to relay")


def _verify(cli: RunCli, topic: str, *extra: str) -> dict[str, int]:
    result = cli("verify", "--input", topic, "--json", *extra, timeout=600)
    report: dict[str, int] = json.loads(result.stdout)
    report["exit"] = result.returncode
    return report


def _feed(produce_events: ProduceEvents, topic: str, n: int, rate: float) -> Future[list[Record]]:
    return ThreadPoolExecutor(1).submit(produce_events, topic, n, seed=71, rate=rate)


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_ten_kill_9_restarts_lose_nothing_and_duplicate_only_the_uncommitted_window(
    guarantee: str,
    make_topic: MakeTopic,
    produce_events: ProduceEvents,
    sidecar: StartSidecar,
    cli: RunCli,
    kafka_probe: KafkaProbe,
    kafka_admin: AdminClient,
    tmp_path: Path,
) -> None:
    partitions = 3
    topic = make_topic(partitions=partitions)
    output = f"{topic}.zd"
    group = f"zdict-it-kill-{uuid.uuid4().hex[:8]}"
    args = [
        *("run", "--input-topic", topic, "--create-topics", "--group-id", group),
        *("--guarantee", guarantee, "--dictionaries", str(tmp_path / "store")),
    ]
    rng = random.Random(72)
    feed = _feed(produce_events, topic, RECORDS, RATE)
    started = time.monotonic()
    # At least once, a restart re-reads what its killed predecessor wrote but had not committed:
    # per partition, (output written) - (input committed) - (duplicates written before).
    predicted = 0
    earlier: dict[int, int] = {p: 0 for p in range(partitions)}
    for i in range(KILLS):
        proc = sidecar(*args, env=FAST_GROUP, name=f"relay-{i}")
        _relaying(proc, kafka_probe, output)
        time.sleep(rng.uniform(0.1, 2.0))  # a random moment while records flow
        assert proc.running(), proc.tail()
        proc.kill()
        proc.wait()
        if guarantee == "at-least-once":
            time.sleep(1.0)  # requests the broker had already received complete
            written = kafka_probe.end_offsets(output)
            committed = kafka_probe.committed(group, topic)
            for p in range(partitions):
                window = max(0, written[p] - max(committed[p], 0) - earlier[p])
                earlier[p] += window
                predicted += window
    feed.result(timeout=1200)
    last = sidecar(*args, env=FAST_GROUP, name="relay-last")
    last.wait_for_event("partitions_assigned", timeout=120)
    wait_until(lambda: kafka_probe.caught_up(group, topic), 600, "the last relay to finish")
    assert last.stop() == 0, last.tail()
    seconds = time.monotonic() - started

    eos = guarantee == "exactly-once"
    report = _verify(cli, topic, *(["--exactly-once"] if eos else []))
    print(
        f"\n{guarantee}: {RECORDS:,} records at {RATE:,}/s, {KILLS} kill -9 and restarts, "
        f"{seconds:.0f} s in all; output ({'read_committed' if eos else 'all'}): "
        f"{report['outputs']:,} records, lost {report['lost']}, duplicated "
        f"{report['duplicated']:,}"
        + ("" if eos else f" (uncommitted windows at the kills: {predicted:,})")
        + f", corrupted {report['corrupted']}, unseen {report['unseen']}"
    )
    assert report["exit"] == 0, report
    assert (report["inputs"], report["lost"], report["corrupted"], report["unseen"]) == (
        RECORDS,
        0,
        0,
        0,
    )
    if eos:
        assert report["duplicated"] == 0
        assert _open_transactions(kafka_admin, output, partitions) == 0
    else:
        assert report["duplicated"] == predicted


def test_a_rebalance_storm_loses_nothing(
    make_topic: MakeTopic,
    produce_events: ProduceEvents,
    sidecar: StartSidecar,
    cli: RunCli,
    kafka_probe: KafkaProbe,
    tmp_path: Path,
) -> None:
    """Instances join and leave (SIGTERM) every 4 s for a minute while records flow."""
    topic = make_topic(partitions=6)
    group = f"zdict-it-storm-{uuid.uuid4().hex[:8]}"
    args = [
        *("run", "--input-topic", topic, "--create-topics", "--group-id", group),
        *("--dictionaries", str(tmp_path / "store")),
    ]
    n = 120_000
    feed = _feed(produce_events, topic, n, 2_000)
    rng = random.Random(73)
    alive: list[Sidecar] = [sidecar(*args, env=FAST_GROUP, name="storm-0")]
    joins = leaves = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(4)
        if len(alive) < 2 or (len(alive) < 4 and rng.random() < 0.5):
            joins += 1
            alive.append(sidecar(*args, env=FAST_GROUP, name=f"storm-{joins}"))
        else:
            leaving = alive.pop(rng.randrange(len(alive)))
            leaving.terminate()
            leaves += 1
    feed.result(timeout=300)
    wait_until(lambda: kafka_probe.caught_up(group, topic), 300, "the group to finish")
    codes = [p.stop() for p in alive]
    rebalances = sum(len(p.events("partitions_revoked")) for p in alive)
    report = _verify(cli, topic)
    print(
        f"\nrebalance storm: {n:,} records at 2,000/s, {joins} joins and {leaves} leaves in 60 s "
        f"({rebalances} revocations seen by the survivors); lost {report['lost']}, duplicated "
        f"{report['duplicated']:,}"
    )
    assert codes == [0] * len(codes)
    assert report["exit"] == 0 and report["lost"] == 0 and report["inputs"] == n


def test_a_stall_past_max_poll_interval_loses_the_partitions_and_nothing_else(
    make_topic: MakeTopic,
    produce_events: ProduceEvents,
    sidecar: StartSidecar,
    cli: RunCli,
    kafka_probe: KafkaProbe,
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=4)
    group = f"zdict-it-stall-{uuid.uuid4().hex[:8]}"
    args = [
        *("run", "--input-topic", topic, "--create-topics", "--group-id", group),
        *("--dictionaries", str(tmp_path / "store")),
    ]
    env = {
        **FAST_GROUP,
        "ZDICT_CONSUMER__MAX_POLL_INTERVAL_MS": "8000",
        "ZDICT_TEST_STALL_ON_SIGUSR2": "15",
    }
    feed = _feed(produce_events, topic, 40_000, 2_000)
    stalling = sidecar(*args, env=env, name="stalling")
    other = sidecar(*args, env=env, name="other")
    # Both hold two: `other` may have held all four for a moment before `stalling` joined.
    wait_until(
        lambda: len(stalling.assignment()) == 2 and len(other.assignment()) == 2,
        60,
        "a shared assignment",
    )
    stalled_at = time.monotonic()
    stalling.proc.send_signal(signal.SIGUSR2)
    wait_until(lambda: len(other.assignment()) == 4, 60, "the other relay to take over")
    taken_over = time.monotonic() - stalled_at
    stalling.wait_for_event("max_poll_interval_exceeded", timeout=60)
    stalling.wait_for_event("partitions_lost", timeout=60)
    feed.result(timeout=120)
    wait_until(lambda: kafka_probe.caught_up(group, topic), 120, "the group to finish")
    assert stalling.running() and other.running()
    assert stalling.stop() == 0 and other.stop() == 0
    report = _verify(cli, topic)
    print(
        f"\nstall: one of two relays blocked 15 s (max.poll.interval.ms 8,000); the other held "
        f"all 4 partitions {taken_over:.1f} s after the stall began; lost {report['lost']}, "
        f"duplicated {report['duplicated']:,}"
    )
    assert report["exit"] == 0 and report["lost"] == 0 and report["inputs"] == 40_000


def test_a_tiny_producer_queue_applies_backpressure_and_drops_nothing(
    make_topic: MakeTopic,
    produce_events: ProduceEvents,
    sidecar: StartSidecar,
    cli: RunCli,
    kafka_probe: KafkaProbe,
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=2)
    n = 50_000
    produce_events(topic, n, seed=74)
    group = f"zdict-it-queue-{uuid.uuid4().hex[:8]}"
    proc = sidecar(
        *("run", "--input-topic", topic, "--create-topics", "--group-id", group),
        *("--dictionaries", str(tmp_path / "store"), "--no-training"),
        env={"ZDICT_PRODUCER__QUEUE_BUFFERING_MAX_MESSAGES": "50"},
        name="relay",
    )
    wait_until(lambda: kafka_probe.caught_up(group, topic), 120, "the relay to finish")
    assert proc.stop() == 0, proc.tail()
    (stopped,) = proc.events("relay_stopped")
    report = _verify(cli, topic)
    print(
        f"\nqueue full: {n:,} records through a 50-message producer queue: "
        f"{stopped['queue_full_waits']:,} waits for room, lost {report['lost']}, duplicated "
        f"{report['duplicated']}"
    )
    assert stopped["queue_full_waits"] > 0
    assert (report["exit"], report["lost"], report["duplicated"], report["inputs"]) == (0, 0, 0, n)
