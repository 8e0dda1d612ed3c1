"""The Prometheus metrics of a relay or proxy process (`Metrics`, `NamespaceMetrics`).

All of them are defined once, in `Metrics`, against a `CollectorRegistry` the caller passes in
(the process makes one; each test makes a fresh one). Conventions: base units, `_total`
counters, `_seconds` / `_bytes` suffixes, and only bounded labels (topic, mode, outcome, result,
partition, reason, stage, trigger), never anything per message.

The relay's hot path is `NamespaceMetrics.observe_batch`: one call per consumed batch, one
`inc(n)` per distinct label set, on children resolved once when the topic was registered.

Each metric, its type, labels and meaning: deploy/README.md, "Metrics". The container's memory
is collected by `sidecar.cgroup_memory`; an application's in-process producer has metrics of its
own, `sidecar.serde.metrics`.
"""

from __future__ import annotations

import contextlib
import platform
import threading
from collections import Counter as _Tally
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Final

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    ProcessCollector,
)

from sidecar import __version__
from sidecar.cgroup_memory import CgroupMemory
from sidecar.codec import Outcome, Transformed
from sidecar.dictionaries.registry_state import IGNORED_REASONS
from sidecar.relay.dead_letters import STAGES
from sidecar.training.choice import Decision
from sidecar.training.schedule import Trigger

if TYPE_CHECKING:
    from sidecar.dictionaries.model import Dictionary

__all__ = [
    "COMMIT_FAILED",
    "COMMIT_OK",
    "COMPRESS_BUCKETS",
    "DECODE",
    "ENCODE",
    "RELAY_LATENCY_BUCKETS",
    "TRAINING_BUCKETS",
    "TRAINING_RESULTS",
    "TRAINING_TRIGGERS",
    "Metrics",
    "NamespaceMetrics",
    "build_info",
]

#: Per-message encode time: ~1 µs for a 100-byte event with a dictionary, up to a millisecond
#: for large values or high levels.
COMPRESS_BUCKETS: Final = (
    0.5e-6,
    1e-6,
    2e-6,
    5e-6,
    10e-6,
    20e-6,
    50e-6,
    100e-6,
    200e-6,
    500e-6,
    1e-3,
)
#: Record timestamp → delivery acknowledged: milliseconds when keeping up, minutes when lagging.
RELAY_LATENCY_BUCKETS: Final = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)
#: One training run: seconds for a small sample, up to an hour for a large grid.
TRAINING_BUCKETS: Final = (1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)

#: Values of the `result` label of `zdict_training_runs_total`.
TRAINING_RESULTS: Final = tuple(d.value for d in Decision)
#: Values of the `stage` label of `zdict_dead_letters_total`.
DEAD_LETTER_STAGES: Final = STAGES
#: Values of the `trigger` label of `zdict_training_triggers_total`.
TRAINING_TRIGGERS: Final = tuple(t.value for t in Trigger)
#: The trigger `zdict-sidecar train` records for its runs (the retraining CronJob's).
MANUAL_TRIGGER: Final = "manual"
#: Values of the `mode` label: the relay's direction.
ENCODE: Final = "encode"
DECODE: Final = "decode"
#: Values of the `result` label of `zdict_commits_total`.
COMMIT_OK: Final = "ok"
COMMIT_FAILED: Final = "failed"
#: Distinct `reason` values kept for produce errors; later ones are counted as "other", so a
#: broker returning unexpected error names cannot grow the series without bound.
MAX_PRODUCE_ERROR_REASONS: Final = 64
OTHER_REASON: Final = "other"

_OUTCOME: Final = itemgetter(2)  # Transformed.outcome
_INPUT_BYTES: Final = itemgetter(3)  # Transformed.input_bytes
_OUTPUT_BYTES: Final = itemgetter(4)  # Transformed.output_bytes


