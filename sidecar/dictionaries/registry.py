"""The registry topic: every dictionary, activation and training run, for every host.

The registry is the source of truth across hosts; a local store is a cache of it (and the
offline option). It is one Kafka topic with one partition, compacted, holding three kinds of
records, each with the header `zdict.format: 1`:

==============================  ===================================  =========================
key                             value                                headers
==============================  ===================================  =========================
``dictionary/<id>/<sha256>``    the raw dictionary (``zstd -D``)     ``zdict.meta``: metadata
``active/<namespace>``          `Activation` as JSON                 -
``training/<namespace>``        the namespace's last training run    -
==============================  ===================================  =========================

Rules every reader applies (`RegistryState.apply`), so all hosts agree:

* **Ids are claimed in log order.** A writer takes the next free id, publishes, reads the log
  back to its own record, and keeps the id only if no earlier record claimed it; otherwise it
  tombstones its record and takes another id. The sha256 in the key keeps two claims of one id
  from compacting into each other, so the first claim stays the winner forever. Ids are never
  reused: a claim reserves its id even when its content is refused.
* A dictionary record is used only when its bytes match its metadata (sha256, size, embedded
  id, the zstd dictionary magic, tables zstd loads) and the key; anything else is ignored and
  reported.
* No record can stop a reader: one that is malformed, too large, out of range or contradicts
  the log is ignored (`Ignored`: one `registry_record_ignored` log line and one count of
  `zdict_registry_records_ignored_total{reason}`), and reading goes on with the next.
* The latest ``active/<namespace>`` record is the namespace's active dictionary; it carries the
  stack of earlier active ids, so a rollback needs no history beyond it (compaction keeps only
  the latest record per key).
* Dictionary records are never deleted: records that reference an id may be read for as long
  as they exist.

A dictionary is published (acknowledged with acks=all) before anything that references it: its
activation, then the local store, then the encoder.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal, Protocol, cast, get_args

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]  # public, not in __all__
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sidecar.config import KafkaSettings, RegistrySettings, Settings
from sidecar.dictionaries.model import (
    MAX_DICT_ID,
    MAX_DICT_SIZE,
    MAX_META_SIZE,
    MIN_DICT_ID,
    DictId,
    Dictionary,
    DictionaryMeta,
    Namespace,
    describe_invalid,
    parse_dict_id,
    utc_now,
    validate_namespace,
    with_new_id,
)
from sidecar.errors import (
    DictionaryIntegrityError,
    DictionaryNotFound,
    KafkaUnavailable,
    RecordIgnored,
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
FORMAT_HEADER: Final = "zdict.format"
FORMAT: Final = b"1"
META_HEADER: Final = "zdict.meta"
#: Topic settings for a registry we create. Dictionaries of up to 1 MiB plus metadata must fit.
TOPIC_CONFIG: Final = {"cleanup.policy": "compact", "max.message.bytes": str(2 * 1024 * 1024)}
#: Earlier active ids kept in an activation (how far `rollback` can go back).
STACK_DEPTH: Final = 32
#: Attempts to claim a free id before giving up (each loses only to a concurrent claim).
CLAIM_ATTEMPTS: Final = 5

#: The largest activation or training value we read, bytes. Ours are under 2 KiB (an
#: activation's stack holds at most STACK_DEPTH ids); the topic takes records of up to
#: TOPIC_CONFIG's 2 MiB, and a topic created by hand may take more: a larger value is not ours,
#: and is refused before it is parsed, so that no record can cost a reader more than that.
MAX_JSON_VALUE: Final = 64 * 1024
#: A dictionary record: the dictionary (MAX_DICT_SIZE) as value, its metadata (MAX_META_SIZE) as
#: a header; the same limits as the store's files.
MAX_DICTIONARY_VALUE: Final = MAX_DICT_SIZE

_DICTIONARY: Final = b"dictionary/"
_ACTIVE: Final = b"active/"
_TRAINING: Final = b"training/"
#: How much of a record's key an `Ignored` shows (escaped).
_SHOWN_KEY: Final = 120

Action = Literal["promote", "activate", "rollback", "adopt"]
Headers = Sequence[tuple[str, bytes | None]]
#: (key, value, headers) of a record to publish, typed as confluent-kafka takes it.
Outgoing = tuple[bytes, bytes, list[tuple[str, str | bytes | None]]]


#: Why a record was ignored: the `reason` label of `zdict_registry_records_ignored_total`.
IgnoredReason = Literal[
    "format",  # no key, or a format header this version does not read
    "unknown_key",  # a key of no kind this version knows
    "too_large",  # a value or header past its limit (MAX_JSON_VALUE, MAX_DICTIONARY_VALUE...)
    "malformed",  # does not parse: key, JSON, metadata, UTF-8, nesting
    "invalid",  # parses, but a field is out of range or names something that is not there
    "integrity",  # a dictionary whose bytes do not match its metadata, or zstd refuses
    "conflict",  # a dictionary id claimed first by another record
    "tombstone",  # deletes what must stay: an activation, a dictionary in use
]
IGNORED_REASONS: Final[tuple[str, ...]] = get_args(IgnoredReason)


class Activation(BaseModel):
    """Which dictionary a namespace uses from now on, who said so, and what came before."""

    model_config = ConfigDict(frozen=True, extra="allow")

    namespace: Namespace
    dict_id: DictId
    action: Action
    by: str = Field(description="the process that published it: host:pid and role")
    at: datetime
    stack: tuple[DictId, ...] = Field(default=(), description="earlier active ids, latest last")


# -- what a read of the registry reports ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DictionaryAdded:
    dictionary: Dictionary
    offset: int


@dataclass(frozen=True, slots=True)
class Activated:
    activation: Activation
    offset: int


@dataclass(frozen=True, slots=True)
class TrainingRecorded:
    namespace: str
    entry: dict[str, Any]
    offset: int


@dataclass(frozen=True, slots=True)
class Ignored:
    """A record no reader uses (logged as `registry_record_ignored`).

    `key` is shown escaped and cut; `reason` says why in words, `kind` classes it (the `reason`
    label of `zdict_registry_records_ignored_total`).
    """

    offset: int
    key: str
    kind: IgnoredReason
    reason: str


class IgnoredCounter(Protocol):
    """Where `Registry` counts the records it ignores (`Metrics` is one)."""

    def registry_record_ignored(self, reason: str) -> None: ...


Event = DictionaryAdded | Activated | TrainingRecorded | Ignored


@dataclass(frozen=True, slots=True)
class Claim:
    """The first record in the log that claimed an id: the only one that counts."""

    offset: int
    sha256: str


# -- record encoding -----------------------------------------------------------------------------


def dictionary_key(dictionary: Dictionary) -> bytes:
    return b"%s%d/%s" % (_DICTIONARY, dictionary.id, dictionary.meta.sha256.encode())


def dictionary_record(dictionary: Dictionary) -> Outgoing:
    """(key, value, headers) of a dictionary's registry record."""
    meta = dictionary.meta.model_dump_json().encode()
    return (
        dictionary_key(dictionary),
        dictionary.data,
        [(FORMAT_HEADER, FORMAT), (META_HEADER, meta)],
    )


