"""Which dictionaries of the registry no record can name any more: what `dicts retire` lists.
Pure: the cluster's answers come in as `PartitionSpan`s.

A dictionary D of namespace N may go when all of these hold:

1. It is neither N's active dictionary nor in N's rollback stack (`rollback` could bring it
   back), and N has an activation (without one, when D was last used is unknown).
2. It was created before the operator's `older_than`.
3. No record still present in a topic of N can name it. D is not in N's stack, so it is not the
   dictionary the current activation replaced: it was last active before that activation's
   time `at`, and a producer that had not switched yet (the follow interval, a clock's skew)
   wrote with it at most `margin` later: the *cutoff*. A partition holds no record written
   before the cutoff when its oldest offset present is at or past the first offset written at or
   after the cutoff (Kafka's offsets by time; the end of the partition when every record is
   older). Every partition of every topic the operator names for N must say so: a compacted
   topic, or one whose retention still keeps those records, never does, and a namespace with no
   topic named keeps every dictionary.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sidecar.dictionaries.model import DictionaryMeta
from sidecar.dictionaries.registry_state import Activation


@dataclass(frozen=True, slots=True)
class PartitionSpan:
    """One partition of a topic, as the cluster answers for a namespace's cutoff."""

    topic: str
    partition: int
    #: The oldest offset still present.
    low: int
    #: The first offset written at or after the cutoff (the partition's end if none was).
    since: int

    @property
    def older_gone(self) -> bool:
        """Whether every record written before the cutoff is gone."""
        return self.low >= self.since


@dataclass(frozen=True, slots=True)
class Verdict:
    """One dictionary: whether it can be retired, and why (or why not)."""

    meta: DictionaryMeta
    retire: bool
    reason: str


def cutoff(activation: Activation, margin: timedelta) -> datetime:
    """The time after which no record names a dictionary of the namespace that is neither
    active nor in its stack (see the module)."""
    return activation.at + margin


def judge(
    metas: Iterable[DictionaryMeta],
    activations: Mapping[str, Activation],
    spans: Mapping[str, Sequence[PartitionSpan]],
    now: datetime,
    older_than: timedelta,
) -> list[Verdict]:
    """A verdict for each dictionary of `metas`; `spans`: per namespace, every partition of the
    topics named for it, at the namespace's `cutoff` (a namespace absent: no topic named)."""
    verdicts = []
    for meta in metas:
        activation = activations.get(meta.namespace)
        keep = _kept_by_registry(meta, activation, now, older_than)
        if keep is None:
            keep = _kept_by_topics(meta.namespace, spans.get(meta.namespace, ()))
        verdicts.append(Verdict(meta, keep is None, keep or _gone(spans[meta.namespace])))
    return verdicts


def _kept_by_registry(
    meta: DictionaryMeta, activation: Activation | None, now: datetime, older_than: timedelta
) -> str | None:
    if activation is None:
        return "its namespace has no activation: when it was last used is unknown"
    if activation.dict_id == meta.id:
        return "active"
    if meta.id in activation.stack:
        return "in the rollback stack"
    if meta.created_at > now - older_than:
        return f"created {meta.created_at:%Y-%m-%d %H:%M} UTC, within --older-than"
    return None


def _kept_by_topics(namespace: str, spans: Sequence[PartitionSpan]) -> str | None:
    if not spans:
        return f"no topic named for namespace {namespace} (--topic {namespace}=TOPIC)"
    kept = [s for s in spans if not s.older_gone]
    if kept:
        first = kept[0]
        return (
            f"{first.topic}[{first.partition}] still holds records from before the cutoff "
            f"(offsets {first.low}..{first.since - 1})"
            + (f" and {len(kept) - 1} more partitions" if len(kept) > 1 else "")
        )
    return None


def _gone(spans: Sequence[PartitionSpan]) -> str:
    topics = sorted({s.topic for s in spans})
    return f"no record from before the cutoff left in {', '.join(topics)}"
