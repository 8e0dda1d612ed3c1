"""One retirement run against the cluster, for `dicts retire` and the training CronJob
(`ZDICT_TRAINING__RETIRE`): the registry as read, each named topic's retention (DescribeConfigs)
and its offsets at the namespace's cutoff, the verdicts (`sidecar.dictionaries.retirement`,
pure), and when applied the dictionaries retired (`Registry.retire`) and their files removed from
the local store."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from sidecar.config import Settings
from sidecar.dictionaries.model import DictionaryMeta, utc_now
from sidecar.dictionaries.registry import Registry
from sidecar.dictionaries.retirement import (
    RETENTION_SETTINGS,
    PartitionSpan,
    Retention,
    TopicRecords,
    Verdict,
    cutoff,
    judge,
)
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import StoreError
from sidecar.kafka import make_admin, make_reader, offsets_since, topic_settings
from sidecar.logs import get_logger

log = get_logger(__name__)

#: The bounds `dicts retire` defaults to, and the training CronJob's retirement uses.
OLDER_THAN: Final = timedelta(days=30)
MARGIN: Final = timedelta(hours=1)


@dataclass(slots=True)
class Retirement:
    """What one run judged and did."""

    verdicts: list[Verdict]
    #: Retired now (empty in a dry run).
    retired: list[DictionaryMeta] = field(default_factory=list)
    #: Of those, the ones whose files were in the local store and were removed.
    removed: list[DictionaryMeta] = field(default_factory=list)


def configured_namespace_topics(settings: Settings) -> dict[str, list[str]]:
    """The topics holding records of each namespace the configuration compresses: an encoding
    relay's input topic and its output topic, each proxied topic itself."""
    topics: dict[str, list[str]] = {}
    if settings.relay.mode == "encode":
        for topic in settings.relay.input_topics:
            topics.setdefault(topic, []).extend([topic, settings.relay.output_for(topic)])
    for topic in settings.proxy.topics:
        topics.setdefault(topic, []).append(topic)
    return {ns: list(dict.fromkeys(named)) for ns, named in topics.items()}


def retire(
    settings: Settings,
    registry: Registry,
    topics: Mapping[str, Sequence[str]],
    *,
    older_than: timedelta = OLDER_THAN,
    margin: timedelta = MARGIN,
    store: DictionaryStore | None = None,
) -> Retirement:
    """Judge every dictionary of `registry` (`topics`: per namespace, the topics holding its
    records); with `store`, apply: retire those that can go and remove their files from it.

    Raises:
        KafkaUnavailable: a named topic's settings or offsets could not be read.
        TopicMissing: a named topic does not exist.
        RegistryUnavailable: the registry did not take the tombstones.
    """
    registry.refresh()
    state = registry.state
    activations = dict(state.activations)
    cutoffs = {ns: cutoff(a, margin) for ns, a in activations.items()}
    named = _topic_records(settings, topics, cutoffs)
    verdicts = judge(state.versions(), activations, named, utc_now(), older_than, margin)
    done = Retirement(verdicts)
    if store is not None:
        done.retired = registry.retire([v.meta for v in verdicts if v.retire])
        done.removed = [m for m in done.retired if _removed(store, m)]
    log.info(
        "dictionaries_retired" if store is not None else "dictionaries_judged",
        topic=registry.topic,
        dictionaries=len(verdicts),
        retirable=sum(v.retire for v in verdicts),
        retired=len(done.retired),
        removed_from_store=len(done.removed),
    )
    return done


def _topic_records(
    settings: Settings, topics: Mapping[str, Sequence[str]], cutoffs: Mapping[str, datetime]
) -> dict[str, list[TopicRecords]]:
    """Per namespace with an activation, its topics' retention and, where retention takes
    records at all, their partitions at the namespace's cutoff."""
    wanted = {ns: named for ns, named in topics.items() if ns in cutoffs}
    every = sorted({t for named in wanted.values() for t in named})
    if not every:
        return {}
    timeout = settings.registry.timeout
    described = topic_settings(make_admin(settings), every, RETENTION_SETTINGS, timeout)
    retention = {topic: Retention.of(values) for topic, values in described.items()}
    found: dict[str, list[TopicRecords]] = {}
    reader = make_reader(settings, "retire")
    try:
        for namespace, named in wanted.items():
            at_ms = int(cutoffs[namespace].timestamp() * 1000)
            found[namespace] = [
                TopicRecords(
                    topic,
                    retention[topic],
                    ()
                    if retention[topic].never is not None
                    else tuple(
                        PartitionSpan(topic, partition, low, since)
                        for partition, low, since in offsets_since(reader, topic, at_ms, timeout)
                    ),
                )
                for topic in named
            ]
    finally:
        reader.close()
    return found


def _removed(store: DictionaryStore, meta: DictionaryMeta) -> bool:
    """Remove a retired dictionary's files from `store`; whether they were there."""
    try:
        return store.remove(meta.namespace, meta.id)
    except StoreError as exc:
        log.warning(
            "store_retirement_failed", namespace=meta.namespace, dict_id=meta.id, error=str(exc)
        )
        return False
