"""What a stored dictionary is: its raw zstd bytes and the metadata that identifies and audits it.

Pure data, no I/O: the store reads and writes these, the codec and training use them.
"""

from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

import zstandard
from pydantic import BaseModel, ConfigDict, Field

from sidecar.errors import ConfigError, DictionaryIntegrityError

#: zstd reserves ids 1..32767 and >= 2**31 for public registration (RFC 8878 §5): we allocate from
#: the private range in between, so our ids never collide with a registered dictionary.
MIN_DICT_ID: Final = 32768
MAX_DICT_ID: Final = 2**31 - 1

#: Little-endian magic number that opens a "full" zstd dictionary (RFC 8878 §5).
DICT_MAGIC: Final = b"\x37\xa4\x30\xec"

# Kafka's topic-name rule: namespaces default to the input topic name, so they share it.
_NAMESPACE_RE: Final = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def validate_namespace(namespace: str) -> str:
    """Return `namespace` if it is a valid name (Kafka topic rules), else raise `ConfigError`."""
    if not _NAMESPACE_RE.fullmatch(namespace) or namespace in {".", ".."}:
        raise ConfigError(
            f"invalid namespace {namespace!r}: use 1-249 characters of A-Z a-z 0-9 . _ - "
            "(the rules of Kafka topic names), not '.' or '..'"
        )
    return namespace


def validate_dict_id(dict_id: int) -> int:
    """Return `dict_id` if it lies in the private range we allocate from, else raise."""
    if not MIN_DICT_ID <= dict_id <= MAX_DICT_ID:
        raise ConfigError(
            f"dictionary id {dict_id} is outside {MIN_DICT_ID}..{MAX_DICT_ID}, "
            "the range zstd leaves for private dictionaries"
        )
    return dict_id


def embedded_dict_id(data: bytes, source: str = "the data") -> int:
    """The dictionary id written in a full zstd dictionary's header; raise if `data` is not one."""
    if len(data) < 8 or data[:4] != DICT_MAGIC:
        raise DictionaryIntegrityError(
            f"{source} is not a zstd dictionary: it does not start with the magic number "
            "37 a4 30 ec (raw-content dictionaries are refused on purpose)"
        )
    (dict_id,) = struct.unpack_from("<I", data, 4)
    return int(dict_id)


def with_dict_id(data: bytes, dict_id: int) -> bytes:
    """Return a copy of dictionary `data` whose header carries `dict_id`.

    The id is a plain header field (RFC 8878 §5) that nothing else depends on, so rewriting it
    after training is safe; frames compressed with the result carry the same id, which is what
    lets a decoder catch a record whose header points at the wrong dictionary.
    """
    embedded_dict_id(data)
    return data[:4] + struct.pack("<I", dict_id) + data[8:]


def sha256_hex(data: bytes) -> str:
    """Hex sha256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def utc_now() -> datetime:
    """The current time, timezone-aware UTC (metadata timestamps are always UTC)."""
    return datetime.now(UTC)


class TrainingSample(BaseModel):
    """What a dictionary was trained on."""

    model_config = ConfigDict(frozen=True, extra="allow")

    count: int = Field(ge=0, description="training messages")
    bytes: int = Field(ge=0, description="training bytes")
    heldout_count: int = Field(ge=0, description="held-out messages the ratio was measured on")
    heldout_bytes: int = Field(ge=0, description="held-out bytes")
    window: str = Field(default="", description="where the sample came from (file, topic range)")


class DictionaryMeta(BaseModel):
    """The `<id>.json` next to every `<id>.zdict`; unknown keys are kept (forward compatible)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    id: int
    namespace: str
    version: int = Field(ge=1, description="1, 2, 3... per namespace")
    sha256: str
    size: int = Field(ge=0, description="dictionary size in bytes")
    created_at: datetime
    zstd_version: str
    level: int = Field(description="the compression level chosen on held-out data")
    heldout_ratio: float = Field(description="raw bytes / (frame + header) bytes on held-out data")
    nodict_ratio: float = Field(description="the same ratio without a dictionary, same held-out")
    break_even_size: int = Field(ge=0, description="bytes; smaller values are not compressed")
    parent_id: int | None = Field(default=None, description="the champion this one replaced")
    training: TrainingSample


@dataclass(frozen=True, slots=True)
class Dictionary:
    """A verified dictionary: its bytes matched the sha256 and id of its metadata."""

    meta: DictionaryMeta
    data: bytes

    @property
    def id(self) -> int:
        return self.meta.id

    @property
    def namespace(self) -> str:
        return self.meta.namespace

    @classmethod
    def verified(cls, meta: DictionaryMeta, data: bytes, source: str) -> Dictionary:
        """A `Dictionary`, refusing bytes that do not match `meta`; `source` names the file."""
        digest = sha256_hex(data)
        if digest != meta.sha256:
            raise DictionaryIntegrityError(
                f"dictionary {meta.id} ({source}): sha256 {digest} does not match the "
                f"metadata's {meta.sha256}; the file is corrupt or was replaced - restore it "
                "from the registry or a backup, never edit it by hand"
            )
        if len(data) != meta.size:
            raise DictionaryIntegrityError(
                f"dictionary {meta.id} ({source}): {len(data)} bytes, metadata says {meta.size}"
            )
        embedded = embedded_dict_id(data, source)
        if embedded != meta.id:
            raise DictionaryIntegrityError(
                f"dictionary {meta.id} ({source}): its header carries id {embedded}"
            )
        return cls(meta=meta, data=data)


def build_dictionary(
    namespace: str,
    data: bytes,
    *,
    dict_id: int,
    version: int,
    level: int,
    heldout_ratio: float,
    nodict_ratio: float,
    break_even_size: int,
    training: TrainingSample,
    parent_id: int | None = None,
    **extra: object,
) -> Dictionary:
    """A new dictionary: `data` re-headed with `dict_id`, and metadata describing it.

    Pure: the store (`DictionaryStore.put`) and the registry (`Registry.publish`) persist it.
    `extra` keys are kept in the metadata (e.g. the requested dictionary size).
    """
    data = with_dict_id(data, validate_dict_id(dict_id))
    meta = DictionaryMeta(
        id=dict_id,
        namespace=validate_namespace(namespace),
        version=version,
        sha256=sha256_hex(data),
        size=len(data),
        created_at=utc_now(),
        zstd_version=".".join(map(str, zstandard.ZSTD_VERSION)),
        level=level,
        heldout_ratio=heldout_ratio,
        nodict_ratio=nodict_ratio,
        break_even_size=break_even_size,
        parent_id=parent_id,
        training=training,
        **extra,
    )
    return Dictionary(meta=meta, data=data)


def with_new_id(dictionary: Dictionary, dict_id: int) -> Dictionary:
    """The same dictionary under another id (its header and sha256 change with it)."""
    data = with_dict_id(dictionary.data, validate_dict_id(dict_id))
    meta = dictionary.meta.model_copy(
        update={"id": dict_id, "sha256": sha256_hex(data), "size": len(data)}
    )
    return Dictionary(meta=meta, data=data)
