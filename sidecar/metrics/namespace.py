"""The labelled children of one topic, resolved once (`NamespaceMetrics`): what the relay, the
proxy and the trainer hold per topic. (A topic's dictionaries belong to the namespace of the
same name, hence the class name.)

The relay's hot path is `NamespaceMetrics.observe_batch`: one call per consumed batch, one
`inc(n)` per distinct label set, on children resolved once when the topic was registered.
"""

from __future__ import annotations

from collections import Counter as _Tally
from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Any, Final

from prometheus_client import Counter, Gauge

from sidecar.codec import Outcome, Transformed
from sidecar.metrics.labels import (
    DEAD_LETTER_STAGES,
    DECODE,
    ENCODE,
    LAST_TRAINING_RESULTS,
    MANUAL_TRIGGER,
    OTHER_REASON,
    TRAINING_RESULTS,
    TRAINING_TRIGGERS,
    remove_series,
)
from sidecar.metrics.records import RecordMetrics
from sidecar.metrics.training import TrainingMetrics

__all__ = ["NamespaceMetrics"]

_OUTCOME: Final = itemgetter(2)  # Transformed.outcome
_INPUT_BYTES: Final = itemgetter(3)  # Transformed.input_bytes
_OUTPUT_BYTES: Final = itemgetter(4)  # Transformed.output_bytes


