"""The trainer's decisions without a broker: who trains, what is published first, what happens
when the registry refuses, and how an operator's rollback holds drift off.

The registry here is the real `Registry` logic over an in-memory log (its two Kafka calls,
produce and read, replaced); training runs in-process instead of in a child, except in the one
test that checks the child process itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sidecar.bench.events import generate
from sidecar.codec import NO_DICTIONARY, CodecStats
from sidecar.config import Settings, load_settings
from sidecar.dictionaries.registry import Registry
from sidecar.dictionaries.registry_state import Ignored
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import RegistryUnavailable
from sidecar.metrics import Metrics
from sidecar.training.sampling import Reservoir
from sidecar.training.trainer import Job, JobResult, Trainer, TrainingProcess, run_job

TOPIC = "orders"


class LogRegistry(Registry):
    """`Registry` with its Kafka topic replaced by a list: the same rules, no broker."""

    def __init__(self, settings: Settings, log: list[Any] | None = None) -> None:
        super().__init__(settings, actor="test")
        self.log: list[tuple[bytes, bytes | None, list[tuple[str, Any]]]] = (
            log if log is not None else []
        )
        self.refuse = False

    def _produce(self, key: bytes, value: bytes | None, headers: Any) -> int:
        if self.refuse:
            raise RegistryUnavailable(f"registry topic {self.topic}: refused (test)")
        self.log.append((key, value, headers))
        return len(self.log) - 1

    def refresh(self, timeout: float | None = None) -> list[Any]:
        events = []
        while self.state.position < len(self.log):
            offset = self.state.position
            event = self.state.apply(offset, *self.log[offset])
            if event is not None and not isinstance(event, Ignored):
                events.append(event)
        return events

    def keys(self) -> list[str]:
        return [key.decode().split("/")[0] for key, _, _ in self.log]


@dataclass
class InProcess:
    """A `RunningJob` that trained synchronously when started."""

    job: Job
    nice: int
    outcome: JobResult | str | None = field(init=False)
    killed: bool = False

    def __post_init__(self) -> None:
        self.outcome = run_job(self.job)

    def result(self) -> JobResult | str | None:
        return self.outcome

    def kill(self) -> None:
        self.killed = True


@dataclass
class Harness:
    trainer: Trainer
    registry: LogRegistry
    store: DictionaryStore
    reservoir: Reservoir
    stats: CodecStats
    changes: list[int]
    jobs: list[InProcess]
    clock: list[float]

    def feed(self, count: int, seed: int = 1, drift_at: int | None = None) -> None:
        @dataclass(frozen=True)
        class Rec:
            p: int
            o: int
            v: bytes

            def partition(self) -> int:
                return self.p

            def offset(self) -> int:
                return self.o

            def value(self) -> bytes:
                return self.v

        base = self.reservoir.offered
        events = generate("product_viewed", count, seed=seed, drift_at=drift_at)
        self.reservoir.offer([Rec(i % 3, base + i, v) for i, v in enumerate(events)])

    def tick(self, seconds: float = 1.0) -> None:
        self.clock[0] += seconds
        self.trainer.tick()


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    settings = load_settings(
        dictionaries=tmp_path / "store",
        sampling={"min_messages": 3000, "every": 1, "max_bytes": 4 * 1024 * 1024},
        training={
            "dict_sizes": (8192,),
            "levels": (3,),
            "min_interval": 5.0,
            "retrain_interval": 600.0,
            "drift_window": 10.0,
            "drift_min_messages": 100,
        },
        registry={"follow_interval": 1.0},
    )
    registry = LogRegistry(settings)
    store = DictionaryStore(settings.dictionaries)
    reservoir = Reservoir(TOPIC, max_bytes=4 * 1024 * 1024, every=1, min_messages=3000)
    changes: list[int] = []
    jobs: list[InProcess] = []
    clock = [1_000_000.0]
    holder: dict[str, Harness] = {}

    def changed() -> None:
        # As the relay does: a new active dictionary means a new encoder with fresh counts.
        changes.append(1)
        holder["h"].stats = CodecStats(dictionary_id=store.active_id(TOPIC) or NO_DICTIONARY)

    def start(job: Job, nice: int) -> InProcess:
        jobs.append(InProcess(job, nice))
        return jobs[-1]

    trainer = Trainer(
        settings=settings,
        store=store,
        registry=registry,
        metrics=Metrics(CollectorRegistry()),
        reservoirs={TOPIC: reservoir},
        topics=[TOPIC],
        encoder_stats=lambda topic: holder["h"].stats,
        dictionaries_changed=changed,
        clock=lambda: clock[0],
        start_job=start,
    )
    holder["h"] = Harness(trainer, registry, store, reservoir, CodecStats(), changes, jobs, clock)
    return holder["h"]


def test_only_the_holder_of_partition_0_trains(harness: Harness) -> None:
    harness.feed(4000)
    harness.trainer.on_assignment({(TOPIC, 1), (TOPIC, 2)})
    harness.tick()
    assert harness.jobs == []
    harness.trainer.on_assignment({(TOPIC, 0)})
    harness.tick()
    assert len(harness.jobs) == 1


def test_a_promoted_dictionary_is_published_then_activated_then_stored(harness: Harness) -> None:
    harness.feed(4000)
    harness.trainer.on_assignment({(TOPIC, 0)})
    harness.tick()  # starts the first run
    harness.tick()  # collects it
    assert harness.registry.keys() == ["dictionary", "active", "training"]
    active = harness.registry.state.active(TOPIC)
    assert active is not None
    assert harness.store.active_id(TOPIC) == active.id
    assert harness.changes == [1]
    harness.registry.refresh()
    (run,) = [e for e in harness.registry.state.trainings.values() if e["decision"] == "promoted"]
    assert run["trigger"] == "first" and run["stored_id"] == active.id


def test_when_the_registry_refuses_the_store_and_relay_keep_the_champion(
    harness: Harness,
) -> None:
    harness.feed(4000)
    harness.trainer.on_assignment({(TOPIC, 0)})
    harness.registry.refuse = True
    harness.tick()
    harness.tick()
    assert harness.store.active_id(TOPIC) is None
    assert harness.changes == []
    runs = (harness.store.root / TOPIC / "TRAINING.jsonl").read_text().splitlines()
    assert '"decision": "failed"' in runs[-1] and "not published" in runs[-1]
    # A failed run is retried after min_interval, and succeeds once the registry takes it.
    harness.registry.refuse = False
    harness.tick(2.0)
    assert len(harness.jobs) == 1
    harness.tick(5.0)
    harness.tick()
    assert harness.store.active_id(TOPIC) is not None


def _promote_first(harness: Harness) -> int:
    harness.feed(4000)
    harness.trainer.on_assignment({(TOPIC, 0)})
    harness.tick()
    harness.tick()
    active = harness.store.active_id(TOPIC)
    assert active is not None
    return active


def _live_traffic(harness: Harness, ratio: float, seconds: int) -> None:
    """Encoder totals growing at `ratio` for `seconds` ticks."""
    for _ in range(seconds):
        harness.stats.input_bytes += 100_000
        harness.stats.output_bytes += int(100_000 / ratio)
        harness.stats.outcomes["compressed"] += 1000
        harness.tick()


def _drift(harness: Harness) -> None:
    """A whole window at the champion's ratio (the reference), one far below it (drift), then
    the fresh samples a drift-triggered run waits for."""
    harness.tick(10.0)
    _live_traffic(harness, 1.9, 12)
    _live_traffic(harness, 1.0, 12)
    harness.feed(3000, seed=3, drift_at=0)
    harness.tick()
    harness.tick()


def test_a_drift_waits_for_fresh_samples_and_trains_on_them_alone(harness: Harness) -> None:
    first = _promote_first(harness)
    harness.tick(10.0)
    _live_traffic(harness, 1.9, 12)  # the first whole window: the reference
    _live_traffic(harness, 1.0, 12)  # far below it: drift
    assert len(harness.jobs) == 1  # noticed, but nothing sampled since
    harness.feed(2000, seed=2, drift_at=0)
    harness.tick()
    assert len(harness.jobs) == 1
    harness.feed(1500, seed=3, drift_at=0)
    harness.tick()
    assert len(harness.jobs) == 2
    job = harness.jobs[-1].job
    assert job.champion is not None and job.champion.id == first
    assert len(job.entries) == 3000  # sampling.min_messages of them, all after the drift
    assert all(b'"schema_version":2' in v for _, _, v in job.entries)
    harness.tick()
    assert harness.store.active_id(TOPIC) != first


def test_the_live_ratio_is_judged_only_once_the_relay_encodes_with_the_champion(
    harness: Harness,
) -> None:
    first = _promote_first(harness)
    harness.tick(10.0)
    registry = harness.trainer.metrics.registry

    def live() -> float | None:
        return registry.get_sample_value("zdict_live_compression_factor", {"topic": TOPIC})

    # The relay has not switched yet: its counts are another dictionary's (here none), whose
    # ratio against the champion's held-out ratio would read as drift.
    harness.stats = CodecStats(dictionary_id=NO_DICTIONARY)
    _live_traffic(harness, 1.0, 12)
    assert live() is None
    assert len(harness.jobs) == 1 and harness.trainer.namespaces[TOPIC].drift is None
    # Switched: the live ratio is the champion's own.
    harness.stats = CodecStats(dictionary_id=first)
    _live_traffic(harness, 1.9, 12)
    assert live() == pytest.approx(1.9, rel=0.01)


def _raw_traffic(harness: Harness, ratio: float, seconds: int) -> None:
    """A topic written raw (`codec.output_mode`): the encoder encodes nothing, its shadow
    sample's scaled totals grow at `ratio` for `seconds` ticks."""
    for _ in range(seconds):
        harness.stats.shadow_input_bytes += 100_000
        harness.stats.shadow_output_bytes += int(100_000 / ratio)
        harness.stats.shadow_messages += 1000
        harness.tick()


