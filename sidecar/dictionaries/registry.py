"""The registry topic through Kafka clients: `Registry` reads it to its end and publishes to it;
`RegistryResolver` finds a `Decoder`'s dictionaries in it.

What the records are, and how every reader applies them, is `sidecar.dictionaries.registry_state`
(pure). A dictionary is published (acknowledged with acks=all) before anything that references
it: its activation, then the local store, then the encoder.

The index topic beside it (`sidecar.dictionaries.registry_index`) holds what a start needs
without the dictionaries' bytes; every publication brings it up to what the publisher read.

What a reader holds: each dictionary's metadata and the offset of its record, not its bytes;
those are read again when first asked for (`sidecar.dictionaries.registry_fetch`), then kept in
a cache bounded by `registry.cache_bytes`. A dictionary published after the start is kept as it
is read: it is about to be used. The end offset is asked for by a consumer that fetches nothing
(paused), so that the query does not queue behind the reader's long-polling Fetch.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, Final, Protocol, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from sidecar.config import KafkaSettings, RegistrySettings, Settings
from sidecar.dictionaries.model import Dictionary, DictionaryMeta, utc_now, with_new_id
from sidecar.dictionaries.registry_fetch import RecordFetcher, end_offset
from sidecar.dictionaries.registry_index import IndexTopic
from sidecar.dictionaries.registry_state import (
    FORMAT,
    FORMAT_HEADER,
    Action,
    Activation,
    DictionaryRetired,
    Event,
    Headers,
    Ignored,
    Pin,
    RegistryState,
    activation_record,
    dictionary_key_of,
    dictionary_record,
    training_record,
)
from sidecar.dictionaries.registry_topics import TOPIC_CONFIG, ensure_topics
from sidecar.errors import (
    DictionaryNotFound,
    NamespacePinned,
    RegistryError,
    RegistryUnavailable,
    UnknownDictionary,
    ZdictError,
)
from sidecar.kafka import (
    is_partition_eof,
    make_reader,
    make_writer,
)
from sidecar.logs import get_logger

log = get_logger(__name__)

DEFAULT_TOPIC: Final = "_zdict_dictionaries"
#: Earlier active ids kept in an activation (how far `rollback` can go back).
STACK_DEPTH: Final = 32
#: Attempts to claim a free id before giving up (each loses only to a concurrent claim).
CLAIM_ATTEMPTS: Final = 5


class RegistryCounters(Protocol):
    """Where `Registry` counts the records it ignores and the retirements it reads (`Metrics`
    is one)."""

    def registry_record_ignored(self, reason: str) -> None: ...

    def registry_dictionary_retired(self) -> None: ...


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
        metrics: RegistryCounters | None = None,
        reader: Consumer | None = None,
    ) -> None:
        """`settings`: the Kafka properties and `registry.*`; `metrics` counts ignored records;
        `reader` reads the topic (None: one is made on the first read)."""
        self.settings = settings
        self.topic: str = settings.registry.topic
        self.index = IndexTopic(settings, self.topic)
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
        self.fetcher = RecordFetcher(
            settings,
            self.topic,
            self.timeout,
            self._counted,
            lambda deadline: self._end_offset(
                self._the_ends(), TopicPartition(self.topic, 0), deadline
            ),
        )

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
    def open(
        cls, settings: Settings, role: str, metrics: RegistryCounters | None = None
    ) -> Registry:
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
        """Check the topic (one partition), creating it compacted when missing and allowed;
        its index topic too (`registry_topics.ensure_topics`)."""
        ensure_topics(self.settings)

    # -- reading -------------------------------------------------------------------------------

    def load(self, timeout: float | None = None, *, whole: bool = False) -> None:
        """The start's read, the index then the topic to its end, within `timeout` seconds
        (default `registry.timeout`), logged with its cost (`registry_loaded`). `whole`: every
        record of the topic, the index read for its keys only (before `reindex`)."""
        started = time.monotonic()
        deadline = started + (self.timeout if timeout is None else timeout)
        # What the start reads is not kept: a reader asks for what it uses (read again by
        # offset). From then on a dictionary just published is kept: it is about to be used.
        self.state.dictionaries.cache_new = False
        try:
            with self._lock:
                indexed = RegistryState() if whole else self.state
                self.index.load(
                    indexed,
                    self._the_ends(),
                    deadline,
                    self._end_offset,
                    self._counted,
                    keep_keys=whole,
                )
                self.state.high_id = max(self.state.high_id, indexed.high_id)  # never reused
                if self._reader is None:  # the registry is read from where the index ends
                    self.state.position = max(self.state.position, self.state.index_through)
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

    def _write_index(self) -> None:
        if self.index.exists:  # never produced to otherwise (see `IndexTopic.exists`)
            self.index.write(self.state, self._the_producer(), self.timeout)

    def reindex(self) -> int:
        """Write the index of the registry as read (`load(whole=True)` first: after a restore,
        `dicts import`, `dicts reindex`) and tombstone every other index record; returns how
        many index records were written.

        Raises:
            RegistryUnavailable: the index topic is missing or did not take them.
        """
        with self._lock:
            written = self.index.rebuild(self.state, self._the_producer(), self.timeout)
        log.info("registry_index_rebuilt", topic=self.index.topic, records=written)
        return written

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
        verified (`RecordFetcher`). Found elsewhere, the index disagreed: its entry is
        corrected, and this process's next publication writes the index again.

        Raises:
            RegistryUnavailable: not read within `timeout`.
            UnknownDictionary: the record is gone or is no longer that dictionary.
        """
        dictionary, at = self.fetcher.fetch(offset, meta)
        if at != offset:
            self.state.dictionaries.index(meta, at)
            self.index.forget_written()
        return dictionary

    def _end_offset(self, reader: Consumer, tp: TopicPartition, deadline: float) -> int:
        return end_offset(self.topic, reader, tp, deadline)

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
        elif isinstance(event, DictionaryRetired) and self.metrics is not None:
            self.metrics.registry_dictionary_retired()
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
        is a no-op, unless they were retired.
        """
        avoid = set(avoid)
        for _ in range(CLAIM_ATTEMPTS):
            self.refresh()
            claim = self.state.claims.get(dictionary.id)
            meta = self.state.dictionaries.meta(dictionary.id)
            if claim is not None and claim.sha256 == dictionary.meta.sha256 and meta is not None:
                # The same bytes (the sha256 says so), as the registry describes them. Those
                # of a retired dictionary (no meta) go under a new id: its own is never reused.
                return Dictionary(meta=meta, data=dictionary.data)
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

    def retire(self, metas: Iterable[DictionaryMeta]) -> list[DictionaryMeta]:
        """Retire dictionaries: a tombstone of each one's registry record, then of its index
        record (see `registry_state`); returns those retired. One that is active or in a
        rollback stack now, or no longer in the registry, is left out.

        Raises:
            RegistryUnavailable: the registry or its index did not take the tombstones.
        """
        self.refresh()
        going = [
            m
            for m in metas
            if self.state.dictionaries.meta(m.id) == m and self.state.user(m.id) is None
        ]
        for meta in going:
            self._produce(dictionary_key_of(meta), None, [(FORMAT_HEADER, FORMAT)])
        self.refresh()
        retired = [m for m in going if m.id in self.state.retired]
        with self._lock:
            keys = [dictionary_key_of(m) for m in retired]
            self.index.retire(keys, self._the_producer(), self.timeout)
        self._write_index()
        for meta in retired:
            log.info(
                "dictionary_retired",
                topic=self.topic,
                namespace=meta.namespace,
                dict_id=meta.id,
                version=meta.version,
            )
        return retired

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
        self.fetcher.close()
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
        if dictionary is None and dict_id in self.registry.state.retired:
            raise UnknownDictionary(
                f"unknown dictionary id {dict_id}: retired from registry topic "
                f"{self.registry.topic} (dicts retire --apply) once no record of its topics "
                "named it; this record outlived its topic's retention, or came from elsewhere"
            )
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