def build_info() -> dict[str, str]:
    """Versions of this process and of the native libraries it runs on (zdict_build labels)."""
    info = {
        "version": __version__,
        "python": platform.python_version(),
        "zstandard": "unknown",
        "libzstd": "unknown",
        "confluent_kafka": "unknown",
        "librdkafka": "unknown",
    }
    try:
        import zstandard

        info["zstandard"] = str(zstandard.__version__)
        info["libzstd"] = ".".join(str(part) for part in zstandard.ZSTD_VERSION)
    except ImportError:  # pragma: no cover - a dependency
        pass
    try:
        import confluent_kafka

        info["confluent_kafka"] = str(confluent_kafka.version()[0])
        info["librdkafka"] = str(confluent_kafka.libversion()[0])
    except ImportError:  # pragma: no cover - a dependency
        pass
    return info


class NamespaceMetrics:
    """The labelled children of one topic, resolved once: what the relay holds per topic.

    Get it from `Metrics.namespace`; every method is label-lookup free. (A topic's dictionaries
    belong to the namespace of the same name, hence the class name.)
    """

    __slots__ = (
        "_compress",
        "_dead_letters",
        "_input",
        "_last_training",
        "_last_training_labels",
        "_latency",
        "_live_ratio",
        "_messages",
        "_mode",
        "_outcomes",
        "_output",
        "_sample_bytes",
        "_sample_messages",
        "_trainer",
        "_training",
        "_training_cpu",
        "_training_seconds",
        "_triggers",
        "name",
    )

    def __init__(
        self, metrics: Metrics, namespace: str, outcomes: Sequence[str] = Outcome.COUNTED
    ) -> None:
        self.name = namespace
        self._messages = metrics.messages
        # The direction follows the codec's outcomes: a decoding relay registers its topics
        # with the decoder's.
        self._mode = mode = DECODE if Outcome.DECODED in outcomes else ENCODE
        # Every outcome exists from the first scrape, so rate() has a zero to start from.
        self._outcomes: dict[str, Counter] = {
            outcome: metrics.messages.labels(namespace, mode, outcome) for outcome in outcomes
        }
        self._input = metrics.input_bytes.labels(namespace, mode)
        self._output = metrics.output_bytes.labels(namespace, mode)
        self._compress = metrics.compress_seconds.labels(namespace, mode)
        self._latency = metrics.relay_latency_seconds.labels(namespace)
        self._training: dict[str, Counter] = {
            result: metrics.training_runs.labels(namespace, result) for result in TRAINING_RESULTS
        }
        self._training_seconds = metrics.training_seconds.labels(namespace)
        self._training_cpu = metrics.training_cpu_seconds.labels(namespace)
        self._triggers: dict[str, Counter] = {
            trigger: metrics.training_triggers.labels(namespace, trigger)
            for trigger in TRAINING_TRIGGERS
        }
        self._trainer = metrics.trainer.labels(namespace)
        self._live_ratio = metrics.live_ratio
        self._last_training = metrics.last_training
        self._last_training_labels: tuple[str, str] | None = None
        self._sample_bytes = metrics.sample_bytes.labels(namespace)
        self._sample_messages = metrics.sample_messages.labels(namespace)
        self._dead_letters: dict[str, Counter] = {
            stage: metrics.dead_letters.labels(namespace, stage) for stage in DEAD_LETTER_STAGES
        }

    def observe_batch(self, encoded: Sequence[Transformed], encode_seconds: float) -> None:
        """Count one encoded batch: outcomes, bytes in and out, and the mean encode time.

        `encode_seconds` is the wall time of encoding the whole batch; `zdict_compress_seconds`
        gets one observation per batch, the per-message mean (observing every message would cost
        more than compressing it). An empty batch is not observed.
        """
        if not encoded:
            return
        self.observe_counts(
            _Tally(map(_OUTCOME, encoded)),
            sum(map(_INPUT_BYTES, encoded)),
            sum(map(_OUTPUT_BYTES, encoded)),
            encode_seconds,
        )

    def observe_counts(
        self,
        outcomes: Mapping[str, int],
        input_bytes: int,
        output_bytes: int,
        encode_seconds: float,
    ) -> None:
        """`observe_batch` from totals the caller has already (e.g. a `CodecStats` delta).

        Costs nothing per message: for callers that tally outcomes and bytes themselves.
        """
        messages = 0
        children = self._outcomes
        for outcome, count in outcomes.items():
            if not count:
                continue
            child = children.get(outcome)
            if child is None:  # an outcome the codec added after this module was written
                child = children[outcome] = self._messages.labels(self.name, self._mode, outcome)
            child.inc(count)
            messages += count
        if not messages:
            return
        self._input.inc(input_bytes)
        self._output.inc(output_bytes)
        self._compress.observe(encode_seconds / messages)

    def observe_raw(self, records: int, size: int) -> None:
        """`records` written raw (the output mode), `size` bytes of values: outcome `raw`, the
        same bytes in and out. Not in the encode time: they were not encoded."""
        if not records:
            return
        child = self._outcomes.get(Outcome.RAW)
        if child is None:  # registered with other outcomes (a decoding relay never goes raw)
            child = self._outcomes[Outcome.RAW] = self._messages.labels(
                self.name, self._mode, Outcome.RAW
            )
        child.inc(records)
        self._input.inc(size)
        self._output.inc(size)

    def observe_delivery_latency(self, seconds: float) -> None:
        """One delivered record: input record timestamp → output acknowledged (clamped at 0)."""
        self._latency.observe(max(0.0, seconds))

    def training_run(self, result: str, seconds: float, cpu_seconds: float = 0.0) -> None:
        """One training run ended with `result` (a `Decision`: promoted, rejected or failed),
        after `seconds` of wall time and `cpu_seconds` of the training process's CPU time."""
        child = self._training.get(result)
        if child is None:
            raise ValueError(f"training result {result!r} is not one of {TRAINING_RESULTS}")
        child.inc()
        self._training_seconds.observe(seconds)
        if cpu_seconds > 0:
            self._training_cpu.inc(cpu_seconds)

    def training_triggered(self, trigger: str) -> None:
        """A training run started because of `trigger` (first, scheduled, drift)."""
        child = self._triggers.get(trigger)
        if child is None:
            raise ValueError(f"training trigger {trigger!r} is not one of {TRAINING_TRIGGERS}")
        child.inc()

    def last_training(self, run: Mapping[str, Any]) -> None:
        """The topic's latest training run recorded in the registry (its `training/<namespace>`
        record: `finished_at` in Unix seconds, `trigger`, `decision`), whoever ran it.

        Exactly one `zdict_last_training_timestamp_seconds` series per topic: the previous
        run's is replaced. Unknown trigger or decision values are labelled `other`, so a record
        written by another version cannot add series without bound; a record without a
        numeric `finished_at` is ignored.
        """
        finished_at = run.get("finished_at")
        if not isinstance(finished_at, int | float) or isinstance(finished_at, bool):
            return
        trigger, result = run.get("trigger"), run.get("decision")
        labels = (
            trigger if trigger in (*TRAINING_TRIGGERS, MANUAL_TRIGGER) else OTHER_REASON,
            result if result in TRAINING_RESULTS else OTHER_REASON,
        )
        previous, self._last_training_labels = self._last_training_labels, labels
        if previous is not None and previous != labels:
            _remove(self._last_training, self.name, *previous)
        self._last_training.labels(self.name, *labels).set(float(finished_at))

    def set_trainer(self, trainer: bool) -> None:
        """Whether this process trains the topic (it holds partition 0 of it)."""
        self._trainer.set(1 if trainer else 0)

    def set_live_ratio(self, ratio: float | None) -> None:
        """The ratio over the drift window; None (too little traffic to judge) removes it."""
        if ratio is None:
            _remove(self._live_ratio, self.name)
        else:
            self._live_ratio.labels(self.name).set(ratio)

    def dead_letter(self, stage: str) -> None:
        """One record set aside to the dead-letter topic at `stage` (encode, decode, produce)."""
        self._dead_letters[stage].inc()

    def set_sample(self, size_bytes: int, messages: int) -> None:
        """What the topic's reservoir holds: bytes (with bookkeeping) and values."""
        self._sample_bytes.set(size_bytes)
        self._sample_messages.set(messages)


