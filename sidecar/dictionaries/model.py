"""What a stored dictionary is: its raw zstd bytes and the metadata that identifies and audits it.

Pure data, no I/O: the store reads and writes these, the codec and training use them.
"""

from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Final

import zstandard
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from sidecar.errors import ConfigError, DictionaryIntegrityError

#: zstd reserves ids 1..32767 and >= 2**31 for public registration (RFC 8878 §5): we allocate from
#: the private range in between, so our ids never collide with a registered dictionary.
MIN_DICT_ID: Final = 32768
MAX_DICT_ID: Final = 2**31 - 1

#: The largest dictionary we train (the `training.dict_sizes` bound) and therefore read, bytes.
MAX_DICT_SIZE: Final = 1 << 20
#: The largest metadata we read, bytes: ours is under 1 KiB, unknown keys are kept, so room to grow.
MAX_META_SIZE: Final = 64 * 1024
#: zstd levels a dictionary's metadata may name: the bounds of the `codec.level` setting.
MIN_LEVEL: Final = -7
MAX_LEVEL: Final = 22
#: The highest `compression.level` librdkafka accepts (its configuration refuses 13 and above).
MAX_BATCH_LEVEL: Final = 12
#: Versions and sizes are Java ints on the Kafka side; nothing legitimate comes near this.
MAX_INT32: Final = 2**31 - 1
#: Records a producer batch may hold by librdkafka's bounds (batch.num.messages); an output
#: crossover beyond it could never be reached.
MAX_BATCH_RECORDS: Final = 1_000_000

#: Little-endian magic number that opens a "full" zstd dictionary (RFC 8878 §5).
DICT_MAGIC: Final = b"\x37\xa4\x30\xec"

# Kafka's topic-name rule: namespaces default to the input topic name, so they share it.
_NAMESPACE_RE: Final = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_SHA256_RE: Final = r"^[0-9a-f]{64}$"
#: The longest decimal text of an id (2**31 - 1 has 10 digits).
_ID_DIGITS: Final = len(str(MAX_DICT_ID))


def is_valid_namespace(namespace: str) -> bool:
    """Whether `namespace` is a valid name: Kafka's topic-name rules, and not starting with `.`
    (a namespace is a directory of the store, whose own `.ids` directory sits beside them, so
    that no namespace can be, or hide like, that one)."""
    return bool(_NAMESPACE_RE.fullmatch(namespace)) and not namespace.startswith(".")


