"""The registry topic's records, and the rules every reader applies to them: pure state.

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
  the latest record per key), and the namespace's pin if an operator pinned it.
* A dictionary is deleted only by retirement (`dicts retire --apply`,
  `sidecar.dictionaries.retirement` decides): a tombstone of its record, and one of its index
  record. Every reader then forgets it (`DictionaryRetired`); a record naming it gets the
  decoder's `UnknownDictionary`. Its id stays claimed (`through`'s high-water mark keeps it
  after compaction), so it is never reused. A tombstone of a dictionary that is active or in a
  rollback stack is refused: a namespace never loses its dictionary to one.

What a reader keeps of a dictionary is `Dictionaries`' business: its metadata and offset always,
its bytes while cached (or always, with no way to read them again).

The index topic (`index_records`, `RegistryState.apply_index`; the design is in
`sidecar.dictionaries.registry_index`) holds JSON values, each with the registry `offset` it
copies and the `registry` topic's id it was written for (a registry topic created again, by a
restore, has another: the records of the earlier one are ignored): ``dictionary/<id>/<sha256>``
with ``meta``; ``active/<namespace>`` and ``training/<namespace>`` with ``value``; ``through``
with ``high_id``.

Pure: no Kafka, no files. `sidecar.dictionaries.registry` reads and publishes these records
through Kafka clients.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal, cast, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

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
    validate_namespace,
)
from sidecar.errors import DictionaryIntegrityError, RecordIgnored, RegistryError, ZdictError

FORMAT_HEADER: Final = "zdict.format"
FORMAT: Final = b"1"
META_HEADER: Final = "zdict.meta"

#: The largest activation or training value we read, bytes. Ours are under 2 KiB (an
#: activation's stack holds at most `registry.STACK_DEPTH` ids); the topic takes records of up
#: to `registry.TOPIC_CONFIG`'s 2 MiB, and a topic created by hand may take more: a larger value
#: is not ours, and is refused before it is parsed, so that no record can cost a reader more
#: than that.
MAX_JSON_VALUE: Final = 64 * 1024
#: A dictionary record: the dictionary (MAX_DICT_SIZE) as value, its metadata (MAX_META_SIZE) as
#: a header; the same limits as the store's files.
MAX_DICTIONARY_VALUE: Final = MAX_DICT_SIZE

_DICTIONARY: Final = b"dictionary/"
_ACTIVE: Final = b"active/"
_TRAINING: Final = b"training/"
_THROUGH: Final = b"through"
#: The index topic beside a registry topic: its name is the registry's and this.
INDEX_SUFFIX: Final = "-index"
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


class Pin(BaseModel):
    """An operator's pin of a namespace (`dicts pin`): no training replaces its active
    dictionary; activations and rollbacks by an operator keep it."""

    model_config = ConfigDict(frozen=True, extra="allow")

    by: str = Field(description="the process that pinned it: host:pid and role")
    at: datetime


class Activation(BaseModel):
    """Which dictionary a namespace uses from now on, who said so, and what came before.

    `pinned` rides on the activation (a reader of an older version keeps it as an unknown
    field and goes on), so a pin needs no record kind of its own and every reader agrees on
    it the moment it agrees on the active dictionary.
    """

    model_config = ConfigDict(frozen=True, extra="allow")

    namespace: Namespace
    dict_id: DictId
    action: Action
    by: str = Field(description="the process that published it: host:pid and role")
    at: datetime
    stack: tuple[DictId, ...] = Field(default=(), description="earlier active ids, latest last")
    pinned: Pin | None = Field(default=None, description="None: training may replace it")


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
class DictionaryRetired:
    """A dictionary's record was tombstoned (retired): no reader holds it any more."""

    dict_id: int
    namespace: str
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


Event = DictionaryAdded | Activated | TrainingRecorded | DictionaryRetired | Ignored


@dataclass(frozen=True, slots=True)
class Entry:
    """A verified dictionary's metadata and where its record is. The metadata is kept as JSON
    and parsed when asked for: a reader holds an entry per dictionary of the registry, and the
    parsed model costs several times its JSON."""

    namespace: str
    version: int
    offset: int
    meta_json: bytes

    @classmethod
    def of(cls, meta: DictionaryMeta, offset: int) -> Entry:
        return cls(meta.namespace, meta.version, offset, meta.model_dump_json().encode())

    @property
    def meta(self) -> DictionaryMeta:
        return DictionaryMeta.model_validate_json(self.meta_json)


#: How a reader reads one dictionary record again: (offset, metadata) -> the verified dictionary.
Fetch = Callable[[int, DictionaryMeta], Dictionary]


