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
   older). Every partition of every topic named for N must say so, and a namespace with no
   topic named keeps every dictionary. A topic's `Retention` (its settings, as the cluster
   states them) says when that can be: never for a compacted topic (compaction keeps a record
   per key) or one kept forever, whose offsets are not even asked for; otherwise by
   `retention.ms` after the cutoff, the date a verdict names while the records are there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

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
class Retention:
    """A topic's deletion settings, as DescribeConfigs states them."""

    cleanup_policy: str
    #: -1: no limit.
    retention_ms: int
    retention_bytes: int

    @classmethod
    def of(cls, settings: Mapping[str, str]) -> Retention:
        """From `cleanup.policy`, `retention.ms` and `retention.bytes` (`RETENTION_SETTINGS`)."""
        return cls(
            settings["cleanup.policy"],
            int(settings["retention.ms"]),
            int(settings["retention.bytes"]),
        )

    @property
    def never(self) -> str | None:
        """Why the topic's records are never taken (None: by time or size they are)."""
        if "delete" not in self.cleanup_policy.replace(" ", "").split(","):
            return f"cleanup.policy={self.cleanup_policy}: compaction keeps a record per key"
        if self.retention_ms < 0 and self.retention_bytes < 0:
            return "retention.ms and retention.bytes are -1: records are kept forever"
        return None


#: The topic settings a `Retention` is read from.
RETENTION_SETTINGS: Final = ("cleanup.policy", "retention.ms", "retention.bytes")


@dataclass(frozen=True, slots=True)
class TopicRecords:
    """A topic named for a namespace: its retention, and its partitions at the namespace's
    cutoff (none asked for when the retention never takes a record)."""

    topic: str
    retention: Retention
    spans: tuple[PartitionSpan, ...] = ()


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
    topics: Mapping[str, Sequence[TopicRecords]],
    now: datetime,
    older_than: timedelta,
    margin: timedelta,
) -> list[Verdict]:
    """A verdict for each dictionary of `metas`; `topics`: per namespace, the topics named for
    it (a namespace absent: none), each at the namespace's `cutoff` with `margin`."""
    verdicts = []
    for meta in metas:
        activation = activations.get(meta.namespace)
        keep = _kept_by_registry(meta, activation, now, older_than)
        named = topics.get(meta.namespace, ())
        if keep is None:
            assert activation is not None
            keep = _kept_by_topics(meta.namespace, named, cutoff(activation, margin))
        verdicts.append(Verdict(meta, keep is None, keep or _gone(named)))
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


def _kept_by_topics(namespace: str, named: Sequence[TopicRecords], since: datetime) -> str | None:
    if not named:
        return f"no topic named for namespace {namespace} (--topic {namespace}=TOPIC)"
    for topic in named:
        if topic.retention.never is not None:
            return f"{topic.topic}: {topic.retention.never}"
    for topic in named:
        kept = [s for s in topic.spans if not s.older_gone]
        if kept:
            first = kept[0]
            return (
                f"{first.topic}[{first.partition}] still holds records from before the cutoff "
                f"(offsets {first.low}..{first.since - 1})"
                + (f" and {len(kept) - 1} more partitions" if len(kept) > 1 else "")
                + _expected(topic.retention, since)
            )
    return None


def _expected(retention: Retention, since: datetime) -> str:
    """When retention takes the records from before the cutoff, as far as time tells."""
    if retention.retention_ms < 0:
        return "; only retention.bytes takes them"
    due = since + timedelta(milliseconds=retention.retention_ms)
    return f"; retention.ms takes them from {due:%Y-%m-%d %H:%M} UTC"


def _gone(named: Sequence[TopicRecords]) -> str:
    topics = sorted({t.topic for t in named})
    return f"no record from before the cutoff left in {', '.join(topics)}"
