"""The registry topic through Kafka clients: `Registry` reads it to its end and publishes to it;
`RegistryResolver` finds a `Decoder`'s dictionaries in it.

What the records are, and how every reader applies them, is `sidecar.dictionaries.registry_state`
(pure). A dictionary is published (acknowledged with acks=all) before anything that references
it: its activation, then the local store, then the encoder.

The index. Beside the registry topic T, a compacted topic `T-index` (created with it) holds
what a start needs without the dictionaries' bytes: per dictionary its metadata and the offset
of its record (`dictionary/<id>/<sha256>`), each namespace's activation and training entry with
the offset of the registry record it copies, and `through`: the registry offset below which
every record is in the index, with the highest id ever claimed. Every publication brings the
index up to what the publisher has read (`_write_index`, after the registry record is
acknowledged; best effort). A start (`load`) reads the index, then the registry from `through`
to its end, applying those records as always: a record the index lacks (a writer that crashed
in between, or one of a version before the index) is read there. The rules that make every
reader agree: the last `through` read counts (compaction keeps only the latest, which may be a
slower writer's lower one: reading more of the registry is harmless); an activation or a
training entry replaces one only if its registry offset is higher; a dictionary entry is the
first claim of its id (only winners are indexed); the highest claimed id survives compaction
and tombstones in `through`, so ids are never reused. Migration needs no flag day: the registry
topic's records are unchanged, so a reader of an earlier version reads it as before; a reader
of this version on a registry without an index reads it whole, and the first publication of a
writer of this version indexes everything it read.

What a reader holds. Its start verifies every dictionary record it reads but keeps only each
dictionary's metadata and the offset of its record: a reader's memory does not grow with the
registry's history. The bytes of a dictionary are read again when it is
first asked for (a namespace's active one, an id a record names): one record fetched by its
offset by a consumer of its own (`_fetch`; the topic is compacted, offsets never move), verified
again, then kept in a cache bounded by `registry.cache_bytes`, least recently used out first.
A dictionary published after the start is kept as it is read: it is about to be used. The end
offset is asked for by a consumer that fetches nothing (paused), so that the query does not
queue behind the reader's long-polling Fetch.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, Final, Protocol, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # public, not in __all__

from sidecar.config import KafkaSettings, RegistrySettings, Settings
from sidecar.dictionaries.model import Dictionary, DictionaryMeta, utc_now, with_new_id
from sidecar.dictionaries.registry_state import (
    FORMAT,
    FORMAT_HEADER,
    INDEX_SUFFIX,
    Action,
    Activation,
    Event,
    Headers,
    Ignored,
    Pin,
    RegistryState,
    activation_record,
    dictionary_key_of,
    dictionary_record,
    index_records,
    training_record,
)
from sidecar.errors import (
    DictionaryIntegrityError,
    DictionaryNotFound,
    KafkaUnavailable,
    NamespacePinned,
    RegistryError,
    RegistryUnavailable,
    UnknownDictionary,
    ZdictError,
)
from sidecar.kafka import (
    is_partition_eof,
    is_topic_already_exists,
    is_topic_settling,
    make_admin,
    make_reader,
    make_writer,
    partition_counts,
)
from sidecar.logs import get_logger

log = get_logger(__name__)

DEFAULT_TOPIC: Final = "_zdict_dictionaries"
#: Topic settings for a registry we create. Dictionaries of up to 1 MiB plus metadata must fit.
TOPIC_CONFIG: Final = {"cleanup.policy": "compact", "max.message.bytes": str(2 * 1024 * 1024)}
#: Earlier active ids kept in an activation (how far `rollback` can go back).
STACK_DEPTH: Final = 32
#: The consumer that reads one dictionary record again: librdkafka fetches at least one batch
#: whatever the limits (a registry batch holds one record), and queues nothing more.
FETCH_ONE: Final = {
    "fetch.max.bytes": "1000",  # librdkafka's least: no less than message.max.bytes
    "message.max.bytes": "1000",
    "max.partition.fetch.bytes": "1",
    "queued.max.messages.kbytes": "1",
}
#: Attempts to claim a free id before giving up (each loses only to a concurrent claim).
CLAIM_ATTEMPTS: Final = 5


class IgnoredCounter(Protocol):
    """Where `Registry` counts the records it ignores (`Metrics` is one)."""

    def registry_record_ignored(self, reason: str) -> None: ...


def default_actor(role: str) -> str:
    """How an activation names its publisher: `host:pid (role)`."""
    return f"{socket.gethostname()}:{os.getpid()} ({role})"


class Registry:
    """The registry topic through Kafka clients: read it to the end, publish to it.

    Reads and writes are synchronous and bounded by `timeout` seconds; a failure raises
    `RegistryUnavailable`. Safe to share between threads (one lock around the reader).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        actor: str | None = None,
        metrics: IgnoredCounter | None = None,
        reader: Consumer | None = None,
    ) -> None:
        """`settings`: the Kafka properties and `registry.*`; `metrics` counts ignored records;
        `reader` reads the topic (None: one is made on the first read)."""
        self.settings = settings
        self.topic: str = settings.registry.topic
        self.index_topic = self.topic + INDEX_SUFFIX
        #: Whether the index topic is there to write to (never produced to otherwise: a broker
        #: would create it with its defaults).
        self.index_exists = False
        #: The registry offset up to which this process wrote the index, and what it wrote of
        #: each activation and training entry.
        self._indexed_through = 0
        self._indexed: dict[bytes, object] = {}
        self.timeout: float = settings.registry.timeout
        #: Whether a start's read (`load`) succeeded.
        self.loaded = False
        self.actor = actor or default_actor("sidecar")
        self.metrics = metrics
        self.state = RegistryState(self._fetch, settings.registry.cache_bytes)
        #: Records and bytes (key, value and headers, as read) read from the topic so far.
        self.records_read = 0
        self.bytes_read = 0
        self._lock = threading.RLock()
        self._reader = reader
        # Asks the broker for the topic's end (see `_the_ends`); a given `reader` does both.
        self._ends = reader
        self._producer: Producer | None = None
        self._fetcher: Consumer | None = None
        self._fetch_lock = threading.Lock()

    @classmethod
    def connect(
        cls,
        bootstrap: str | None = None,
        *,
        topic: str = DEFAULT_TOPIC,
        timeout: float = 30.0,
        properties: Mapping[str, str] | None = None,
    ) -> Registry:
        """A registry client for library users: `bootstrap.servers` and other librdkafka
        `properties` (`_` read as `.`), read to the end once before returning."""
        props = dict(properties or {})
        if bootstrap is not None:
            props["bootstrap.servers"] = bootstrap
        settings = Settings(
            kafka=KafkaSettings.model_validate(props),
            registry=RegistrySettings(topic=topic, timeout=timeout, create=False),
        )
        registry = cls(settings, actor=default_actor("reader"))
        registry.load()
        return registry

    @classmethod
    def open(cls, settings: Settings, role: str, metrics: IgnoredCounter | None = None) -> Registry:
        """The registry of `settings`, its topic checked (or created), read to the end.

        `role` names this process in the activations it publishes (`host:pid (role)`);
        `metrics` counts the records it ignores.
        """
        registry = cls(settings, actor=default_actor(role), metrics=metrics)
        try:
            registry.ensure_topic()
            registry.load()
        except BaseException:
            registry.close()
            raise
        return registry

    # -- the topic -----------------------------------------------------------------------------

    def ensure_topic(self) -> None:
        """Check the topic (one partition), creating it compacted when missing and allowed."""
        admin = make_admin(self.settings)
        bootstrap = self.settings.kafka.client_config()["bootstrap.servers"]
        try:
            counts = partition_counts(
                admin, [self.topic], self.timeout, bootstrap, "ZDICT_REGISTRY__TIMEOUT"
            )
        except KafkaUnavailable as exc:
            raise RegistryUnavailable(str(exc)) from None
        if self.topic in counts:
            if counts[self.topic] != 1:
                raise RegistryError(
                    f"registry topic {self.topic} has {counts[self.topic]} partitions; it needs "
                    "exactly one (the order of its records decides which claim of an id wins)"
                )
            self._ensure_index(admin)
            return
        if not self.settings.registry.create:
            raise RegistryError(
                f"registry topic {self.topic} does not exist; create it with 1 partition and "
                "cleanup.policy=compact, or set ZDICT_REGISTRY__CREATE=true"
            )
        error = self._create(admin, self.topic)
        if error is not None:
            raise RegistryError(
                f"cannot create registry topic {self.topic}: {error.str()}; create it with "
                "1 partition and cleanup.policy=compact (or fix ZDICT_REGISTRY__TOPIC)"
            )
        log.info("registry_topic_created", topic=self.topic, config=TOPIC_CONFIG)
        self._ensure_index(admin)

    def _create(self, admin: AdminClient, topic: str) -> KafkaError | None:
        """Create `topic` as a registry topic; the broker's refusal, unless it exists."""
        new = NewTopic(
            topic,
            num_partitions=1,
            replication_factor=self.settings.registry.replication_factor,
            config=dict(TOPIC_CONFIG),
        )
        future = admin.create_topics([new], operation_timeout=self.timeout)[topic]
        try:
            future.result(timeout=self.timeout + 5)
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            return None if is_topic_already_exists(error) else error
        return None

    def _ensure_index(self, admin: AdminClient) -> None:
        """The index topic, created beside the registry when missing and allowed. Without it
        everything works: readers read the whole registry at start."""
        if not self.settings.registry.create:
            return
        error = self._create(admin, self.index_topic)
        if error is not None:
            log.warning("registry_index_not_created", topic=self.index_topic, error=error.str())

    # -- reading -------------------------------------------------------------------------------

    def load(self, timeout: float | None = None) -> None:
        """The start's read, the index then the topic to its end, within `timeout` seconds
        (default `registry.timeout`), logged with its cost (`registry_loaded`)."""
        started = time.monotonic()
        deadline = started + (self.timeout if timeout is None else timeout)
        # What the start reads is not kept: a reader asks for what it uses (read again by
        # offset). From then on a dictionary just published is kept: it is about to be used.
        self.state.dictionaries.cache_new = False
        try:
            with self._lock:
                self._load_index(deadline)
                if self._reader is None:  # the registry is read from where the index ends
                    self.state.position = max(self.state.position, self.state.index_through)
                    self._indexed_through = self.state.index_through
            self.refresh(max(0.0, deadline - time.monotonic()))
        finally:
            self.state.dictionaries.cache_new = True
        self.loaded = True
        log.info(
            "registry_loaded",
            topic=self.topic,
            records=self.records_read,
            bytes=self.bytes_read,
            dictionaries=len(self.state.dictionaries),
            index_through=self.state.index_through,
            seconds=round(time.monotonic() - started, 3),
        )

    def catch_up(self, timeout: float | None = None) -> None:
        """Read what is new: the start's read (`load`, through the index) until one succeeded,
        then `refresh`. For readers made without reading (the in-process clients), whose first
        read must cost what they use, not the registry's history."""
        if self.loaded:
            self.refresh(timeout)
        else:
            self.load(timeout)

    def _the_reader(self) -> Consumer:
        if self._reader is None:
            reader = make_reader(self.settings, "registry")
            reader.assign([TopicPartition(self.topic, 0, self.state.position)])
            self._reader = reader
        return self._reader

    def _load_index(self, deadline: float) -> None:
        """Apply the index topic, if there is one, to the state (see module)."""
        ends = self._the_ends()
        try:
            topic = ends.list_topics(
                self.index_topic, timeout=max(0.1, deadline - time.monotonic())
            ).topics.get(self.index_topic)
        except KafkaException:
            return
        if topic is None or topic.error is not None or not topic.partitions:
            return
        self.index_exists = True
        self._watch(ends, self.index_topic)
        high = self._end_offset(ends, TopicPartition(self.index_topic, 0), deadline)
        if high == 0:
            return
        reader = make_reader(self.settings, "registry-index")
        try:
            reader.assign([TopicPartition(self.index_topic, 0, 0)])
            position = 0
            while position < high:
                if time.monotonic() > deadline:
                    raise RegistryUnavailable(
                        f"registry index topic {self.index_topic}: read up to offset "
                        f"{position} of {high} in time (ZDICT_REGISTRY__TIMEOUT)"
                    )
                messages = reader.consume(min(500, high - position), 0.05)
                for msg in messages:
                    err = msg.error()
                    if err is not None:
                        if not is_partition_eof(err):
                            raise RegistryUnavailable(
                                f"registry index topic {self.index_topic}: {err.str()}"
                            )
                        continue
                    key, value, _ = self._counted(msg)
                    offset = cast(int, msg.offset())
                    position = offset + 1
                    event = self.state.apply_index(offset, key, value)
                    if isinstance(event, Ignored):
                        log.warning(
                            "registry_index_record_ignored",
                            topic=self.index_topic,
                            offset=offset,
                            key=event.key,
                            reason=event.reason,
                        )
                if not messages:
                    at = reader.position([TopicPartition(self.index_topic, 0)])[0].offset
                    position = max(position, at)
        finally:
            reader.close()

    def _write_index(self) -> None:
        """Bring the index topic up to what this process has read of the registry. Best
        effort: an index that lags costs a reader's start only a longer read of the registry."""
        if not self.index_exists:
            return
        records, through = index_records(self.state, self._indexed_through, self._indexed)
        producer = self._the_producer()
        try:
            for key, value, headers in records:
                producer.produce(self.index_topic, key=key, value=value, headers=headers)
            left = producer.flush(self.timeout)
        except (KafkaException, BufferError) as exc:
            log.warning("registry_index_not_written", topic=self.index_topic, error=str(exc))
            return
        if left == 0:
            self._indexed_through = through

    def _the_ends(self) -> Consumer:
        """A consumer that fetches nothing, for the topic's end offset: on the reader's own
        connection the query waits behind its long-polling Fetch (up to `fetch.wait.max.ms`,
        half a second at every publication)."""
        if self._ends is None:
            self._ends = make_reader(self.settings, "registry-end")
            self._watch(self._ends, self.topic)
        return self._ends

    @staticmethod
    def _watch(ends: Consumer, topic: str) -> None:
        """Have `ends` follow `topic`'s metadata without fetching: assigned (librdkafka asks
        for the metadata of assigned topics only) and paused."""
        tp = TopicPartition(topic, 0)
        ends.incremental_assign([tp])
        ends.pause([tp])

    def refresh(self, timeout: float | None = None) -> list[Event]:
        """Read every record published since the last read; returns what changed.

        Raises:
            RegistryUnavailable: the end of the topic was not reached within `timeout` seconds.
        """
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        events: list[Event] = []
        with self._lock:
            reader = self._the_reader()
            tp = TopicPartition(self.topic, 0)
            high = self._end_offset(self._the_ends(), tp, deadline)
            while self.state.position < high:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RegistryUnavailable(
                        f"registry topic {self.topic}: read up to offset {self.state.position} "
                        f"of {high} within {timeout:.0f} s"
                    )
                # consume() waits for all it asks for or the timeout: asking for no more than
                # the records up to the end returns as soon as they are there (a publication
                # reads its own record back at once), a short timeout when compaction left gaps.
                wanted = min(500, high - self.state.position)
                messages = reader.consume(wanted, min(0.05, remaining))
                failure: str | None = None
                for msg in messages:
                    err = msg.error()
                    if err is not None:  # the other records of the batch are still applied
                        if not is_partition_eof(err):
                            failure = err.str()
                        continue
                    event = self._apply(msg)
                    if event is not None:
                        events.append(event)
                if failure is not None:
                    raise RegistryUnavailable(f"registry topic {self.topic}: {failure}")
                if not messages:
                    # Compaction can leave the last offsets empty: the position says we are there.
                    position = reader.position([tp])[0].offset
                    if position >= 0:
                        self.state.position = max(self.state.position, position)
        return events

    def _fetch(self, offset: int, meta: DictionaryMeta) -> Dictionary:
        """The dictionary of the record at `offset` (`meta` as first read), read again and
        verified: one record fetched by a consumer of its own.

        Raises:
            RegistryUnavailable: not read within `timeout`.
            UnknownDictionary: the record is gone or is no longer that dictionary.
        """
        with self._fetch_lock:
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
            raise UnknownDictionary(
                f"dictionary {meta.id}: its record at offset {offset} of registry topic "
                f"{self.topic} is gone (deleted)"
            )
        try:
            dictionary = Dictionary.verified(meta, value, f"registry offset {offset}")
        except DictionaryIntegrityError as exc:  # the topic was rewritten under us
            raise UnknownDictionary(str(exc)) from None
        log.info("dictionary_fetched", topic=self.topic, dict_id=meta.id, offset=offset)
        return dictionary

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

    def _end_offset(self, reader: Consumer, tp: TopicPartition, deadline: float) -> int:
        """The topic's end offset, waiting out a topic another instance has just created."""
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
                        f"registry topic {self.topic} cannot be read: {error.str()}"
                    ) from None
            time.sleep(0.2)

    def _counted(self, msg: Message) -> tuple[bytes | None, bytes | None, Headers]:
        """A record's key, value and headers, counted in `records_read` and `bytes_read`."""
        key, value = msg.key(), msg.value()
        headers = cast(Headers, msg.headers() or [])
        self.records_read += 1
        self.bytes_read += len(key or b"") + len(value or b"")
        self.bytes_read += sum(len(k) + len(v or b"") for k, v in headers)
        return key, value, headers

    def _apply(self, msg: Message) -> Event | None:
        """Apply one record read without error; an ignored one is logged and counted here."""
        offset = msg.offset()
        assert offset is not None
        key, value, headers = self._counted(msg)
        event = self.state.apply(offset, key, value, headers)
        if isinstance(event, Ignored):
            log.warning(
                "registry_record_ignored",
                topic=self.topic,
                offset=event.offset,
                key=event.key,
                reason=event.reason,
                kind=event.kind,
            )
            if self.metrics is not None:
                self.metrics.registry_record_ignored(event.kind)
        return event

    # -- publishing ----------------------------------------------------------------------------

    def _the_producer(self) -> Producer:
        if self._producer is None:
            overrides = {
                "linger.ms": "0",
                "message.max.bytes": TOPIC_CONFIG["max.message.bytes"],
                "delivery.timeout.ms": str(int(self.timeout * 1000)),
                "request.timeout.ms": str(int(min(self.timeout, 30.0) * 1000)),
            }
            self._producer = make_writer(self.settings, "registry", overrides)
        return self._producer

    def _produce(
        self, key: bytes, value: bytes | None, headers: list[tuple[str, str | bytes | None]]
    ) -> int:
        """Publish one record and wait for the broker's acknowledgement; returns its offset."""
        producer = self._the_producer()
        outcome: dict[str, Any] = {}

        def delivered(err: KafkaError | None, msg: Message) -> None:
            outcome["error"], outcome["offset"] = err, msg.offset()

        try:
            producer.produce(
                self.topic, key=key, value=value, headers=headers, on_delivery=delivered
            )
        except (KafkaException, BufferError) as exc:
            raise RegistryUnavailable(f"registry topic {self.topic}: {exc}") from None
        producer.flush(self.timeout + 5.0)
        if "error" not in outcome:
            raise RegistryUnavailable(
                f"registry topic {self.topic}: no acknowledgement for {key.decode()} within "
                f"{self.timeout:.0f} s"
            )
        if outcome["error"] is not None:
            raise RegistryUnavailable(
                f"registry topic {self.topic} did not take {key.decode()}: {outcome['error'].str()}"
            )
        return int(outcome["offset"])

    def publish_dictionary(
        self, dictionary: Dictionary, *, keep_id: bool = False, avoid: Iterable[int] = ()
    ) -> Dictionary:
        """Publish `dictionary` and return it as the registry holds it (maybe under a new id).

        The id is kept if nobody claimed it before; otherwise the next free id (above `avoid`
        too) is taken, unless `keep_id` (then `RegistryError`). Publishing the same bytes again
        is a no-op.
        """
        avoid = set(avoid)
        for _ in range(CLAIM_ATTEMPTS):
            self.refresh()
            claim = self.state.claims.get(dictionary.id)
            if claim is not None and claim.sha256 == dictionary.meta.sha256:
                # The same bytes (the sha256 says so), as the registry describes them.
                meta = self.state.dictionaries.meta(dictionary.id)
                return dictionary if meta is None else Dictionary(meta=meta, data=dictionary.data)
            if claim is not None or dictionary.id in avoid:
                if keep_id:
                    raise RegistryError(
                        f"dictionary id {dictionary.id} is taken in registry topic {self.topic} "
                        "by another dictionary; the local store and the registry disagree - "
                        "train a new dictionary (zdict-sidecar train --topic T --publish)"
                    )
                dictionary = with_new_id(dictionary, self.state.next_id(avoid))
            key, value, headers = dictionary_record(dictionary)
            offset = self._produce(key, value, headers)
            self.refresh()
            winner = self.state.claims.get(dictionary.id)
            if winner is not None and winner.offset == offset:
                log.info(
                    "dictionary_published",
                    topic=self.topic,
                    namespace=dictionary.namespace,
                    dict_id=dictionary.id,
                    version=dictionary.meta.version,
                    offset=offset,
                )
                self._write_index()
                return dictionary
            log.warning("dictionary_id_lost", dict_id=dictionary.id, offset=offset)
            self._produce(key, None, [(FORMAT_HEADER, FORMAT)])  # withdraw the losing claim
        raise RegistryError(
            f"could not claim a dictionary id in {self.topic} after {CLAIM_ATTEMPTS} attempts"
        )

    def publish_activation(
        self, namespace: str, dict_id: int, action: Action, *, actor: str | None = None
    ) -> Activation:
        """Make `dict_id` the active dictionary of `namespace` for every host; a pin stays.

        `rollback` ignores `dict_id`'s place in the stack: use `rollback()`.

        Raises:
            NamespacePinned: a training's promotion (`promote`) of a pinned namespace.
        """
        self.refresh()
        current = self.state.activations.get(namespace)
        if action == "promote" and current is not None and current.pinned is not None:
            raise pinned_error(namespace, current.pinned)
        target = self.state.dictionaries.get(dict_id)
        if target is None or target.namespace != namespace:
            raise DictionaryNotFound(
                f"dictionary {dict_id} of namespace {namespace} is not in registry topic "
                f"{self.topic} (zdict-sidecar dicts list --registry shows what is there)"
            )
        stack = list(current.stack) if current else []
        if current is not None and current.dict_id != dict_id:
            stack.append(current.dict_id)
        return self._activate(namespace, dict_id, action, stack, actor, current)

    def rollback(self, namespace: str, *, actor: str | None = None) -> Activation:
        """Re-activate the dictionary that was active before the current one."""
        self.refresh()
        current = self.state.activations.get(namespace)
        if current is None or not current.stack:
            raise DictionaryNotFound(
                f"namespace {namespace} has no earlier active dictionary in registry topic "
                f"{self.topic} to roll back to"
            )
        return self._activate(
            namespace, current.stack[-1], "rollback", list(current.stack[:-1]), actor, current
        )

    def pin(self, namespace: str, *, actor: str | None = None) -> Activation:
        """Pin `namespace`'s active dictionary: no training replaces it (an operator's
        activation or rollback still does, and keeps the pin). Pinning twice changes nothing.

        Raises:
            DictionaryNotFound: the namespace has no active dictionary in the registry.
        """
        current = self._current(namespace, "pin")
        if current.pinned is not None:
            return current
        pin = Pin(by=actor or self.actor, at=utc_now())
        return self._republish(current.model_copy(update={"pinned": pin}), "namespace_pinned")

    def unpin(self, namespace: str) -> Activation:
        """Let training replace `namespace`'s active dictionary again (a no-op if not pinned).

        Raises:
            DictionaryNotFound: the namespace has no active dictionary in the registry.
        """
        current = self._current(namespace, "unpin")
        if current.pinned is None:
            return current
        return self._republish(current.model_copy(update={"pinned": None}), "namespace_unpinned")

    def _current(self, namespace: str, doing: str) -> Activation:
        self.refresh()
        current = self.state.activations.get(namespace)
        if current is None:
            raise DictionaryNotFound(
                f"namespace {namespace} has no active dictionary in registry topic {self.topic} "
                f"to {doing}; activate one first (zdict-sidecar dicts activate --registry "
                f"--namespace {namespace} ID)"
            )
        return current

    def _republish(self, activation: Activation, event: str) -> Activation:
        """The namespace's activation again, the same dictionary, `pinned` changed; logged as
        `event`."""
        self._produce(*activation_record(activation))
        self.refresh()
        self._write_index()
        log.info(
            event,
            topic=self.topic,
            namespace=activation.namespace,
            dict_id=activation.dict_id,
        )
        return activation

    def _activate(
        self,
        namespace: str,
        dict_id: int,
        action: Action,
        stack: list[int],
        actor: str | None,
        current: Activation | None,
    ) -> Activation:
        activation = Activation(
            namespace=namespace,
            dict_id=dict_id,
            action=action,
            by=actor or self.actor,
            at=utc_now(),
            stack=tuple(stack[-STACK_DEPTH:]),
            pinned=current.pinned if current is not None else None,
        )
        self._produce(*activation_record(activation))
        self.refresh()
        self._write_index()
        log.info(
            "dictionary_activation_published",
            topic=self.topic,
            namespace=namespace,
            dict_id=dict_id,
            action=action,
        )
        return activation

    def publish_training(self, namespace: str, entry: dict[str, Any]) -> None:
        """Record one training run's numbers and decision (the latest per namespace is kept)."""
        self._produce(*training_record(namespace, entry))
        self.refresh()
        self._write_index()

    def close(self) -> None:
        with self._lock:
            for consumer in {id(c): c for c in (self._reader, self._ends) if c}.values():
                consumer.close()
            self._reader = self._ends = None
        with self._fetch_lock:
            if self._fetcher is not None:
                self._fetcher.close()
                self._fetcher = None
        if self._producer is not None:
            self._producer.flush(5.0)
            self._producer = None


