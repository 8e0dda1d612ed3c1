"""Reading one dictionary record of the registry topic again, by its offset: how a registry
reader gets the bytes of a dictionary it keeps only the metadata of.

The topic is compacted, so offsets never move: one record is fetched by a consumer of its own
that reads one batch (a registry batch holds one record) and nothing ahead, then verified
again. A record at that offset that is not the dictionary means that whoever said where it was
(the index) disagrees with the registry: the registry is then searched for the dictionary's
record from its start (`registry_index_disagrees`, one line).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final, cast

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from sidecar.config import Settings
from sidecar.dictionaries.model import Dictionary, DictionaryMeta
from sidecar.dictionaries.registry_state import (
    DictionaryAdded,
    Headers,
    RegistryState,
    dictionary_key_of,
)
from sidecar.errors import DictionaryIntegrityError, RegistryUnavailable, UnknownDictionary
from sidecar.kafka import is_partition_eof, is_topic_settling, make_reader
from sidecar.logs import get_logger

log = get_logger(__name__)

#: The consumer that reads one dictionary record again: librdkafka fetches at least one batch
#: whatever the limits (a registry batch holds one record), and queues nothing more.
FETCH_ONE: Final = {
    "fetch.max.bytes": "1000",  # librdkafka's least: no less than message.max.bytes
    "message.max.bytes": "1000",
    "max.partition.fetch.bytes": "1",
    "queued.max.messages.kbytes": "1",
    # One record fills the 1 KB queue, and librdkafka then postpones the partition's
    # next fetch by fetch.queue.backoff.ms (1 s by default): the next dictionary
    # fetched on first sight could wait that long (1.002 s in one bench run of three).
    "fetch.queue.backoff.ms": "10",
}
#: Records read at a time when the registry is searched.
SEARCH_BATCH: Final = 500

#: A record's key, value and headers, counted in the reader's bytes read.
Counted = Callable[[Message], tuple[bytes | None, bytes | None, Headers]]


def end_offset(topic: str, reader: Consumer, tp: TopicPartition, deadline: float) -> int:
    """The end offset of registry (or index) topic `topic` through `reader`, waiting out a
    topic another instance has just created.

    Raises:
        RegistryUnavailable: the broker refused, or did not answer by `deadline`.
    """
    while True:
        remaining = deadline - time.monotonic()
        try:
            _, high = reader.get_watermark_offsets(
                tp, timeout=max(0.1, min(remaining, 5.0)), cached=False
            )
            return int(high)
        except KafkaException as exc:
            error = exc.args[0]
            settling = error.retriable() or is_topic_settling(error)
            if not settling or remaining <= 0:
                raise RegistryUnavailable(
                    f"registry topic {topic} cannot be read: {error.str()}"
                ) from None
        time.sleep(0.2)


class RecordFetcher:
    """Reads dictionary records of one registry topic again (see the module). Thread-safe."""

    def __init__(
        self,
        settings: Settings,
        topic: str,
        timeout: float,
        counted: Counted,
        end: Callable[[float], int],
    ) -> None:
        """`counted` counts what is read; `end(deadline)` is the registry topic's end offset."""
        self.settings = settings
        self.topic = topic
        self.timeout = timeout
        self._counted = counted
        self._end = end
        self._fetcher: Consumer | None = None
        self._lock = threading.Lock()

    def fetch(self, offset: int, meta: DictionaryMeta) -> tuple[Dictionary, int]:
        """The dictionary `meta` of the record at `offset`, read again and verified, and the
        offset its record was found at (another one when `offset` was wrong).

        Raises:
            RegistryUnavailable: not read within `timeout`.
            UnknownDictionary: no record of the registry is that dictionary any more.
        """
        with self._lock:
            if self._fetcher is None:
                # One batch per fetch (ours hold one record), nothing read ahead.
                self._fetcher = make_reader(self.settings, "registry-fetch", FETCH_ONE)
            fetcher = self._fetcher
            fetcher.assign([TopicPartition(self.topic, 0, offset)])
            try:
                msg = self._one_record(fetcher, offset)
            finally:
                fetcher.unassign()
            key, value, _ = self._counted(msg)
        if msg.offset() != offset or value is None or key != dictionary_key_of(meta):
            return self._search(meta, offset, msg.offset())
        try:
            dictionary = Dictionary.verified(meta, value, f"registry offset {offset}")
        except DictionaryIntegrityError as exc:  # the topic was rewritten under us
            raise UnknownDictionary(str(exc)) from None
        log.info("dictionary_fetched", topic=self.topic, dict_id=meta.id, offset=offset)
        return dictionary, offset

    def _one_record(self, fetcher: Consumer, offset: int) -> Message:
        """The first record at or after `offset`."""
        deadline = time.monotonic() + self.timeout
        while (remaining := deadline - time.monotonic()) > 0:
            for msg in fetcher.consume(1, min(remaining, 1.0)):
                err = msg.error()
                if err is None:
                    return msg
                if not is_partition_eof(err):
                    raise RegistryUnavailable(f"registry topic {self.topic}: {err.str()}")
        raise RegistryUnavailable(
            f"registry topic {self.topic}: the record at offset {offset} was not read within "
            f"{self.timeout:.0f} s"
        )

    def _search(
        self, meta: DictionaryMeta, offset: int, found: int | None
    ) -> tuple[Dictionary, int]:
        """The dictionary `meta` whose record is not at `offset` (the record at `found` is
        another): the registry is read from its start for it."""
        log.warning(
            "registry_index_disagrees",
            topic=self.topic,
            dict_id=meta.id,
            offset=offset,
            found_offset=found,
            detail="the record is searched for in the registry; zdict-sidecar dicts reindex "
            "rewrites the index",
        )
        wanted = dictionary_key_of(meta)
        searcher = RegistryState()
        tp = TopicPartition(self.topic, 0)
        deadline = time.monotonic() + self.timeout
        high = self._end(deadline)
        reader = make_reader(self.settings, "registry-search")
        try:
            reader.assign([TopicPartition(self.topic, 0, 0)])
            while searcher.position < high:
                if time.monotonic() > deadline:
                    raise RegistryUnavailable(
                        f"registry topic {self.topic}: dictionary {meta.id} not found up to "
                        f"offset {searcher.position} of {high} within {self.timeout:.0f} s"
                    )
                messages = reader.consume(min(SEARCH_BATCH, high - searcher.position), 0.05)
                for msg in messages:
                    if msg.error() is not None:
                        continue
                    key, value, headers = self._counted(msg)
                    at = cast(int, msg.offset())
                    searcher.position = at + 1
                    if key != wanted:
                        continue
                    event = searcher.apply(at, key, value, headers)
                    if isinstance(event, DictionaryAdded) and event.dictionary.meta == meta:
                        return event.dictionary, at
                if not messages:  # compaction can leave the last offsets empty
                    searcher.position = max(searcher.position, reader.position([tp])[0].offset)
        finally:
            reader.close()
        raise UnknownDictionary(
            f"dictionary {meta.id}: no record of it in registry topic {self.topic} (deleted)"
        )

    def close(self) -> None:
        with self._lock:
            if self._fetcher is not None:
                self._fetcher.close()
                self._fetcher = None
