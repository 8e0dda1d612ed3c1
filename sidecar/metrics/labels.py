"""The bounded values of the metrics' labels, and the removal of a series that may not exist.

Every label value a metric of `sidecar.metrics` can carry is one of these (or a topic, a
partition, a consumer group, or a reason from a bounded set), so no label grows with traffic.
"""

from __future__ import annotations

import contextlib
from typing import Final

from prometheus_client import Counter, Gauge

from sidecar.training.params import Decision, Trigger

__all__ = [
    "COMMIT_FAILED",
    "COMMIT_OK",
    "DEAD_LETTER_STAGES",
    "DECODE",
    "ENCODE",
    "MANUAL_TRIGGER",
    "OTHER_REASON",
    "TRAINING_RESULTS",
    "TRAINING_TRIGGERS",
    "remove_series",
]

#: Values of the `op` label: what the codec did to the records, the relay's direction.
ENCODE: Final = "encode"
DECODE: Final = "decode"
#: Values of the `result` label of `zdict_commits_total` and `zdict_registry_publications_total`.
COMMIT_OK: Final = "ok"
COMMIT_FAILED: Final = "failed"
#: Values of the `result` label of `zdict_training_runs_total`.
TRAINING_RESULTS: Final = tuple(d.value for d in Decision)
#: Values of the `trigger` label of `zdict_training_triggers_total`.
TRAINING_TRIGGERS: Final = tuple(t.value for t in Trigger)
#: The trigger `zdict-sidecar train` records for its runs (the retraining CronJob's).
MANUAL_TRIGGER: Final = "manual"
#: Values of the `stage` label of `zdict_dead_letters_total` (the relay's `zdict.error.stage`
#: header: `sidecar.relay.dead_letters`).
DEAD_LETTER_STAGES: Final = ("encode", "decode", "produce")
#: The label value of whatever falls outside a bounded set (an unknown reason, trigger, result).
OTHER_REASON: Final = "other"


def remove_series(metric: Gauge | Counter, *labelvalues: str) -> None:
    """Remove the child of `metric` with `labelvalues`; none is no error."""
    with contextlib.suppress(KeyError):
        metric.remove(*labelvalues)