def test_a_topic_written_raw_keeps_its_live_ratio_and_its_drift_retrains(
    harness: Harness,
) -> None:
    first = _promote_first(harness)
    harness.tick(10.0)
    registry = harness.trainer.metrics.registry
    _raw_traffic(harness, 1.9, 12)  # the first whole window: the reference
    assert registry.get_sample_value(
        "zdict_live_compression_factor", {"topic": TOPIC}
    ) == pytest.approx(1.9, rel=0.01)
    assert harness.stats.messages == 0
    _raw_traffic(harness, 1.0, 12)  # far below it: drift, noticed on the shadow sample alone
    assert harness.trainer.namespaces[TOPIC].drift is not None
    harness.feed(3500, seed=2, drift_at=0)
    harness.tick()
    assert len(harness.jobs) == 2 and harness.jobs[-1].job.champion is not None
    assert harness.jobs[-1].job.champion.id == first


def test_an_operator_rollback_holds_drift_off(harness: Harness) -> None:
    first = _promote_first(harness)
    harness.feed(4000, seed=2, drift_at=0)
    _drift(harness)
    second = harness.store.active_id(TOPIC)
    assert second != first

    # The operator (another process, the same registry) goes back to the first dictionary:
    # drift no longer triggers runs.
    operator = LogRegistry(harness.trainer.settings, log=harness.registry.log)
    operator.rollback(TOPIC, actor="operator")
    harness.tick()  # follows the registry
    assert harness.store.active_id(TOPIC) == first
    runs = len(harness.jobs)
    _live_traffic(harness, 1.9, 12)
    _live_traffic(harness, 1.0, 30)
    harness.feed(4000, seed=4, drift_at=0)
    _live_traffic(harness, 1.0, 5)
    assert len(harness.jobs) == runs