class Dictionaries:
    """Every verified dictionary of the registry by id: its metadata and record offset always,
    its bytes while in a cache bounded in bytes (least recently used out first), read again by
    offset (`fetch`) when asked for after that. Thread-safe; a fetch runs outside the lock.

    Without `fetch` every dictionary's bytes are kept (a reader with no topic to read them
    from again). With it, a dictionary applied while `cache_new` is false (a reader's start:
    `Registry.load`) is not kept: what a reader uses it asks for, and only that is read again.
    """

    def __init__(self, fetch: Fetch | None = None, max_bytes: int = 0) -> None:
        self.entries: dict[int, Entry] = {}
        self.fetch = fetch
        self.max_bytes = max_bytes
        self.cache_new = True
        self.cached_bytes = 0
        self._cache: OrderedDict[int, Dictionary] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[int]:
        """The ids (reading no bytes)."""
        return iter(list(self.entries))

    def __contains__(self, dict_id: object) -> bool:
        return dict_id in self.entries

    def __getitem__(self, dict_id: int) -> Dictionary:
        dictionary = self.get(dict_id)
        if dictionary is None:
            raise KeyError(dict_id)
        return dictionary

    def meta(self, dict_id: int) -> DictionaryMeta | None:
        entry = self.entries.get(dict_id)
        return None if entry is None else entry.meta

    def index(self, meta: DictionaryMeta, offset: int) -> None:
        """A dictionary known from the index: its bytes are read when asked for."""
        self.entries[meta.id] = Entry.of(meta, offset)

    def add(self, dictionary: Dictionary, offset: int) -> None:
        self.entries[dictionary.id] = Entry.of(dictionary.meta, offset)
        if self.cache_new:
            self._keep(dictionary)

    def remove(self, dict_id: int) -> Entry | None:
        """Forget a retired dictionary, its cached bytes too; returns its entry (None: unknown)."""
        with self._lock:
            cached = self._cache.pop(dict_id, None)
            if cached is not None:
                self.cached_bytes -= len(cached.data)
        return self.entries.pop(dict_id, None)

    def get(self, dict_id: int) -> Dictionary | None:
        """The dictionary `dict_id` (None: not in the registry), read again if not cached.

        Raises:
            UnknownDictionary: its record is gone; `RegistryUnavailable`: it was not read again
                in time (try later).
        """
        entry = self.entries.get(dict_id)
        if entry is None:
            return None
        with self._lock:
            dictionary = self._cache.get(dict_id)
            if dictionary is not None:
                self._cache.move_to_end(dict_id)
                return dictionary
        assert self.fetch is not None  # without fetch, every dictionary is cached
        dictionary = self.fetch(entry.offset, entry.meta)
        self._keep(dictionary)
        return dictionary

    def _keep(self, dictionary: Dictionary) -> None:
        with self._lock:
            if dictionary.id in self._cache:
                return
            self._cache[dictionary.id] = dictionary
            self.cached_bytes += len(dictionary.data)
            if self.fetch is None:
                return
            # The newest stays even when it alone is larger than the bound: it is in use.
            while self.cached_bytes > self.max_bytes and len(self._cache) > 1:
                _, old = self._cache.popitem(last=False)
                self.cached_bytes -= len(old.data)


@dataclass(frozen=True, slots=True)
class Claim:
    """The first record in the log that claimed an id: the only one that counts."""

    offset: int
    sha256: str


# -- record encoding -----------------------------------------------------------------------------


def dictionary_key(dictionary: Dictionary) -> bytes:
    return dictionary_key_of(dictionary.meta)


def dictionary_key_of(meta: DictionaryMeta) -> bytes:
    return b"%s%d/%s" % (_DICTIONARY, meta.id, meta.sha256.encode())


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


def index_records(
    state: RegistryState, since: int, mirrored: dict[bytes, object], registry_id: str
) -> tuple[list[Outgoing], int]:
    """The index records that bring the index topic up to what `state` has read, and the
    registry offset they cover up to: an entry per dictionary whose record is at or after
    `since`, each activation and training entry not in `mirrored` (key -> the object last
    written, updated here), then `through`; each for the registry topic `registry_id`."""
    records: list[Outgoing] = []

    def record(key: bytes, offset: int, **fields: object) -> Outgoing:
        fields = {"offset": offset, "registry": registry_id, **fields}
        value = json.dumps(fields, default=str, separators=(",", ":"))
        return key, value.encode(), [(FORMAT_HEADER, FORMAT)]

    with state._lock:
        entries = [e for e in state.dictionaries.entries.values() if e.offset >= since]
        named = [
            (_ACTIVE + ns.encode(), a, a.model_dump(mode="json"))
            for ns, a in state.activations.items()
        ] + [(_TRAINING + ns.encode(), t, t) for ns, t in state.trainings.items()]
        position, high = state.position, max([state.high_id, *state.claims])
    for entry in sorted(entries, key=lambda e: e.offset):
        meta = entry.meta
        records.append(
            record(dictionary_key_of(meta), entry.offset, meta=meta.model_dump(mode="json"))
        )
    for key, current, value in named:
        if mirrored.get(key) is not current:
            records.append(record(key, state.offsets.get(key, 0), value=value))
            mirrored[key] = current
    records.append(record(_THROUGH, position, high_id=high))
    return records, position