def validate_namespace(namespace: str) -> str:
    """Return `namespace` if it is a valid name (`is_valid_namespace`), else raise
    `ConfigError`."""
    if not is_valid_namespace(namespace):
        raise ConfigError(
            f"invalid namespace {namespace[:260]!r}: use 1-249 characters of A-Z a-z 0-9 . _ - "
            "(the rules of Kafka topic names), not starting with '.' (the store keeps its id "
            "reservations in .ids)"
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


def parse_dict_id(text: str) -> int | None:
    """The id written as `text` (ASCII decimal, canonical, in range), None if it is not one.

    For ids read from names and files: `str.isdigit` alone would take '²' and '٣', and `int`
    would take ' 7', '+7' and '0007'.
    """
    if not (0 < len(text) <= _ID_DIGITS and text.isascii() and text.isdigit()):
        return None
    dict_id = int(text)
    if str(dict_id) != text or not MIN_DICT_ID <= dict_id <= MAX_DICT_ID:
        return None
    return dict_id


def describe_invalid(exc: ValidationError) -> str:
    """A pydantic error on one line: each field and what is wrong with it, without the input."""
    return "; ".join(
        f"{'.'.join(map(str, error['loc'])) or 'value'}: {error['msg']}" for error in exc.errors()
    )[:400]


def _namespace_value(namespace: str) -> str:
    try:
        return validate_namespace(namespace)
    except ConfigError as exc:  # pydantic reports a ValueError as a validation error
        raise ValueError(str(exc)) from None


#: A dictionary id as metadata and activations carry it: a JSON integer in the private range.
DictId = Annotated[int, Field(strict=True, ge=MIN_DICT_ID, le=MAX_DICT_ID)]
#: A namespace as metadata and activations carry it (`validate_namespace`).
Namespace = Annotated[str, AfterValidator(_namespace_value)]
#: A producer batch codec as librdkafka names it (compression.type).
BatchCodec = Annotated[str, Field(pattern=r"^[a-z0-9]{1,16}$")]
#: Records per batch of an output crossover.
CrossoverFill = Annotated[float, Field(ge=1.0, le=MAX_BATCH_RECORDS, allow_inf_nan=False)]


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


def check_loadable(data: bytes, level: int, source: str) -> None:
    """Load `data` the way the codec will, both ways; raise if zstd refuses its entropy tables.

    A valid magic, id and sha256 say nothing about the tables behind them: without this check a
    broken dictionary would be accepted, and fail later in the middle of encoding or decoding.
    """
    try:
        zdict = zstandard.ZstdCompressionDict(data, dict_type=zstandard.DICT_TYPE_FULLDICT)
        zdict.precompute_compress(level=level)
        zstandard.ZstdDecompressor(dict_data=zdict)
    except zstandard.ZstdError as exc:
        raise DictionaryIntegrityError(f"{source}: zstd refuses the dictionary: {exc}") from None


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
    """The `<id>.json` next to every `<id>.zdict`; unknown keys are kept (forward compatible).

    Every field is bounded: metadata comes from files and from the registry topic, and a value
    out of range (a level of 2**40, an id of 0) must be refused here, not fail where it is used.
    """

    model_config = ConfigDict(frozen=True, extra="allow")

    id: DictId
    namespace: Namespace
    version: int = Field(strict=True, ge=1, le=MAX_INT32, description="1, 2, 3... per namespace")
    sha256: str = Field(pattern=_SHA256_RE, description="hex sha256 of the dictionary bytes")
    size: int = Field(strict=True, ge=8, le=MAX_DICT_SIZE, description="dictionary size in bytes")
    created_at: datetime
    zstd_version: str = Field(max_length=64)
    level: int = Field(
        strict=True,
        ge=MIN_LEVEL,
        le=MAX_LEVEL,
        description="the compression level chosen on held-out data",
    )
    heldout_ratio: float = Field(
        ge=0, allow_inf_nan=False, description="raw bytes / (frame + header) bytes on held-out data"
    )
    nodict_ratio: float = Field(
        ge=0, allow_inf_nan=False, description="the same ratio without a dictionary, same held-out"
    )
    break_even_size: int = Field(
        strict=True, ge=0, le=MAX_INT32, description="bytes; smaller values are not compressed"
    )
    parent_id: DictId | None = Field(default=None, description="the champion this one replaced")
    training: TrainingSample
    raw_crossover: dict[BatchCodec, CrossoverFill | None] | None = Field(
        default=None,
        description="per producer batch codec (zstd, lz4), the fill (records per batch) from "
        "which raw values store fewer bytes than this dictionary's frames, measured on the "
        "training values; None for a codec: frames win at every fill measured; a codec "
        "missing (or the field, in metadata written before it existed): unknown",
    )

    batch_level: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        le=MAX_BATCH_LEVEL,
        description="the zstd level of the producer's batches (compression.level), chosen on "
        "held-out values within training.batch_level_budget_us; None (metadata written before "
        "it existed): the producer's default",
    )

    def output_crossover(self, codec: str) -> float | None:
        """The fill from which raw values with batch codec `codec` store fewer bytes than this
        dictionary's frames; None when frames win at every fill measured, or when it is unknown
        (not measured for that codec): either way frames are written."""
        return (self.raw_crossover or {}).get(codec)


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
        """A `Dictionary`, refusing bytes that do not match `meta` or that zstd cannot load.

        The one check every dictionary read from outside passes (store files, registry records);
        `source` names where it came from.
        """
        if not MIN_DICT_ID <= meta.id <= MAX_DICT_ID:  # a meta built without validation
            raise DictionaryIntegrityError(
                f"dictionary {meta.id} ({source}): the id is outside {MIN_DICT_ID}..{MAX_DICT_ID}"
            )
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
        check_loadable(data, meta.level, f"dictionary {meta.id} ({source})")
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
    `extra` keys are kept in the metadata (e.g. the requested dictionary size, the output
    crossover: `raw_crossover`).
    """
    data = with_dict_id(data, validate_dict_id(dict_id))
    try:
        # Validated from a mapping: `extra` may also set declared optional fields (raw_crossover).
        meta = DictionaryMeta.model_validate(
            dict(
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
        )
    except ValidationError as exc:
        raise ConfigError(f"dictionary {dict_id} of {namespace}: {describe_invalid(exc)}") from None
    return Dictionary(meta=meta, data=data)


def with_new_id(dictionary: Dictionary, dict_id: int) -> Dictionary:
    """The same dictionary under another id (its header and sha256 change with it)."""
    data = with_dict_id(dictionary.data, validate_dict_id(dict_id))
    meta = dictionary.meta.model_copy(
        update={"id": dict_id, "sha256": sha256_hex(data), "size": len(data)}
    )
    return Dictionary(meta=meta, data=data)