def test_losing_partition_0_abandons_the_running_training(harness: Harness) -> None:
    harness.feed(4000)
    harness.trainer.on_assignment({(TOPIC, 0)})
    harness.tick()
    harness.trainer.on_assignment({(TOPIC, 1)})
    harness.tick()
    assert harness.jobs[0].killed
    assert harness.registry.keys() == []


def test_the_child_process_trains_and_reports_its_cpu_time() -> None:
    events = list(generate("product_viewed", 3000, seed=3))
    job = Job(
        namespace=TOPIC,
        topic=TOPIC,
        entries=[(0, i, v) for i, v in enumerate(events)],
        heldout_fraction=0.2,
        params=load_settings()
        .training.params(load_settings().codec)
        .__class__(dict_sizes=(8192,), levels=(3,)),
        champion=None,
    )
    process = TrainingProcess(job, nice=5)
    outcome = None
    import time

    deadline = time.monotonic() + 60
    while outcome is None and time.monotonic() < deadline:
        outcome = process.result()
        time.sleep(0.05)
    process.kill()
    assert isinstance(outcome, JobResult), outcome
    assert outcome.report.decision.value == "promoted"
    assert outcome.cpu_seconds > 0
    assert outcome.window.startswith(f"run sample of topic {TOPIC}: 3000 records")