class NamespaceMetrics:
    """The children of topic `namespace` in `records` and `training`; every method is
    label-lookup free. Get it from `Metrics.namespace`."""

    __slots__ = (
        "_codec_duration",
        "_codec_records",
        "_dead_letters",
        "_input",
        "_last_training",
        "_last_training_labels",
        "_latency",
        "_live_factor",
        "_op",
        "_outcomes",
        "_output",
        "_pinned",
        "_records",
        "_sample_bytes",
        "_sample_records",
        "_skipped",
        "_trainer",
        "_trainer_metric",
        "_training",
        "_training_cpu",
        "_training_duration",
        "_triggers",
        "name",
    )

    def __init__(
        self,
        records: RecordMetrics,
        training: TrainingMetrics,
        namespace: str,
        outcomes: Sequence[str] = Outcome.COUNTED,
    ) -> None:
        self.name = namespace
        self._records = records.records
        # The direction follows the codec's outcomes: a decoding relay registers its topics
        # with the decoder's.
        self._op = op = DECODE if Outcome.DECODED in outcomes else ENCODE
        # Every outcome exists from the first scrape, so rate() has a zero to start from.
        self._outcomes: dict[str, Counter] = {
            outcome: records.records.labels(namespace, op, outcome) for outcome in outcomes
        }
        self._input = records.input_bytes.labels(namespace, op)
        self._output = records.output_bytes.labels(namespace, op)
        self._codec_duration = records.codec_batch_duration.labels(namespace, op)
        self._codec_records = records.codec_records.labels(namespace, op)
        self._latency = records.relay_latency_seconds.labels(namespace)
        self._dead_letters: dict[str, Counter] = {
            stage: records.dead_letters.labels(namespace, stage) for stage in DEAD_LETTER_STAGES
        }
        self._training: dict[str, Counter] = {
            result: training.training_runs.labels(namespace, result) for result in TRAINING_RESULTS
        }
        self._training_duration = training.training_duration.labels(namespace)
        self._training_cpu = training.training_cpu_seconds.labels(namespace)
        self._triggers: dict[str, Counter] = {
            trigger: training.training_triggers.labels(namespace, trigger)
            for trigger in TRAINING_TRIGGERS
        }
        self._trainer_metric = training.trainer
        # No zdict_trainer series until the trainer decides (`set_trainer`): a process that
        # never trains (training disabled, pass-through, decoding) must not export a 0 that
        # ZdictTrainerNotUnique would count as "nobody trains this topic".
        self._trainer: Gauge | None = None
        self._live_factor = training.live_compression_factor
        self._pinned = training.pinned
        self._skipped = training.training_skipped
        self._last_training = training.last_training
        self._last_training_labels: tuple[str, str] | None = None
        self._sample_bytes = training.sample_bytes.labels(namespace)
        self._sample_records = training.sample_records.labels(namespace)

    def observe_batch(self, encoded: Sequence[Transformed], encode_seconds: float) -> None:
        """Count one encoded (or decoded) batch: outcomes, bytes in and out, and the codec's
        time over it.

        `encode_seconds` is the wall time of the codec over the whole batch: one observation
        of `zdict_codec_batch_duration_seconds`, its records added to `zdict_codec_records_total`
        (observing every record would cost more than compressing it). An empty batch is not
        observed.
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

        Costs nothing per record: for callers that tally outcomes and bytes themselves.
        """
        records = 0
        children = self._outcomes
        for outcome, count in outcomes.items():
            if not count:
                continue
            child = children.get(outcome)
            if child is None:  # an outcome the codec added after this module was written
                child = children[outcome] = self._records.labels(self.name, self._op, outcome)
            child.inc(count)
            records += count
        if not records:
            return
        self._input.inc(input_bytes)
        self._output.inc(output_bytes)
        self._codec_duration.observe(encode_seconds)
        self._codec_records.inc(records)

    def observe_raw(self, records: int, size: int) -> None:
        """`records` written raw (the output mode), `size` bytes of values: outcome `raw`, the
        same bytes in and out. Not in the codec's time: they were not encoded."""
        if not records:
            return
        child = self._outcomes.get(Outcome.RAW)
        if child is None:  # registered with other outcomes (a decoding relay never goes raw)
            child = self._outcomes[Outcome.RAW] = self._records.labels(
                self.name, self._op, Outcome.RAW
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
        self._training_duration.observe(seconds)
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
        run's is replaced; a run skipped because the topic is pinned is `result="skipped"`.
        Unknown trigger or decision values are labelled `other`, so a record
        written by another version cannot add series without bound; a record without a
        numeric `finished_at` is ignored.
        """
        finished_at = run.get("finished_at")
        if not isinstance(finished_at, int | float) or isinstance(finished_at, bool):
            return
        trigger, result = run.get("trigger"), run.get("decision")
        labels = (
            trigger if trigger in (*TRAINING_TRIGGERS, MANUAL_TRIGGER) else OTHER_REASON,
            result if result in LAST_TRAINING_RESULTS else OTHER_REASON,
        )
        previous, self._last_training_labels = self._last_training_labels, labels
        if previous is not None and previous != labels:
            remove_series(self._last_training, self.name, *previous)
        self._last_training.labels(self.name, *labels).set(float(finished_at))

    def set_pinned(self, pinned: bool) -> None:
        """Whether an operator pinned the topic's dictionary (`zdict_namespace_pinned`)."""
        self._pinned.labels(self.name).set(1 if pinned else 0)

    def training_skipped(self, reason: str) -> None:
        """A training run was due and not started because of `reason` (`pinned`)."""
        self._skipped.labels(self.name, reason).inc()

    def set_trainer(self, trainer: bool) -> None:
        """Whether this process trains the topic (it holds partition 0 of it)."""
        if self._trainer is None:
            self._trainer = self._trainer_metric.labels(self.name)
        self._trainer.set(1 if trainer else 0)

    def set_live_ratio(self, ratio: float | None) -> None:
        """The compression factor (raw / output bytes) over the drift window,
        `zdict_live_compression_factor`; None (too little traffic to judge) removes it."""
        if ratio is None:
            remove_series(self._live_factor, self.name)
        else:
            self._live_factor.labels(self.name).set(ratio)

    def dead_letter(self, stage: str) -> None:
        """One record set aside to the dead-letter topic at `stage` (encode, decode, produce)."""
        self._dead_letters[stage].inc()

    def set_sample(self, size_bytes: int, records: int) -> None:
        """What the topic's reservoir holds: bytes (with bookkeeping) and values (one a record)."""
        self._sample_bytes.set(size_bytes)
        self._sample_records.set(records)