def activation_record(activation: Activation) -> Outgoing:
    key = _ACTIVE + activation.namespace.encode()
    return key, activation.model_dump_json().encode(), [(FORMAT_HEADER, FORMAT)]


def training_record(namespace: str, entry: dict[str, Any]) -> Outgoing:
    value = json.dumps(entry, default=str, separators=(",", ":")).encode()
    return _TRAINING + namespace.encode(), value, [(FORMAT_HEADER, FORMAT)]


class RegistryState:
    """What the registry says, built by applying its records in log order. Pure; thread-safe."""

    def __init__(self) -> None:
        self.claims: dict[int, Claim] = {}
        self.dictionaries: dict[int, Dictionary] = {}
        self.activations: dict[str, Activation] = {}
        self.trainings: dict[str, dict[str, Any]] = {}
        self.position = 0  # the next offset to read
        self._lock = threading.Lock()

    def apply(
        self, offset: int, key: bytes | None, value: bytes | None, headers: Headers | None
    ) -> Event | None:
        """Apply one record; returns what changed (None: nothing new, e.g. a re-publish).

        Never raises: a record that cannot be applied is returned as `Ignored`, and the state
        is as if it had never been read (but for the claim of a well-formed dictionary key).
        """
        with self._lock:
            self.position = max(self.position, offset + 1)
            shown = _shown_key(key)
            try:
                return self._apply(offset, key, value, headers or ())
            except RecordIgnored as exc:
                return Ignored(offset, shown, cast(IgnoredReason, exc.kind), str(exc))
            except DictionaryIntegrityError as exc:
                return Ignored(offset, shown, "integrity", _one_line(exc))
            except ValidationError as exc:
                return Ignored(offset, shown, _validation_kind(exc), describe_invalid(exc))
            except ZdictError as exc:
                return Ignored(offset, shown, "invalid", _one_line(exc))
            except (ValueError, RecursionError) as exc:  # bad UTF-8 or JSON, nesting too deep
                return Ignored(offset, shown, "malformed", _one_line(exc))
            except Exception as exc:  # one record must never stop every reader of the registry
                return Ignored(
                    offset, shown, "malformed", f"{type(exc).__name__}: {_one_line(exc)}"
                )

    def _apply(
        self, offset: int, key: bytes | None, value: bytes | None, headers: Headers
    ) -> Event | None:
        if key is None:
            raise _refused("format", "a record without key")
        fmt = [v for k, v in headers if k == FORMAT_HEADER]
        if value is not None and fmt != [FORMAT]:
            raise _refused(
                "format", f"format {_shown_values(fmt)} is not {FORMAT!r}; a newer zdict-sidecar?"
            )
        if key.startswith(_DICTIONARY):
            return self._apply_dictionary(offset, key, value, headers)
        if key.startswith(_ACTIVE):
            return self._apply_activation(offset, key, value)
        if key.startswith(_TRAINING):
            return self._apply_training(offset, key, value)
        raise _refused("unknown_key", "unknown key")

    def _apply_dictionary(
        self, offset: int, key: bytes, value: bytes | None, headers: Headers
    ) -> Event | None:
        dict_id, sha = _dictionary_key(key)
        claim = self.claims.get(dict_id)
        if value is None:  # a tombstone: only a losing claim is ever withdrawn
            if claim is not None and claim.sha256 == sha:
                raise _refused("tombstone", "tombstone of a dictionary in use; ignored")
            return None
        if claim is not None:
            if claim.sha256 == sha:
                return None  # the same dictionary published again
            raise _refused("conflict", f"id {dict_id} was claimed first at offset {claim.offset}")
        # The key is well formed: the id is claimed even if the content is refused below, so
        # that every reader agrees on which ids are taken, whatever it makes of the content.
        self.claims[dict_id] = Claim(offset, sha)
        raw_meta = [v for k, v in headers if k == META_HEADER]
        if len(raw_meta) != 1 or raw_meta[0] is None:
            raise _refused("malformed", f"expected one {META_HEADER} header")
        _within("too_large", len(value), MAX_DICTIONARY_VALUE, "dictionary")
        _within("too_large", len(raw_meta[0]), MAX_META_SIZE, f"{META_HEADER} header")
        meta = DictionaryMeta.model_validate_json(raw_meta[0])
        if meta.id != dict_id or meta.sha256 != sha:
            raise _refused(
                "invalid", f"key names {dict_id}/{sha[:12]}…, metadata {meta.id}/{meta.sha256}"
            )
        dictionary = Dictionary.verified(meta, value, f"registry offset {offset}")
        self.dictionaries[dict_id] = dictionary
        return DictionaryAdded(dictionary, offset)

    def _apply_activation(self, offset: int, key: bytes, value: bytes | None) -> Event | None:
        namespace = validate_namespace(key[len(_ACTIVE) :].decode("ascii"))
        if value is None:
            raise _refused("tombstone", "activation tombstone; the last one stays")
        _within("too_large", len(value), MAX_JSON_VALUE, "activation")
        activation = Activation.model_validate_json(value)
        if activation.namespace != namespace:
            raise _refused("invalid", f"activation for {activation.namespace} under key {key!r}")
        target = self.dictionaries.get(activation.dict_id)
        if target is None or target.namespace != namespace:
            raise _refused(
                "invalid",
                f"activates {activation.dict_id}, which is not a dictionary of {namespace}",
            )
        self.activations[namespace] = activation
        return Activated(activation, offset)

    def _apply_training(self, offset: int, key: bytes, value: bytes | None) -> Event | None:
        namespace = validate_namespace(key[len(_TRAINING) :].decode("ascii"))
        if value is None:
            return None
        _within("too_large", len(value), MAX_JSON_VALUE, "training entry")
        entry = json.loads(value)
        if not isinstance(entry, dict):
            raise _refused(
                "malformed", f"a training entry is a JSON object, not {type(entry).__name__}"
            )
        finished_at = entry.get("finished_at")
        if finished_at is not None and not _is_time(finished_at):
            raise _refused("invalid", f"finished_at {finished_at!r:.40} is not a Unix time")
        self.trainings[namespace] = entry
        return TrainingRecorded(namespace, entry, offset)

    # -- questions -----------------------------------------------------------------------------

    def active(self, namespace: str) -> Dictionary | None:
        activation = self.activations.get(namespace)
        return None if activation is None else self.dictionaries.get(activation.dict_id)

    def versions(self, namespace: str | None = None) -> list[Dictionary]:
        """Dictionaries of `namespace` (all if None), by namespace and version."""
        with self._lock:
            found = [d for d in self.dictionaries.values() if namespace in (None, d.namespace)]
        return sorted(found, key=lambda d: (d.namespace, d.meta.version))

    def next_id(self, avoid: Iterable[int] = ()) -> int:
        """The lowest id above every claimed one and every id in `avoid`."""
        with self._lock:
            highest = max([MIN_DICT_ID - 1, *self.claims, *avoid])
        if highest >= MAX_DICT_ID:
            raise RegistryError(f"dictionary ids {MIN_DICT_ID}..{MAX_DICT_ID} are used up")
        return highest + 1

    def next_version(self, namespace: str, at_least: int = 1) -> int:
        versions = [d.meta.version + 1 for d in self.versions(namespace)]
        return max([at_least, *versions])