class RegistryState:
    """What the registry says, built by applying its records in log order. Pure; thread-safe."""

    def __init__(self, fetch: Fetch | None = None, cache_bytes: int = 0) -> None:
        """`fetch` reads a dictionary's record again (None: keep every dictionary's bytes);
        `cache_bytes` bounds the bytes kept with it (`Dictionaries`)."""
        self.claims: dict[int, Claim] = {}
        self.dictionaries = Dictionaries(fetch, cache_bytes)
        self.activations: dict[str, Activation] = {}
        self.trainings: dict[str, dict[str, Any]] = {}
        #: The registry offset of each namespace's activation and training entry applied: one
        #: learnt from the index is replaced only by a later one.
        self.offsets: dict[bytes, int] = {}
        #: The highest id ever claimed, as the index says (claims may have been compacted away).
        self.high_id = MIN_DICT_ID - 1
        #: The offset below which the index says every registry record is in it (0: none).
        self.index_through = 0
        #: Index records read that were written for another registry topic (ignored).
        self.index_stale = 0
        #: Ids retired as this reader read their tombstones (their ids stay in `claims`).
        self.retired: set[int] = set()
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
            return _guarded(offset, key, lambda: self._apply(offset, key, value, headers or ()))

    def apply_index(
        self, offset: int, key: bytes | None, value: bytes | None, registry_id: str
    ) -> Event | None:
        """Apply one record of the index topic (see `index_records`) of the registry topic
        `registry_id`; `offset` is the index record's. A record of another registry topic is
        counted in `index_stale`, not applied. Never raises: one that cannot be applied is
        returned as `Ignored`."""
        with self._lock:
            return _guarded(offset, key, lambda: self._apply_index(offset, key, value, registry_id))

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
        if value is None:  # a losing claim withdrawn (nothing to do), or a retirement
            if claim is None or claim.sha256 != sha:
                return None
            return self._retire(dict_id, offset)
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
        self.dictionaries.add(dictionary, offset)
        return DictionaryAdded(dictionary, offset)

    def _apply_activation(self, offset: int, key: bytes, value: bytes | None) -> Event | None:
        namespace = validate_namespace(key[len(_ACTIVE) :].decode("ascii"))
        if value is None:
            raise _refused("tombstone", "activation tombstone; the last one stays")
        _within("too_large", len(value), MAX_JSON_VALUE, "activation")
        activation = Activation.model_validate_json(value)
        if activation.namespace != namespace:
            raise _refused("invalid", f"activation for {activation.namespace} under key {key!r}")
        target = self.dictionaries.entries.get(activation.dict_id)
        if target is None or target.namespace != namespace:
            raise _refused(
                "invalid",
                f"activates {activation.dict_id}, which is not a dictionary of {namespace}",
            )
        if not self._newest(key, offset):
            return None
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
        if not self._newest(key, offset):
            return None
        self.trainings[namespace] = entry
        return TrainingRecorded(namespace, entry, offset)

    def _retire(self, dict_id: int, offset: int) -> Event | None:
        """Forget the dictionary whose record (or index record) was tombstoned; its claim stays,
        so that its id is never reused."""
        user = self.user(dict_id)
        if user is not None:
            raise _refused("tombstone", f"tombstone of a dictionary in use ({user}); ignored")
        entry = self.dictionaries.remove(dict_id)
        if entry is None:
            return None
        self.retired.add(dict_id)
        return DictionaryRetired(dict_id, entry.namespace, offset)

    def user(self, dict_id: int) -> str | None:
        """What keeps `dict_id` from retirement: the namespace it is active in or in the
        rollback stack of, in words (None: neither)."""
        for namespace, activation in self.activations.items():
            if activation.dict_id == dict_id:
                return f"active in {namespace}"
            if dict_id in activation.stack:
                return f"in the rollback stack of {namespace}"
        return None

    def _newest(self, key: bytes, offset: int) -> bool:
        """Whether the record of `key` at `offset` is the newest read yet (then noted)."""
        if self.offsets.get(key, -1) > offset:
            return False
        self.offsets[key] = offset
        return True

    def _apply_index(
        self, index_offset: int, key: bytes | None, value: bytes | None, registry_id: str
    ) -> Event | None:
        if key is None:
            return None
        if value is None:
            return self._index_tombstone(index_offset, key)
        _within("too_large", len(value), MAX_JSON_VALUE, "index record")
        record = json.loads(value)
        if not isinstance(record, dict) or not _is_offset(record.get("offset")):
            raise _refused("malformed", "an index record is a JSON object with an offset")
        if record.get("registry") != registry_id:
            self.index_stale += 1
            if key == _THROUGH:  # ids claimed in a registry topic since lost stay claimed
                self._raise_high_id(record.get("high_id"))
            return None
        offset: int = record["offset"]
        if key == _THROUGH:
            self.index_through = offset
            self._raise_high_id(record.get("high_id"))
            return None
        if key.startswith(_DICTIONARY):
            self._index_dictionary(key, record.get("meta"), offset)
            return None
        inner = json.dumps(record.get("value")).encode()
        if key.startswith(_ACTIVE):
            namespace = validate_namespace(key[len(_ACTIVE) :].decode("ascii"))
            activation = Activation.model_validate_json(inner)
            if activation.namespace != namespace or not self._newest(key, offset):
                return None
            self.activations[namespace] = activation
            return Activated(activation, offset)
        if key.startswith(_TRAINING):
            return self._apply_training(offset, key, inner)
        raise _refused("unknown_key", "unknown index key")

    def _index_dictionary(self, key: bytes, raw_meta: object, offset: int) -> None:
        """A dictionary's index entry: its metadata, and the offset of its registry record."""
        dict_id, sha = _dictionary_key(key)
        meta = DictionaryMeta.model_validate(raw_meta)
        if meta.id != dict_id or meta.sha256 != sha:
            raise _refused("invalid", f"index entry of {dict_id} names {meta.id}")
        if dict_id in self.claims:
            return  # known: the first claim stays
        self.claims[dict_id] = Claim(offset, sha)
        self.dictionaries.index(meta, offset)

    def _index_tombstone(self, index_offset: int, key: bytes) -> Event | None:
        """A tombstone in the index: a retirement forgets its dictionary (as the registry's own
        tombstone does); any other (`IndexTopic.rebuild`'s) forgets nothing."""
        if not key.startswith(_DICTIONARY):
            return None
        dict_id, sha = _dictionary_key(key)
        claim = self.claims.get(dict_id)
        if claim is None or claim.sha256 != sha:
            return None
        return self._retire(dict_id, index_offset)

    def _raise_high_id(self, high: object) -> None:
        if isinstance(high, int) and MIN_DICT_ID <= high <= MAX_DICT_ID:
            self.high_id = max(self.high_id, high)

    # -- questions -----------------------------------------------------------------------------

    def active(self, namespace: str) -> Dictionary | None:
        """`namespace`'s active dictionary (read again if not cached: see `Dictionaries`)."""
        activation = self.activations.get(namespace)
        return None if activation is None else self.dictionaries.get(activation.dict_id)

    def versions(self, namespace: str | None = None) -> list[DictionaryMeta]:
        """Metadata of the dictionaries of `namespace` (all if None), by namespace and version."""
        with self._lock:
            entries = list(self.dictionaries.entries.values())
        found = sorted(
            (e for e in entries if namespace in (None, e.namespace)),
            key=lambda e: (e.namespace, e.version),
        )
        return [e.meta for e in found]

    def next_id(self, avoid: Iterable[int] = ()) -> int:
        """The lowest id above every claimed one and every id in `avoid`."""
        with self._lock:
            highest = max([self.high_id, *self.claims, *avoid])
        if highest >= MAX_DICT_ID:
            raise RegistryError(f"dictionary ids {MIN_DICT_ID}..{MAX_DICT_ID} are used up")
        return highest + 1

    def next_version(self, namespace: str, at_least: int = 1) -> int:
        with self._lock:
            entries = list(self.dictionaries.entries.values())
        return max([at_least, *(e.version + 1 for e in entries if e.namespace == namespace)])


def _guarded(offset: int, key: bytes | None, apply: Callable[[], Event | None]) -> Event | None:
    """`apply()`, or the `Ignored` saying why it could not apply a record."""
    shown = _shown_key(key)
    try:
        return apply()
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
        return Ignored(offset, shown, "malformed", f"{type(exc).__name__}: {_one_line(exc)}")


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


def _is_offset(value: object) -> bool:
    return type(value) is int and 0 <= value < 2**63


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
