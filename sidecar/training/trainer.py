"""Training beside the relay: dictionaries that keep themselves fresh inside `zdict-sidecar run`.

One `Trainer` per process, on a thread of its own; the relay never waits for it. Every second,
per namespace (input topic) of the process:

1. **Follow the registry** (every `registry.follow_interval`): dictionaries and activations
   published by other hosts or by an operator are cached in the local store and the relay is
   told to switch; an operator's activation or rollback holds drift-triggered training off
   until the next scheduled run. A namespace an operator pinned (`dicts pin`) is not trained
   at all: a run that is due is skipped (`training_skipped`, `zdict_training_skipped_total`)
   and nothing is due again before the next scheduled run.
2. **Own or not.** Exactly one process of the consumer group trains a namespace: the one that
   holds partition 0 of its input topic (Kafka's group assignment decides; when it dies or
   leaves, the partition and the role move to another member).
3. **Due?** `Schedule.due`: the first dictionary as soon as the reservoir holds
   `sampling.min_messages` values (every record is sampled until then), again whenever the
   sample has grown four times past what the last run trained on (a first dictionary from a few
   thousand records, better ones as data grows), every `training.retrain_interval`, and early
   when the live ratio (over `training.drift_window`) falls below the champion's held-out ratio
   (or its first live window's ratio, if lower) by `training.drift_tolerance`. A drift is
   answered once the reservoir holds `sampling.min_messages` values sampled after it was
   noticed: those are what the early run trains and judges on. A namespace whose input topic
   had a backlog when the relay started (the relay holds it back meanwhile) trains its first
   dictionary from the latest records of the topic instead (`sampling.backlog_sample`).
4. **Train** in a child process (spawned, at niceness `training.nice`), so neither the GIL nor
   the CPU is taken from the relay: the reservoir's snapshot is split by time (the newest slice
   of every partition is held out), trained on, and the challenger is measured against the
   champion on the same fresh held-out values; a promoted one is refit on the whole snapshot.
5. **Publish → activate** a promoted dictionary: the registry first, then the local store, then
   the relay switches encoders. If the registry does not acknowledge, nothing changes: the relay
   keeps the champion.

Every run (promoted, rejected, failed) is logged as `training_finished` with its numbers,
counted in metrics, appended to the store's TRAINING.jsonl and, with a registry, recorded as the
namespace's latest training entry there.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Final, Protocol

from sidecar.codec import CodecStats
from sidecar.config import Settings
from sidecar.dictionaries.lifecycle import sync_store
from sidecar.dictionaries.model import Dictionary
from sidecar.dictionaries.registry import Registry, pinned_error
from sidecar.dictionaries.registry_state import Activation, Pin
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import ZdictError
from sidecar.logs import get_logger
from sidecar.metrics import Metrics, NamespaceMetrics
from sidecar.training.choice import TrainingReport, train
from sidecar.training.params import Decision, TrainingParams, Trigger
from sidecar.training.promotion import promote
from sidecar.training.sampling import Entry, Reservoir
from sidecar.training.schedule import SKIPPED, LiveRatio, Policy, Schedule
from sidecar.training.split import split_newest
from sidecar.training.topic_sample import read_sample

log = get_logger(__name__)

#: Seconds between two looks at every namespace.
TICK: Final = 1.0
#: Seconds one read of the registry while following it may take. A read cut short goes on
#: from where it stopped at the next follow; while no broker answers, a stop waits no longer.
FOLLOW_TIMEOUT: Final = 5.0
#: Actions by which an operator (not a trainer) chose the active dictionary.
OPERATOR_ACTIONS: Final = frozenset({"activate", "rollback"})
#: A reservoir this close to its byte bound cannot grow any more (for the growth trigger).
FULL: Final = 0.95


def _latest_records(settings: Settings, topic: str, count: int) -> list[Entry]:
    """The latest ~`count` records of `topic` (a backlog's sample)."""
    return read_sample(settings, topic, count).entries


def _activated(activation: Activation, seen: Activation | None) -> bool:
    """Whether `activation` made a dictionary active since `seen`: a new record that only
    pins or unpins the same activation is not one."""
    return seen is None or (activation.dict_id, activation.at) != (seen.dict_id, seen.at)


# -- the child process ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Job:
    """What the training process needs; pickled to it."""

    namespace: str
    topic: str
    entries: list[Entry]
    heldout_fraction: float
    params: TrainingParams
    champion: Dictionary | None


@dataclass(frozen=True, slots=True)
class JobResult:
    report: TrainingReport
    window: str
    cpu_seconds: float


def sample_window(topic: str, entries: list[Entry]) -> str:
    """Where a reservoir sample came from, for the dictionary's metadata."""
    partitions = sorted({p for p, _, _ in entries})
    offsets = [o for _, o, _ in entries]
    span = f"offsets {min(offsets)}-{max(offsets)}" if offsets else "no records"
    return (
        f"run sample of topic {topic}: {len(entries)} records of partition(s) "
        f"{','.join(map(str, partitions))}, {span}"
    )


def run_job(job: Job) -> JobResult:
    """Hold out the newest slice of the sample, train, evaluate and decide (in the child
    process)."""
    started = time.process_time()
    window = sample_window(job.topic, job.entries)
    samples = split_newest(job.entries, job.heldout_fraction, window)
    report = train(samples, job.params, namespace=job.namespace, champion=job.champion)
    return JobResult(report=report, window=window, cpu_seconds=time.process_time() - started)


def _child_main(job: Job, conn: Connection, nice: int) -> None:
    # Ctrl-C reaches the whole process group; the parent decides when the child stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.nice(nice)
    try:
        conn.send(run_job(job))
    except Exception:
        conn.send(traceback.format_exc(limit=8))
    finally:
        conn.close()


class RunningJob(Protocol):
    """A training job under way."""

    def result(self) -> JobResult | str | None:
        """The result when done (a traceback string if it raised), else None."""
        ...

    def kill(self) -> None: ...


class TrainingProcess:
    """One training job in a child process: spawned, so it inherits nothing of the relay."""

    def __init__(self, job: Job, nice: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child_end = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(
            target=_child_main,
            args=(job, child_end, nice),
            name=f"zdict-train-{job.namespace}",
            daemon=True,
        )
        self._proc.start()
        child_end.close()

    def result(self) -> JobResult | str | None:
        """The result once the child is done (a traceback string if it raised), else None.

        Raises:
            ChildProcessError: the child died without a result (e.g. killed by the OOM killer).
        """
        if self._conn.poll():
            try:
                outcome: JobResult | str = self._conn.recv()
            except EOFError:
                outcome = ""
            self._proc.join(10.0)
            if outcome:
                return outcome
        if not self._proc.is_alive():
            raise ChildProcessError(f"training process exited with code {self._proc.exitcode}")
        return None

    def kill(self) -> None:
        if self._proc.is_alive():
            self._proc.kill()
        self._proc.join(10.0)
        self._conn.close()


# -- the thread in the relay process -------------------------------------------------------------


@dataclass(slots=True)
class _NamespaceTraining:
    """Per namespace: its sample, schedule and live ratio, whether this process trains it, and
    the training run under way."""

    topic: str
    reservoir: Reservoir | None
    schedule: Schedule
    live: LiveRatio
    metrics: NamespaceMetrics
    owner: bool = False
    champion: Dictionary | None = None
    job: RunningJob | None = None
    trigger: Trigger | None = None
    started: float = 0.0
    started_monotonic: float = 0.0
    context: dict[str, Any] = field(default_factory=dict)
    #: A drift was noticed: (reservoir position then, fresh values to wait for) before training.
    drift: tuple[int, int] | None = None
    #: The registry entries the schedule last took into account.
    seen_activation: Activation | None = None
    seen_training: dict[str, Any] | None = None
    #: An operator's pin of the namespace (from the registry): no training while it holds.
    pin: Pin | None = None
    #: Records waiting in the input topic when the relay started, held back until a first
    #: dictionary exists (0: none, or already trained from).
    backlog: int = 0


class Trainer:
    """Keeps every namespace of this process supplied with its best dictionary (see module)."""

    def __init__(
        self,
        *,
        settings: Settings,
        store: DictionaryStore,
        registry: Registry | None,
        metrics: Metrics,
        reservoirs: Mapping[str, Reservoir],
        topics: Iterable[str],
        encoder_stats: Callable[[str], CodecStats],
        dictionaries_changed: Callable[[], None],
        clock: Callable[[], float] = time.time,
        start_job: Callable[[Job, int], RunningJob] = TrainingProcess,
        backlogs: Mapping[str, int] | None = None,
        sample_topic: Callable[[Settings, str, int], list[Entry]] | None = None,
    ) -> None:
        """Args:
        reservoirs: per input topic, the reservoir the relay feeds (none: never trains it).
        topics: every input topic (namespace) of this process.
        encoder_stats: the relay's current encoder statistics of a topic (the live ratio).
        dictionaries_changed: tells the relay to re-read the store's active dictionaries.
        clock: Unix seconds.
        start_job: runs a `Job` at a niceness (a child process; tests may run it in-process).
        backlogs: per input topic, records waiting when the relay started (it holds them back
            until a first dictionary): the first dictionary is trained from the topic's latest
            records, read with `sample_topic` (default: `topic_sample.read_sample`).
        """
        self.settings = settings
        self.store = store
        self.registry = registry
        self.metrics = metrics
        self.clock = clock
        self._encoder_stats = encoder_stats
        self._changed = dictionaries_changed
        self._start_job = start_job
        self._sample_topic = sample_topic or _latest_records
        self._training = settings.training.enabled
        self._params = settings.training.params(settings.codec)
        training = settings.training
        policy = Policy(
            retrain_interval=training.retrain_interval,
            min_interval=training.min_interval,
            drift_tolerance=training.drift_tolerance,
            min_messages=settings.sampling.min_messages,
        )
        self.namespaces: dict[str, _NamespaceTraining] = {}
        for topic in topics:
            ns = _NamespaceTraining(
                topic=topic,
                reservoir=reservoirs.get(topic),
                schedule=Schedule(policy),
                live=LiveRatio(training.drift_window, training.drift_min_messages),
                metrics=metrics.namespace(topic),
                backlog=(backlogs or {}).get(topic, 0),
            )
            if self._training:  # where nothing trains, no series: not "0 trainers here"
                ns.metrics.set_trainer(False)
            self._load_champion(ns)
            self.namespaces[topic] = ns
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_follow = 0.0

    # -- control -------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="zdict-trainer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and kill a running training process (its work is simply lost)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30.0)
        for ns in self.namespaces.values():
            if ns.job is not None:
                ns.job.kill()
                ns.job = None

    def on_assignment(self, assigned: Iterable[tuple[str, int]]) -> None:
        """The relay's partitions changed (called on the relay thread): who trains what."""
        held = set(assigned)
        for topic, ns in self.namespaces.items():
            owner = (topic, 0) in held
            if owner != ns.owner:
                ns.owner = owner
                if self._training:
                    ns.metrics.set_trainer(owner)
                log.info(
                    "trainer_role",
                    namespace=topic,
                    trainer=owner,
                    reason="holds partition 0" if owner else "partition 0 moved away",
                )

    def _loop(self) -> None:
        while not self._stop.wait(TICK):
            try:
                self.tick()
            except Exception:  # a bug here must not stop the relay; it is logged loudly
                log.exception("trainer_tick_failed")

    # -- one tick ------------------------------------------------------------------------------

    def tick(self) -> None:
        """Follow the registry when due, then look at every namespace once."""
        now = self.clock()
        if self.registry is not None and (
            now - self._last_follow >= self.settings.registry.follow_interval
        ):
            self._last_follow = now
            self.follow()
        for ns in self.namespaces.values():
            self._tick(ns, now)

    def follow(self) -> None:
        """Read new registry entries; cache and activate what concerns this process.

        The schedule follows the registry's state, not the entries read here: a publication of
        this process reads the registry too, and may be the read that saw an operator's entry.
        """
        assert self.registry is not None
        try:
            self.registry.refresh(min(self.registry.timeout, FOLLOW_TIMEOUT))
        except ZdictError as exc:
            log.warning("registry_read_failed", topic=self.registry.topic, error=str(exc))
            return
        except Exception:  # a bug must not stop following: logged with its traceback
            log.exception("registry_read_failed", topic=self.registry.topic)
            return
        state = self.registry.state
        for ns in self.namespaces.values():
            activation = state.activations.get(ns.topic)
            if activation is not None and _activated(activation, ns.seen_activation):
                ns.schedule.activated(
                    activation.at.timestamp(),
                    by_operator=activation.action in OPERATOR_ACTIONS,
                )
            ns.seen_activation = activation
            ns.pin = activation.pinned if activation is not None else None
            ns.metrics.set_pinned(ns.pin is not None)
            run = state.trainings.get(ns.topic)
            if run is not None and run is not ns.seen_training:
                ns.seen_training = run
                ns.metrics.last_training(run)
                at = run.get("finished_at")
                if isinstance(at, int | float) and (ns.schedule.last_run or 0) < at:
                    ns.schedule.ran(at, failed=run.get("decision") == "failed")
        if sync_store(self.registry, self.store, self.namespaces):
            for ns in self.namespaces.values():
                self._load_champion(ns)
            self._changed()

    def _load_champion(self, ns: _NamespaceTraining) -> None:
        try:
            champion = self.store.active(ns.topic)
        except ZdictError as exc:
            log.error("dictionary_check_failed", namespace=ns.topic, error=str(exc))
            return
        if (champion and champion.id) != (ns.champion and ns.champion.id):
            ns.live.reset()  # the old dictionary's ratio says nothing about the new one
        ns.champion = champion
        if ns.reservoir is not None:
            ns.reservoir.dense = champion is None  # every record, until a first dictionary
        if ns.champion is not None and ns.schedule.active_since is None:
            ns.schedule.active_since = ns.champion.meta.created_at.timestamp()

    def _tick(self, ns: _NamespaceTraining, now: float) -> None:
        if ns.reservoir is not None:
            ns.metrics.set_sample(ns.reservoir.size_bytes, ns.reservoir.messages)
        stats = self._encoder_stats(ns.topic)
        live: float | None = None
        if ns.champion is not None and stats.dictionary_id == ns.champion.id:
            # The shadow sample of the records written raw counts too (`codec.raw_values`): a
            # topic whose batches fill is measured all the same.
            ns.live.observe(
                now,
                stats,
                stats.live_input_bytes,
                stats.live_output_bytes,
                stats.live_messages,
            )
            live = ns.live.ratio()
        # Else the relay has not switched to the champion yet (it does within seconds): its
        # counts are another dictionary's, and judged against the champion's held-out ratio
        # they would read as drift.
        ns.metrics.set_live_ratio(live)
        if ns.job is not None:
            if not ns.owner:
                ns.job.kill()
                ns.job = None
                log.info("training_abandoned", namespace=ns.topic, reason="no longer the trainer")
            else:
                self._poll_job(ns, now)
            return
        if not (self._training and ns.owner and ns.reservoir is not None):
            ns.drift = None
            return
        if ns.backlog and ns.champion is None:
            self._train_from_backlog(ns, now)
            return
        if ns.drift is not None:
            # Train on what came after the drift was noticed, not on the reservoir's older part.
            kept_at, needed = ns.drift
            if ns.reservoir.kept - kept_at >= needed:
                ns.drift = None
                self._start(ns, Trigger.DRIFT, now, live, newest=needed)
            return
        trigger = ns.schedule.due(
            now,
            sample_messages=ns.reservoir.messages,
            heldout_ratio=ns.champion.meta.heldout_ratio if ns.champion else None,
            live_ratio=live,
            sample_full=ns.reservoir.size_bytes >= FULL * ns.reservoir.max_bytes,
        )
        if trigger is Trigger.DRIFT:
            needed = min(self.settings.sampling.min_messages, ns.reservoir.messages)
            ns.drift = (ns.reservoir.kept, needed)
            log.info(
                "drift_detected",
                namespace=ns.topic,
                live_ratio=None if live is None else round(live, 4),
                reference_ratio=ns.schedule.reference,
                heldout_ratio=ns.champion.meta.heldout_ratio if ns.champion else None,
                waiting_for_samples=needed,
            )
        elif trigger is not None:
            self._start(ns, trigger, now, live)

    def _train_from_backlog(self, ns: _NamespaceTraining, now: float) -> None:
        """A first dictionary from the latest records of the topic the relay holds back."""
        count = min(self.settings.sampling.backlog_sample, max(ns.backlog, 1))
        ns.backlog = 0  # once: if this fails, the reservoir takes over when the relay goes on
        try:
            entries = self._sample_topic(self.settings, ns.topic, count)
        except ZdictError as exc:
            log.warning("backlog_sample_failed", namespace=ns.topic, error=str(exc))
            return
        log.info("backlog_sampled", namespace=ns.topic, records=len(entries))
        self._start(ns, Trigger.FIRST, now, None, entries=entries, source="backlog")

    def _start(
        self,
        ns: _NamespaceTraining,
        trigger: Trigger,
        now: float,
        live: float | None,
        newest: int | None = None,
        *,
        entries: list[Entry] | None = None,
        source: str = "reservoir",
    ) -> None:
        if ns.pin is not None:
            self._skip(ns, trigger, now, ns.pin)
            return
        if entries is None:
            assert ns.reservoir is not None
            entries = ns.reservoir.snapshot(newest)
        job = Job(
            namespace=ns.topic,
            topic=ns.topic,
            entries=entries,
            heldout_fraction=self.settings.training.heldout_fraction,
            params=self._params,
            champion=ns.champion,
        )
        ns.trigger, ns.started, ns.started_monotonic = trigger, now, time.monotonic()
        ns.context = {
            "sample_messages": len(entries),
            "sample_source": source,
            "live_ratio": None if live is None else round(live, 4),
            "champion_id": ns.champion.id if ns.champion else None,
            "champion_heldout_ratio": ns.champion.meta.heldout_ratio if ns.champion else None,
        }
        ns.metrics.training_triggered(trigger)
        log.info("training_started", namespace=ns.topic, trigger=trigger.value, **ns.context)
        ns.job = self._start_job(job, self.settings.training.nice)

    def _poll_job(self, ns: _NamespaceTraining, now: float) -> None:
        assert ns.job is not None
        try:
            outcome = ns.job.result()
        except ChildProcessError as exc:
            outcome = str(exc)
        if outcome is None:
            return
        ns.job.kill()
        ns.job = None
        seconds = time.monotonic() - ns.started_monotonic
        if isinstance(outcome, str):
            self._finish(ns, now, seconds, 0.0, None, Decision.FAILED, outcome.strip(), None)
            return
        report = outcome.report
        decision, reason, stored = report.decision, report.reason, None
        if decision is Decision.PROMOTED:
            try:
                stored = promote(
                    self.store,
                    self.registry,
                    report,
                    window=outcome.window,
                    parent_id=ns.champion.id if ns.champion else None,
                )
            except ZdictError as exc:
                decision = Decision.FAILED
                reason = f"promoted, but not published: {exc}; the relay keeps the champion"
                if self.registry is not None:
                    self.metrics.registry_published(ok=False)
            else:
                if self.registry is not None:
                    self.metrics.registry_published(ok=True)
                ns.schedule.activated(self.clock(), by_operator=False)
                self._load_champion(ns)
                self._changed()
        self._finish(ns, now, seconds, outcome.cpu_seconds, report, decision, reason, stored)

    def _finish(
        self,
        ns: _NamespaceTraining,
        now: float,
        seconds: float,
        cpu_seconds: float,
        report: TrainingReport | None,
        decision: Decision,
        reason: str,
        stored: Dictionary | None,
    ) -> None:
        ns.schedule.ran(
            now, failed=decision is Decision.FAILED, sample=ns.context.get("sample_messages")
        )
        if ns.trigger is Trigger.DRIFT and decision is Decision.REJECTED:
            ns.schedule.drift_not_cured(ns.context.get("live_ratio"))
        ns.metrics.training_run(decision.value, seconds, cpu_seconds)
        summary: dict[str, Any] = report.summary() if report is not None else {}
        summary |= {
            "namespace": ns.topic,
            "trigger": ns.trigger.value if ns.trigger else None,
            "decision": decision.value,
            "reason": reason,
            "started_at": ns.started,
            "finished_at": now,
            "seconds": round(seconds, 3),
            "cpu_seconds": round(cpu_seconds, 3),
            "stored_id": stored.id if stored else None,
            **ns.context,
        }
        logger = log.warning if decision is Decision.FAILED else log.info
        logger("training_finished", **summary)
        self._record(ns, (report.to_dict() if report else {}) | summary, summary)

    def _skip(self, ns: _NamespaceTraining, trigger: Trigger, now: float, pin: Pin) -> None:
        """A run was due and is not started: the namespace is pinned. Recorded as its latest
        training entry (`skipped`, the reason), so `dicts status` says why nothing trains and
        the registry shows the namespace is looked after."""
        ns.schedule.skipped(now)
        ns.metrics.training_skipped("pinned")
        reason = str(pinned_error(ns.topic, pin))
        log.info(
            "training_skipped",
            namespace=ns.topic,
            trigger=trigger.value,
            reason="pinned",
            pinned_by=pin.by,
            pinned_at=pin.at.isoformat(),
            next_due=ns.schedule.hold_until,
        )
        summary = {
            "namespace": ns.topic,
            "trigger": trigger.value,
            "decision": SKIPPED,
            "reason": reason,
            "started_at": now,
            "finished_at": now,
        }
        self._record(ns, summary, summary)

    def _record(
        self, ns: _NamespaceTraining, full: dict[str, Any], summary: dict[str, Any]
    ) -> None:
        """A run's entry: `full` to the store's training log, `summary` to the registry."""
        try:
            self.store.record_training(ns.topic, full)
        except ZdictError as exc:
            log.error("training_record_failed", namespace=ns.topic, error=str(exc))
        if self.registry is not None:
            try:
                self.registry.publish_training(ns.topic, summary)
            except ZdictError as exc:
                log.warning("training_record_not_published", namespace=ns.topic, error=str(exc))