def pinned_error(namespace: str, pin: Pin) -> NamespacePinned:
    """The refusal to let training replace a pinned namespace's dictionary, saying who pinned
    it, when, and how to undo it."""
    return NamespacePinned(
        f"namespace {namespace} is pinned (by {pin.by} at {pin.at:%Y-%m-%d %H:%M:%S} UTC): no "
        f"training replaces its dictionary; zdict-sidecar dicts unpin --namespace {namespace} "
        "lets it"
    )


class RegistryResolver:
    """A `DictionaryResolver` over the registry: how a `Decoder` anywhere finds every dictionary.

    An id it does not know triggers a read of the registry to its end before `UnknownDictionary`
    is raised: a record is only produced after its dictionary was acknowledged by the registry,
    so one read is enough. A registry not read yet (the in-process consumer's) is read then,
    through its index (`Registry.catch_up`): the first record waits for the index, the registry
    after it and its own dictionary's record, not for every dictionary. With `follow_interval`,
    a daemon thread also reads new entries.

    For library users, `connect` builds one with a registry of its own::

        from sidecar.codec import Decoder
        from sidecar.dictionaries.registry import RegistryResolver

        with Decoder(RegistryResolver.connect("kafka:9092")) as decoder:
            value = decoder.decode(msg.value(), msg.headers())
    """

    def __init__(self, registry: Registry, follow_interval: float | None = 5.0) -> None:
        """Resolve ids in `registry`, re-read every `follow_interval` seconds (None: only on an
        unknown id). `close()` stops following and closes `registry`."""
        self.registry = registry
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if follow_interval:
            self._thread = threading.Thread(
                target=self._follow, args=(follow_interval,), name="zdict-registry", daemon=True
            )
            self._thread.start()

    @property
    def following(self) -> bool:
        """Whether the thread re-reading the registry runs."""
        return self._thread is not None and self._thread.is_alive()

    @classmethod
    def connect(
        cls,
        bootstrap: str | None = None,
        *,
        topic: str = DEFAULT_TOPIC,
        follow_interval: float | None = 5.0,
        **properties: str,
    ) -> RegistryResolver:
        """A resolver that knows every dictionary of the registry topic and follows new ones.

        `bootstrap` and `properties` (librdkafka names, `_` read as `.`, e.g.
        `security_protocol="SASL_SSL"`) reach the registry's Kafka clients; the registry is read
        to its end before this returns. `close()` stops following and releases the clients; a
        `Decoder` given the resolver calls it in its own `close()` (and at the end of a `with`).

        Raises:
            RegistryUnavailable: the registry topic could not be read to its end.
        """
        registry = Registry.connect(bootstrap, topic=topic, properties=properties)
        return cls(registry, follow_interval)

    def _follow(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.registry.catch_up()
            except ZdictError as exc:
                log.warning("registry_read_failed", topic=self.registry.topic, error=str(exc))
            except Exception:  # a bug must not stop following: logged with its traceback
                log.exception("registry_read_failed", topic=self.registry.topic)

    def get(self, dict_id: int) -> Dictionary:
        dictionary = self.registry.state.dictionaries.get(dict_id)
        if dictionary is None:
            self.registry.catch_up()
            dictionary = self.registry.state.dictionaries.get(dict_id)
        if dictionary is None:
            raise UnknownDictionary(
                f"unknown dictionary id {dict_id}: not in registry topic {self.registry.topic} "
                f"(read to offset {self.registry.state.position}); the record was not produced "
                "by zdict-sidecar with this registry, or its entry was deleted"
            )
        return dictionary

    def describe(self) -> str:
        return f"registry topic {self.registry.topic}"

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10.0)
        self.registry.close()