class Metrics:
    """All metrics of the process, registered in `registry`.

    Thread-safe: the relay, delivery callbacks and the training thread may call it concurrently.
    The metric objects are public attributes for tests and for anything not covered by a method.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        memory: CgroupMemory | None = None,
        *,
        group: str = "",
    ) -> None:
        """`memory` reads the container's memory figures (default: this process's cgroup);
        `group` is the consumer group the process's partitions come from (the label of
        `zdict_assigned_partitions`, so that an alert tells one group from another; exported
        once the process joins it: `join_group`)."""
        self.registry = registry
        self._define_relay(registry)
        self._define_delivery(registry)
        self._define_dictionaries(registry)
        self._define_training(registry)
        self._define_process(registry, memory or CgroupMemory())

        self._lock = threading.Lock()
        self._namespaces: dict[str, NamespaceMetrics] = {}
        self._lag: dict[tuple[str, int], Gauge] = {}
        self._produce_errors: dict[str, Counter] = {}
        self._commits = {
            COMMIT_OK: self.commits.labels(COMMIT_OK),
            COMMIT_FAILED: self.commits.labels(COMMIT_FAILED),
        }
        self._group = group
        # No series until the process joins its group: a process that never joins one (a
        # proxy without training, the forwarding proxy) holds no partition by design, and a
        # series at 0 would page ZdictNoPartitionAssigned for it.
        self._assigned: Gauge | None = None

    # -- definitions, one group each -----------------------------------------------------------

    def _define_relay(self, reg: CollectorRegistry) -> None:
        """What the relay does with records: outcomes, bytes in and out, encode time, latency,
        and the record batches its output is stored in."""
        self.messages = Counter(
            "zdict_messages",
            "Records handled, by what the codec did with the value (codec Outcome); raw: "
            "written as it came by the output mode (codec.output_mode), not encoded.",
            ("topic", "mode", "outcome"),
            registry=reg,
        )
        self.input_bytes = Counter(
            "zdict_input_bytes",
            "Record value bytes consumed (raw when encoding; tombstones count 0).",
            ("topic", "mode"),
            registry=reg,
        )
        self.output_bytes = Counter(
            "zdict_output_bytes",
            "Record value bytes produced, plus the bytes of the header we add to compressed ones.",
            ("topic", "mode"),
            registry=reg,
        )
        self.compress_seconds = Histogram(
            "zdict_compress_seconds",
            "Per-message encode (decode) time, observed once per consumed batch as its mean.",
            ("topic", "mode"),
            buckets=COMPRESS_BUCKETS,
            registry=reg,
        )
        self.relay_latency_seconds = Histogram(
            "zdict_relay_latency_seconds",
            "Input record timestamp to output record acknowledged by the broker.",
            ("topic",),
            buckets=RELAY_LATENCY_BUCKETS,
            registry=reg,
        )
        self.dead_letters = Counter(
            "zdict_dead_letters",
            "Records set aside to the dead-letter topic, by the stage that could not process them.",
            ("topic", "stage"),
            registry=reg,
        )
        self.stored_bytes = Counter(
            "zdict_output_stored_bytes",
            "Bytes of the record batches produced to the topic's output topic (batch and record "
            "framing, keys, headers, values, after batch compression): what the broker stores.",
            ("topic",),
            registry=reg,
        )
        self.stored_records = Counter(
            "zdict_output_stored_records",
            "Records in the record batches produced to the topic's output topic.",
            ("topic",),
            registry=reg,
        )
        self.output_batches = Counter(
            "zdict_output_batches",
            "Record batches produced to the topic's output topic.",
            ("topic",),
            registry=reg,
        )
        self.output_mode = Gauge(
            "zdict_output_mode",
            "1 for the mode an output partition is written in, 0 for the other: frames "
            "(per-record frames with the zd header) or raw (values as they came, batch "
            "compression only); partition -1: the whole topic (keyed output).",
            ("topic", "partition", "mode"),
            registry=reg,
        )

    def _define_delivery(self, reg: CollectorRegistry) -> None:
        """The Kafka side: deliveries, commits, transactions, lag and assigned partitions."""
        self.produce_errors = Counter(
            "zdict_produce_errors",
            "Records the producer failed to deliver, by error name.",
            ("reason",),
            registry=reg,
        )
        self.commits = Counter(
            "zdict_commits",
            "Consumer offset commits, by result (ok, failed).",
            ("result",),
            registry=reg,
        )
        self.transactions = Counter(
            "zdict_transactions",
            "Transactions of the exactly-once mode, by result (committed, aborted).",
            ("result",),
            registry=reg,
        )
        for result in ("committed", "aborted"):
            self.transactions.labels(result)
        self.consumer_lag = Gauge(
            "zdict_consumer_lag_messages",
            "Messages between the consumer position and the high watermark, per input partition.",
            ("topic", "partition"),
            registry=reg,
        )
        self.assigned_partitions = Gauge(
            "zdict_assigned_partitions",
            "Input partitions currently assigned to this process, in its consumer group.",
            ("group",),
            registry=reg,
        )

    def _define_dictionaries(self, reg: CollectorRegistry) -> None:
        """The active dictionary of each topic, and publications to the registry topic."""
        self.dictionary_info = Info(
            "zdict_dictionary",
            "The active dictionary of each topic (dict_id 0: compressing without one).",
            ("topic",),
            registry=reg,
        )
        self.dictionary_heldout_ratio = Gauge(
            "zdict_dictionary_heldout_ratio",
            "Raw / (frame + header) bytes of the active dictionary on its held-out data.",
            ("topic",),
            registry=reg,
        )
        self.dictionary_created = Gauge(
            "zdict_dictionary_created_timestamp_seconds",
            "When the active dictionary was trained (Unix time).",
            ("topic",),
            registry=reg,
        )
        self.registry_publish = Counter(
            "zdict_registry_publish",
            "Dictionaries and activations published to the registry topic, by result.",
            ("result",),
            registry=reg,
        )
        for result in (COMMIT_OK, COMMIT_FAILED):
            self.registry_publish.labels(result)
        self.registry_records_ignored = Counter(
            "zdict_registry_records_ignored",
            "Registry records no reader uses (malformed, out of range, ...), by class of reason.",
            ("reason",),
            registry=reg,
        )
        for reason in IGNORED_REASONS:
            self.registry_records_ignored.labels(reason)

    def _define_training(self, reg: CollectorRegistry) -> None:
        """Training runs and their triggers, the trainer role, the drift window, the reservoir."""
        self.training_runs = Counter(
            "zdict_training_runs",
            "Training runs, by result (promoted, rejected, failed).",
            ("topic", "result"),
            registry=reg,
        )
        self.training_seconds = Histogram(
            "zdict_training_seconds",
            "Wall time of one training run, sampling excluded.",
            ("topic",),
            buckets=TRAINING_BUCKETS,
            registry=reg,
        )
        self.training_cpu_seconds = Counter(
            "zdict_training_cpu_seconds",
            "CPU time of the training process (it runs beside the relay, at a lower priority).",
            ("topic",),
            registry=reg,
        )
        self.training_triggers = Counter(
            "zdict_training_triggers",
            "Training runs started, by trigger (first, scheduled, drift).",
            ("topic", "trigger"),
            registry=reg,
        )
        self.last_training = Gauge(
            "zdict_last_training_timestamp_seconds",
            "When the topic's latest training run recorded in the registry ended (Unix time), "
            "by trigger (manual: `zdict-sidecar train`, e.g. the retraining CronJob) and result.",
            ("topic", "trigger", "result"),
            registry=reg,
        )
        self.trainer = Gauge(
            "zdict_trainer",
            "1 where this process trains the topic (it holds partition 0 of it).",
            ("topic",),
            registry=reg,
        )
        self.live_ratio = Gauge(
            "zdict_live_ratio",
            "Raw / output bytes over the drift window, values no dictionary could shrink left out.",
            ("topic",),
            registry=reg,
        )
        self.sample_bytes = Gauge(
            "zdict_sample_bytes",
            "Bytes the topic's training reservoir holds, values plus bookkeeping.",
            ("topic",),
            registry=reg,
        )
        self.sample_messages = Gauge(
            "zdict_sample_messages",
            "Values the topic's training reservoir holds.",
            ("topic",),
            registry=reg,
        )

    def _define_process(self, reg: CollectorRegistry, memory: CgroupMemory) -> None:
        """The build's versions, the standard process metrics and the container's memory."""
        self.build = Info(
            "zdict_build", "Versions of zdict-sidecar and its libraries.", registry=reg
        )
        self.build.info(build_info())
        # The process's own registry has no default collectors; restarts (a failed delivery
        # exits the relay) are only visible through process_start_time_seconds.
        ProcessCollector(registry=reg)
        reg.register(memory)

    # -- per topic -----------------------------------------------------------------------------

    def namespace(
        self, namespace: str, outcomes: Sequence[str] = Outcome.COUNTED
    ) -> NamespaceMetrics:
        """The cached children of topic `namespace`, registering it on first use with
        `outcomes` (the encoder's, or `Outcome.DECODE_ALL` for a decode relay: `mode` decode)
        at 0."""
        children = self._namespaces.get(namespace)
        if children is None:
            with self._lock:
                children = self._namespaces.get(namespace)
                if children is None:
                    children = NamespaceMetrics(self, namespace, outcomes)
                    self._namespaces[namespace] = children
        return children

    def transaction(self, committed: bool) -> None:
        """One transaction of the exactly-once mode ended: committed or aborted."""
        self.transactions.labels("committed" if committed else "aborted").inc()

    def registry_published(self, ok: bool) -> None:
        """One publication to the registry topic (dictionary or activation) ended."""
        self.registry_publish.labels(COMMIT_OK if ok else COMMIT_FAILED).inc()

    def registry_record_ignored(self, reason: str) -> None:
        """One registry record was ignored; `reason` is one of `IGNORED_REASONS`."""
        self.registry_records_ignored.labels(reason).inc()

    def observe_batch(
        self, namespace: str, encoded: Sequence[Transformed], encode_seconds: float
    ) -> None:
        """`NamespaceMetrics.observe_batch` for `namespace` (one dict lookup more)."""
        self.namespace(namespace).observe_batch(encoded, encode_seconds)

    def observe_delivery_latency(self, namespace: str, seconds: float) -> None:
        """`NamespaceMetrics.observe_delivery_latency` for `namespace`."""
        self.namespace(namespace).observe_delivery_latency(seconds)

    def training_run(self, namespace: str, result: str, seconds: float) -> None:
        """`NamespaceMetrics.training_run` for `namespace`; `result` must be a `Decision`."""
        self.namespace(namespace).training_run(result, seconds)

    def observe_output_batches(self, topic: str, batches: int, records: int, size: int) -> None:
        """`batches` record batches holding `records` records and `size` bytes (as stored)
        were produced to the output topic of input `topic` since the last report."""
        if batches <= 0:
            return
        self.output_batches.labels(topic).inc(batches)
        self.stored_records.labels(topic).inc(records)
        self.stored_bytes.labels(topic).inc(size)

    def set_active_dictionary(
        self,
        namespace: str,
        dict_id: int,
        version: int,
        heldout_ratio: float | None,
        created_at: datetime | None,
    ) -> None:
        """Make `dict_id` (0 = none) the one `zdict_dictionary_info` series of `namespace`.

        The previous dictionary's series is replaced, not left at 0: exactly one series per
        topic is 1. `heldout_ratio` / `created_at` None remove those gauges (e.g. no
        dictionary). A naive `created_at` is taken as UTC.
        """
        self.namespace(namespace)
        with self._lock:
            self.dictionary_info.labels(namespace).info(
                {"dict_id": str(dict_id), "version": str(version)}
            )
            if heldout_ratio is None:
                _remove(self.dictionary_heldout_ratio, namespace)
            else:
                self.dictionary_heldout_ratio.labels(namespace).set(heldout_ratio)
            if created_at is None:
                _remove(self.dictionary_created, namespace)
            else:
                if created_at.tzinfo is None:
                    created_at = created_at.replace(tzinfo=UTC)
                self.dictionary_created.labels(namespace).set(created_at.timestamp())

    def set_dictionary(self, namespace: str, dictionary: Dictionary | None) -> None:
        """`set_active_dictionary` from a store `Dictionary`; None: compressing without one."""
        if dictionary is None:
            self.set_active_dictionary(namespace, 0, 0, None, None)
            return
        meta = dictionary.meta
        self.set_active_dictionary(
            namespace, meta.id, meta.version, meta.heldout_ratio, meta.created_at
        )

    def set_output_mode(self, topic: str, partition: int, mode: str, modes: Sequence[str]) -> None:
        """Output `topic`'s `partition` is written in `mode` (one of `modes`)."""
        for each in modes:
            self.output_mode.labels(topic, str(partition), each).set(1 if each == mode else 0)

    def remove_output_mode(self, topic: str, partition: int, modes: Sequence[str]) -> None:
        """Forget the mode series of an output partition no longer written."""
        for each in modes:
            _remove(self.output_mode, topic, str(partition), each)

    # -- consumer and producer -----------------------------------------------------------------

    def set_lag(self, topic: str, partition: int, lag: int) -> None:
        """Messages between the consumer position and the high watermark of one partition."""
        key = (topic, partition)
        child = self._lag.get(key)
        if child is None:
            with self._lock:
                child = self._lag.get(key)
                if child is None:
                    child = self._lag[key] = self.consumer_lag.labels(topic, str(partition))
        child.set(lag)

    def remove_partition(self, topic: str, partition: int) -> None:
        """Forget the lag series of a partition revoked or lost (no-op if it had none)."""
        with self._lock:
            if self._lag.pop((topic, partition), None) is not None:
                _remove(self.consumer_lag, topic, str(partition))

    def join_group(self) -> None:
        """The process joins its consumer group: `zdict_assigned_partitions` is exported from
        now on, at 0 until the first assignment (unchanged if one came first)."""
        self._assigned_child()

    def set_assigned_partitions(self, count: int) -> None:
        """How many input partitions this process holds after a rebalance."""
        self._assigned_child().set(count)

    def _assigned_child(self) -> Gauge:
        with self._lock:
            if self._assigned is None:
                self._assigned = self.assigned_partitions.labels(self._group)
            return self._assigned

    def produce_error(self, reason: str) -> None:
        """One record failed delivery; `reason` is a bounded error name (e.g. KafkaError.name())."""
        child = self._produce_errors.get(reason)
        if child is None:
            with self._lock:
                child = self._produce_errors.get(reason)
                if child is None:
                    if len(self._produce_errors) >= MAX_PRODUCE_ERROR_REASONS:
                        reason = OTHER_REASON
                    child = self._produce_errors.get(reason)
                    if child is None:
                        child = self._produce_errors[reason] = self.produce_errors.labels(reason)
        child.inc()

    def commit(self, ok: bool) -> None:
        """One offset commit finished, successfully or not."""
        self._commits[COMMIT_OK if ok else COMMIT_FAILED].inc()


def _remove(metric: Gauge | Counter, *labelvalues: str) -> None:
    with contextlib.suppress(KeyError):
        metric.remove(*labelvalues)
