"""The registry's index topic through Kafka clients: read at a reader's start, written after
every publication, rebuilt after a restore.

Beside the registry topic T, a compacted topic `T-index` (created with it) holds what a start
needs without the dictionaries' bytes: per dictionary its metadata and the offset of its record
(`dictionary/<id>/<sha256>`), each namespace's activation and training entry with the offset of
the registry record it copies, and `through`: the registry offset below which every record is
in the index, with the highest id ever claimed. Every publication brings the index up to what
the publisher has read (`IndexTopic.write`, after the registry record is acknowledged; best
effort). A start (`Registry.load`) reads the index, then the registry from `through` to its
end, applying those records as always: a record the index lacks (a writer that crashed in
between, or one of a version before the index) is read there. The rules that make every reader
agree: the last `through` read counts (compaction keeps only the latest, which may be a slower
writer's lower one: reading more of the registry is harmless); an activation or a training
entry replaces one only if its registry offset is higher; a dictionary entry is the first claim
of its id (only winners are indexed); the highest claimed id survives compaction and tombstones
in `through`, so ids are never reused. Migration needs no flag day: the registry topic's records
are unchanged, so a reader of an earlier version reads it as before; a reader of this version
on a registry without an index reads it whole, and the first publication of a writer of this
version indexes everything it read.

An index that disagrees with its registry. Every index record names the registry topic's id
(the cluster gives a topic a new one whenever it is created again): after a restore (`dicts
import` into a registry topic created anew) the index's records are of the topic that was lost,
and a reader ignores them (`registry_index_stale`, one line) and reads the registry whole;
`rebuild` (run by `dicts import`, and by `dicts reindex`) writes the index of the registry as
it is and tombstones the lost topic's records. An entry is trusted until its record is fetched;
the fetch checks the record is that dictionary, and if it is not, the registry is searched for
it (`registry_index_disagrees`, one line) and the index is written again by this process's next
publication.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Final, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from sidecar.config import Settings
from sidecar.dictionaries.registry_state import (
    FORMAT,
    FORMAT_HEADER,
    INDEX_SUFFIX,
    Headers,
    Ignored,
    RegistryState,
    index_records,
)
from sidecar.errors import RegistryUnavailable
from sidecar.kafka import is_partition_eof, make_admin, make_reader, topic_id
from sidecar.logs import get_logger

log = get_logger(__name__)

#: Records read from the index at a time.
READ_BATCH: Final = 500

#: An index record to produce: key, value (None: a tombstone), headers.
IndexRecord = tuple[bytes, bytes | None, list[tuple[str, str | bytes | None]]]
#: A record's key, value and headers, counted in the registry's bytes read.
Counted = Callable[[Message], tuple[bytes | None, bytes | None, Headers]]
#: The end offset of a partition through a consumer, by a deadline.
EndOffset = Callable[[Consumer, TopicPartition, float], int]


class IndexTopic:
    """The index topic of one registry topic (see the module): what this process read of it and
    wrote to it."""

    def __init__(self, settings: Settings, registry_topic: str) -> None:
        self.settings = settings
        self.topic = registry_topic + INDEX_SUFFIX
        self.registry_topic = registry_topic
        #: Whether the index topic is there to write to (never produced to otherwise: a broker
        #: would create it with its defaults).
        self.exists = False
        #: The registry topic's id, as the cluster gave it (None: not known, nothing written).
        self.registry_id: str | None = None
        #: The registry offset up to which this process wrote the index, and what it wrote of
        #: each activation and training entry.
        self.written_through = 0
        self._written: dict[bytes, object] = {}
        #: Keys of index records `rebuild` tombstones unless it writes them again: those of
        #: another registry topic, and every key read by a `load` that keeps them.
        self._dropped: set[bytes] = set()

    def load(
        self,
        state: RegistryState,
        ends: Consumer,
        deadline: float,
        end_offset: EndOffset,
        counted: Counted,
        *,
        keep_keys: bool = False,
    ) -> None:
        """Apply the index topic, if there is one, to `state`; `ends` learns its end offset.
        `keep_keys`: note every key read, for `rebuild` to tombstone those it does not write."""
        remaining = max(0.1, deadline - time.monotonic())
        try:
            topic = ends.list_topics(self.topic, timeout=remaining).topics.get(self.topic)
        except KafkaException:
            return
        if topic is None or topic.error is not None or not topic.partitions:
            return
        self.registry_id = topic_id(make_admin(self.settings), self.registry_topic, remaining)
        if self.registry_id is None:  # which registry topic the index is of cannot be told
            log.warning(
                "registry_index_not_read",
                topic=self.topic,
                registry_topic=self.registry_topic,
                reason="the registry topic's id could not be described (Describe ACL?)",
            )
            return
        self.exists = True
        ends.incremental_assign([TopicPartition(self.topic, 0)])
        ends.pause([TopicPartition(self.topic, 0)])
        high = end_offset(ends, TopicPartition(self.topic, 0), deadline)
        if high > 0:
            self._read(state, high, deadline, counted, keep_keys)
        self.written_through = state.index_through
        if state.index_stale and state.index_through == 0:
            # Only records of another registry topic (not yet rewritten by `rebuild`, whose
            # tombstones take the rest away as the topic is compacted).
            log.warning(
                "registry_index_stale",
                topic=self.topic,
                records=state.index_stale,
                registry_topic=self.registry_topic,
                detail="index records of another registry topic (one restored or created "
                "again) are ignored and the registry is read after what the index covers; "
                "zdict-sidecar dicts reindex rewrites the index",
            )

    def _read(
        self, state: RegistryState, high: int, deadline: float, counted: Counted, keep_keys: bool
    ) -> None:
        assert self.registry_id is not None
        reader = make_reader(self.settings, "registry-index")
        try:
            reader.assign([TopicPartition(self.topic, 0, 0)])
            position = 0
            while position < high:
                if time.monotonic() > deadline:
                    raise RegistryUnavailable(
                        f"registry index topic {self.topic}: read up to offset {position} of "
                        f"{high} in time (ZDICT_REGISTRY__TIMEOUT)"
                    )
                messages = reader.consume(min(READ_BATCH, high - position), 0.05)
                for msg in messages:
                    err = msg.error()
                    if err is not None:
                        if not is_partition_eof(err):
                            raise RegistryUnavailable(
                                f"registry index topic {self.topic}: {err.str()}"
                            )
                        continue
                    key, value, _ = counted(msg)
                    offset = cast(int, msg.offset())
                    position = offset + 1
                    stale = state.index_stale
                    event = state.apply_index(offset, key, value, self.registry_id)
                    if key is not None and (keep_keys or state.index_stale > stale):
                        self._dropped.add(key)
                    if isinstance(event, Ignored):
                        log.warning(
                            "registry_index_record_ignored",
                            topic=self.topic,
                            offset=offset,
                            key=event.key,
                            reason=event.reason,
                        )
                if not messages:
                    at = reader.position([TopicPartition(self.topic, 0)])[0].offset
                    position = max(position, at)
        finally:
            reader.close()

    def write(self, state: RegistryState, producer: Producer, timeout: float) -> None:
        """Bring the index topic up to what `state` has read of the registry. Best effort: an
        index that lags costs a reader's start only a longer read of the registry."""
        if not self.exists or self.registry_id is None:
            return
        records, through = index_records(
            state, self.written_through, self._written, self.registry_id
        )
        if self._send(producer, records, timeout):
            self.written_through = through

    def rebuild(self, state: RegistryState, producer: Producer, timeout: float) -> int:
        """Write the index of everything `state` holds again, and tombstone the other keys read
        (see `load`); returns how many records were written.

        Raises:
            RegistryUnavailable: the index topic did not take them.
        """
        if not self.exists or self.registry_id is None:
            raise RegistryUnavailable(
                f"registry index topic {self.topic} does not exist: create it as the registry "
                "topic is (ZDICT_REGISTRY__CREATE=true creates it)"
            )
        self.forget_written()
        records, through = index_records(state, 0, self._written, self.registry_id)
        written = {key for key, _, _ in records}
        tombstones: list[IndexRecord] = [
            (key, None, [(FORMAT_HEADER, FORMAT)]) for key in sorted(self._dropped - written)
        ]
        if not self._send(producer, [*records, *tombstones], timeout):
            raise RegistryUnavailable(
                f"registry index topic {self.topic}: not every record was acknowledged within "
                f"{timeout:.0f} s (ZDICT_REGISTRY__TIMEOUT)"
            )
        self.written_through = through
        self._dropped.clear()
        return len(records) + len(tombstones)

    def retire(self, keys: Sequence[bytes], producer: Producer, timeout: float) -> None:
        """Tombstone the index records of retired dictionaries (`keys`: their registry keys),
        so that a start that reads the index forgets them too.

        Raises:
            RegistryUnavailable: the index topic did not take them.
        """
        if not self.exists or self.registry_id is None:
            return
        tombstones: list[IndexRecord] = [(key, None, [(FORMAT_HEADER, FORMAT)]) for key in keys]
        if not self._send(producer, tombstones, timeout):
            raise RegistryUnavailable(
                f"registry index topic {self.topic}: the retirements were not all acknowledged "
                f"within {timeout:.0f} s; zdict-sidecar dicts reindex writes the index anew"
            )

    def forget_written(self) -> None:
        """Write every entry again at the next `write` (the index was found to disagree)."""
        self.written_through = 0
        self._written.clear()

    def _send(self, producer: Producer, records: Sequence[IndexRecord], timeout: float) -> bool:
        """Produce `records` to the index topic; whether every one was acknowledged."""
        failed: list[str] = []

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                failed.append(err.str())

        try:
            for key, value, headers in records:
                producer.produce(
                    self.topic, key=key, value=value, headers=headers, on_delivery=delivered
                )
            left = producer.flush(timeout)
        except (KafkaException, BufferError) as exc:
            failed.append(str(exc))
            left = 0
        if failed:
            log.warning("registry_index_not_written", topic=self.topic, error=failed[0])
        return left == 0 and not failed