def _refused(kind: IgnoredReason, reason: str) -> RecordIgnored:
    """Why `RegistryState` does not apply a record, to raise: `kind` and words."""
    return RecordIgnored(kind, reason)


def _within(kind: IgnoredReason, size: int, limit: int, what: str) -> None:
    if size > limit:
        raise _refused(kind, f"{what} of {size} bytes; at most {limit} bytes are read")


def _dictionary_key(key: bytes) -> tuple[int, str]:
    """(id, sha256) of a `dictionary/<id>/<sha256>` key; `RecordIgnored` unless well formed."""
    id_text, slash, sha = key[len(_DICTIONARY) :].decode("ascii").partition("/")
    dict_id = parse_dict_id(id_text)
    if dict_id is None:
        # Decimal as we write it, only out of range; else not an id at all.
        decimal = (id_text.isascii() and id_text.isdigit() and id_text[0] != "0") or id_text == "0"
        raise _refused(
            "invalid" if decimal else "malformed",
            f"{id_text[:20]!r} is not a dictionary id ({MIN_DICT_ID}..{MAX_DICT_ID}, decimal)",
        )
    if not slash or len(sha) != 64 or sha.strip("0123456789abcdef"):
        raise _refused("malformed", "the key does not end with /<sha256> (64 hex digits)")
    return dict_id, sha