def test_every_record_is_sampled_until_the_first_dictionary_then_one_in_every(
    harness: Harness,
) -> None:
    assert harness.reservoir.dense
    _promote_first(harness)
    assert not harness.reservoir.dense


def test_a_held_backlog_trains_the_first_dictionary_from_the_topic_not_the_reservoir(
    tmp_path: Path,
) -> None:
    settings = load_settings(
        dictionaries=tmp_path / "store",
        registry={"enabled": False},
        training={"dict_sizes": (8192,), "levels": (3,)},
        sampling={"backlog_sample": 5000},
    )
    backlog = [(i % 3, i, v) for i, v in enumerate(generate("product_viewed", 5000, seed=8))]
    asked: list[tuple[str, int]] = []
    jobs: list[InProcess] = []

    def sample_topic(settings: Settings, topic: str, count: int) -> list[tuple[int, int, bytes]]:
        asked.append((topic, count))
        return backlog

    def start(job: Job, nice: int) -> InProcess:
        jobs.append(InProcess(job, nice))
        return jobs[-1]

    store = DictionaryStore(settings.dictionaries)
    trainer = Trainer(
        settings=settings,
        store=store,
        registry=None,
        metrics=Metrics(CollectorRegistry()),
        reservoirs={TOPIC: Reservoir(TOPIC, max_bytes=1 << 20)},
        topics=[TOPIC],
        encoder_stats=lambda topic: CodecStats(),
        dictionaries_changed=lambda: None,
        start_job=start,
        backlogs={TOPIC: 150_000},
        sample_topic=sample_topic,
    )
    trainer.on_assignment({(TOPIC, 0)})
    trainer.tick()  # reads the backlog's sample and trains on it (in-process here)
    assert asked == [(TOPIC, 5000)]
    assert jobs[0].job.entries == backlog
    trainer.tick()  # the result: published to the store and activated
    active = store.active(TOPIC)
    assert active is not None
    trainer.tick()
    assert asked == [(TOPIC, 5000)], "the backlog is sampled once"


def _metric(harness: Harness, name: str, **labels: str) -> float | None:
    prometheus = harness.trainer.metrics.registry
    return prometheus.get_sample_value(name, {"topic": TOPIC, **labels})


def test_a_pinned_namespace_skips_scheduled_and_drift_runs_until_unpinned(
    harness: Harness,
) -> None:
    # The registry's activations carry the wall clock's time, which the schedule compares.
    harness.clock[0] = time.time()
    first = _promote_first(harness)
    runs = len(harness.jobs)
    operator = LogRegistry(harness.trainer.settings, log=harness.registry.log)
    operator.pin(TOPIC, actor="operator")
    harness.tick()  # follows the registry
    assert _metric(harness, "zdict_namespace_pinned") == 1

    # Drift: noticed, and skipped once its fresh samples are there.
    _drift(harness)
    assert len(harness.jobs) == runs
    assert _metric(harness, "zdict_training_skipped_total", reason="pinned") == 1
    # Recorded as the namespace's latest run: the registry shows why nothing trains.
    harness.registry.refresh()
    recorded = harness.registry.state.trainings[TOPIC]
    assert (recorded["decision"], recorded["trigger"]) == ("skipped", "drift")
    assert "is pinned (by operator at" in recorded["reason"]
    harness.tick(601.0)  # then the scheduled run
    assert len(harness.jobs) == runs and harness.store.active_id(TOPIC) == first
    assert _metric(harness, "zdict_training_skipped_total", reason="pinned") == 2

    operator.unpin(TOPIC)
    harness.tick()
    assert _metric(harness, "zdict_namespace_pinned") == 0
    harness.tick(601.0)
    assert len(harness.jobs) == runs + 1