def _is_time(value: object) -> bool:
    """A Unix time (seconds) as JSON carries it: a finite, non-negative number."""
    return type(value) in (int, float) and 0 <= value < 2**53  # type: ignore[operator]


def _validation_kind(exc: ValidationError) -> IgnoredReason:
    """JSON that does not parse is malformed; JSON with a bad field is invalid."""
    return "malformed" if any(e["type"] == "json_invalid" for e in exc.errors()) else "invalid"


def _shown_key(key: bytes | None) -> str:
    """A record's key for a log line: escaped (it may hold any bytes) and cut."""
    if key is None:
        return ""
    return repr(key[:_SHOWN_KEY])[2:-1] + ("…" if len(key) > _SHOWN_KEY else "")


def _shown_values(values: list[bytes | None]) -> str:
    return repr([v if v is None else v[:20] for v in values[:3]])


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:400]


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
    ) -> None:
        """`settings`: the Kafka properties and `registry.*`; `metrics` counts ignored records."""
        self.settings = settings
        self.topic: str = settings.registry.topic
        self.timeout: float = settings.registry.timeout
        self.actor = actor or default_actor("sidecar")
        self.metrics = metrics
        self.state = RegistryState()
        self._lock = threading.RLock()
        self._reader: Consumer | None = None
        self._producer: Producer | None = None

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
        registry.refresh()
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
            registry.refresh()
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
            counts = partition_counts(admin, [self.topic], self.timeout, bootstrap)
        except KafkaUnavailable as exc:
            raise RegistryUnavailable(str(exc)) from None
        if self.topic in counts:
            if counts[self.topic] != 1:
                raise RegistryError(
                    f"registry topic {self.topic} has {counts[self.topic]} partitions; it needs "
                    "exactly one (the order of its records decides which claim of an id wins)"
                )
            return
        if not self.settings.registry.create:
            raise RegistryError(
                f"registry topic {self.topic} does not exist; create it with 1 partition and "
                "cleanup.policy=compact, or set ZDICT_REGISTRY__CREATE=true"
            )
        new = NewTopic(
            self.topic,
            num_partitions=1,
            replication_factor=self.settings.registry.replication_factor,
            config=dict(TOPIC_CONFIG),
        )
        future = admin.create_topics([new], operation_timeout=self.timeout)[self.topic]
        try:
            future.result(timeout=self.timeout + 5)
        except KafkaException as exc:
            error = exc.args[0]
            if not is_topic_already_exists(error):
                raise RegistryError(
                    f"cannot create registry topic {self.topic}: {error.str()}; create it with "
                    "1 partition and cleanup.policy=compact (or fix ZDICT_REGISTRY__TOPIC)"
                ) from None
        log.info("registry_topic_created", topic=self.topic, config=TOPIC_CONFIG)

    # -- reading -------------------------------------------------------------------------------

    def _the_reader(self) -> Consumer:
        if self._reader is None:
            reader = make_reader(self.settings, "registry")
            reader.assign([TopicPartition(self.topic, 0, self.state.position)])
            self._reader = reader
        return self._reader

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
            high = self._end_offset(reader, tp, deadline)
            while self.state.position < high:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RegistryUnavailable(
                        f"registry topic {self.topic}: read up to offset {self.state.position} "
                        f"of {high} within {timeout:.0f} s"
                    )
                # consume() waits for all 500 or the timeout: a short timeout returns as soon
                # as what exists has been fetched.
                messages = reader.consume(500, min(0.05, remaining))
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

    def _apply(self, msg: Message) -> Event | None:
        """Apply one record read without error; an ignored one is logged and counted here."""
        offset = msg.offset()
        assert offset is not None
        headers = cast(Headers, msg.headers() or [])
        event = self.state.apply(offset, msg.key(), msg.value(), headers)
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
                return self.state.dictionaries.get(dictionary.id, dictionary)
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
                return dictionary
            log.warning("dictionary_id_lost", dict_id=dictionary.id, offset=offset)
            self._produce(key, None, [(FORMAT_HEADER, FORMAT)])  # withdraw the losing claim
        raise RegistryError(
            f"could not claim a dictionary id in {self.topic} after {CLAIM_ATTEMPTS} attempts"
        )

    def publish_activation(
        self, namespace: str, dict_id: int, action: Action, *, actor: str | None = None
    ) -> Activation:
        """Make `dict_id` the active dictionary of `namespace` for every host.

        `rollback` ignores `dict_id`'s place in the stack: use `rollback()`.
        """
        self.refresh()
        target = self.state.dictionaries.get(dict_id)
        if target is None or target.namespace != namespace:
            raise DictionaryNotFound(
                f"dictionary {dict_id} of namespace {namespace} is not in registry topic "
                f"{self.topic} (zdict-sidecar dicts list --registry shows what is there)"
            )
        current = self.state.activations.get(namespace)
        stack = list(current.stack) if current else []
        if current is not None and current.dict_id != dict_id:
            stack.append(current.dict_id)
        return self._activate(namespace, dict_id, action, stack, actor)

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
            namespace, current.stack[-1], "rollback", list(current.stack[:-1]), actor
        )

    def _activate(
        self, namespace: str, dict_id: int, action: Action, stack: list[int], actor: str | None
    ) -> Activation:
        activation = Activation(
            namespace=namespace,
            dict_id=dict_id,
            action=action,
            by=actor or self.actor,
            at=utc_now(),
            stack=tuple(stack[-STACK_DEPTH:]),
        )
        self._produce(*activation_record(activation))
        self.refresh()
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

    def close(self) -> None:
        with self._lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
        if self._producer is not None:
            self._producer.flush(5.0)
            self._producer = None


class RegistryResolver:
    """A `DictionaryResolver` over the registry: how a `Decoder` anywhere finds every dictionary.

    An id it does not know triggers a read of the registry to its end before `UnknownDictionary`
    is raised: a record is only produced after its dictionary was acknowledged by the registry,
    so one read is enough. With `follow_interval`, a daemon thread also reads new entries.

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
                self.registry.refresh()
            except ZdictError as exc:
                log.warning("registry_read_failed", topic=self.registry.topic, error=str(exc))
            except Exception:  # a bug must not stop following: logged with its traceback
                log.exception("registry_read_failed", topic=self.registry.topic)

    def get(self, dict_id: int) -> Dictionary:
        dictionary = self.registry.state.dictionaries.get(dict_id)
        if dictionary is None:
            self.registry.refresh()
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
