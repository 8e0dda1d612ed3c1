"""A bounds check of a Kafka message against its kio schema, before kio parses it.

kio's parser allocates for a declared array count before it checks the count against the
frame: a 35-byte Fetch response declaring 2**31 topics asks for 32 GiB and aborts the process.
`check` walks the same schema (kio's generated dataclasses: each field's `kafka_type`, whether
it is an array, nullable, a nested entity or a tagged field) over the bytes, reading only
lengths and counts: every length must end inside the frame, and every array count must fit the
bytes left at the fewest bytes one of its entries can take. It allocates nothing per entry, so
whatever passes it, kio parses within the frame's own size.

Layout (Kafka's protocol guide): fixed-size primitives; strings (int16 length, compact: an
unsigned varint of length + 1), bytes and records (int32 length, compact likewise), -1 or 0 for
null; arrays (int32 count, compact: varint count + 1); a nullable nested entity (KIP-893) is
preceded by an int8 marker, -1 for null; a flexible entity ends with its tagged fields (a varint
count, then per field a varint tag, a varint size and that many bytes, the known tags read as
their field).
"""

from __future__ import annotations

import dataclasses
import functools
import struct
import types
import typing
from dataclasses import dataclass
from typing import Any, Final

from sidecar.errors import ProtocolError
from sidecar.wire.varint import read_uvarint

#: Bytes of the fixed-size `kafka_type`s.
_FIXED: Final = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}
#: Variable-size `kafka_type`s and the bytes of their length in the classic encoding.
_SIZED: Final = {"string": 2, "bytes": 4, "records": 4}
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
#: kio class -> its layout, read once (kio's classes are a fixed set).
_LAYOUTS: dict[type[Any], _Layout] = {}


@dataclass(frozen=True, slots=True)
class _Field:
    """How one field of an entity is laid out."""

    name: str
    #: A primitive's `kafka_type`, or None for a nested entity.
    kafka_type: str | None
    entity: type[Any] | None
    array: bool
    nullable_entity: bool


@dataclass(frozen=True, slots=True)
class _Layout:
    flexible: bool
    fields: tuple[_Field, ...]
    tagged: dict[int, _Field]


def check(schema: type[Any], frame: bytes, offset: int = 0) -> int:
    """Where the message of kio class `schema` that starts at `offset` in `frame` ends.

    Raises:
        ProtocolError: a length or count runs past the frame.
    """
    try:
        return _entity(schema, frame, offset, len(frame))
    except (IndexError, struct.error):
        raise ProtocolError(f"{schema.__name__} ends inside a field (truncated)") from None


def top_level_tags(schema: type[Any], frame: bytes, offset: int = 0) -> int:
    """How many tagged fields the message of kio class `schema` that starts at `offset` in
    `frame` carries at its top level (0 for a version that is not flexible), its fields before
    them bounds-checked on the way.

    Raises:
        ProtocolError: a length or count runs past the frame.
    """
    layout = _layout(schema)
    if not layout.flexible:
        return 0
    end = len(frame)
    try:
        pos = offset
        for field in layout.fields:
            pos = _field(field, True, frame, pos, end)
        count, _ = read_uvarint(frame, pos, end)
    except (IndexError, struct.error):
        raise ProtocolError(f"{schema.__name__} ends inside a field (truncated)") from None
    return count


def _entity(cls: type[Any], data: bytes, pos: int, end: int) -> int:
    layout = _layout(cls)
    for field in layout.fields:
        pos = _field(field, layout.flexible, data, pos, end)
    if layout.flexible:
        count, pos = read_uvarint(data, pos, end)
        for _ in range(count):
            tag, pos = read_uvarint(data, pos, end)
            size, pos = read_uvarint(data, pos, end)
            stop = pos + size
            _fits(stop, end, f"{cls.__name__}'s tagged field {tag}")
            known = layout.tagged.get(tag)
            if known is not None and _field(known, True, data, pos, stop) != stop:
                raise ProtocolError(f"{cls.__name__}'s tagged field {tag} is not {size} bytes")
            pos = stop
    return pos


def _field(field: _Field, flexible: bool, data: bytes, pos: int, end: int) -> int:
    if field.array:
        if flexible:
            count, pos = read_uvarint(data, pos, end)
            count -= 1
        else:
            count, pos = _INT32.unpack_from(data, pos)[0], pos + 4
        if count < 0:
            return pos  # null
        fewest = max(1, _fewest(field))
        if count * fewest > end - pos:
            raise ProtocolError(
                f"{field.name} declares {count} entries, more than the {end - pos} bytes left hold"
            )
        for _ in range(count):
            pos = _one(field, flexible, data, pos, end)
        return pos
    return _one(field, flexible, data, pos, end)


def _one(field: _Field, flexible: bool, data: bytes, pos: int, end: int) -> int:
    if field.entity is not None:
        if field.nullable_entity:
            marker = data[pos]
            pos += 1
            if marker == 0xFF:  # -1: null
                return pos
        return _entity(field.entity, data, pos, end)
    kafka_type = field.kafka_type
    assert kafka_type is not None
    fixed = _FIXED.get(kafka_type)
    if fixed is not None:
        return _fits(pos + fixed, end, field.name)
    if flexible:
        length, pos = read_uvarint(data, pos, end)
        length -= 1
    elif _SIZED[kafka_type] == 2:
        length, pos = _INT16.unpack_from(data, pos)[0], pos + 2
    else:
        length, pos = _INT32.unpack_from(data, pos)[0], pos + 4
    return pos if length < 0 else _fits(pos + length, end, field.name)


def _fits(stop: int, end: int, what: str) -> int:
    if stop > end:
        raise ProtocolError(f"{what} runs {stop - end} bytes past the end of its frame")
    return stop


@functools.cache
def _fewest(field: _Field) -> int:
    """The fewest bytes one entry of `field` takes (flexible or not: the smaller)."""
    if field.entity is None:
        assert field.kafka_type is not None
        return _FIXED.get(field.kafka_type, 1)
    layout = _layout(field.entity)
    fewest = sum(_fewest(f) if not f.array else 1 for f in layout.fields)
    return fewest + (1 if layout.flexible else 0)


def _layout(cls: type[Any]) -> _Layout:
    layout = _LAYOUTS.get(cls)
    if layout is None:
        layout = _LAYOUTS[cls] = _read_layout(cls)
    return layout


def _read_layout(cls: type[Any]) -> _Layout:
    hints = typing.get_type_hints(cls)
    plain: list[_Field] = []
    tagged: dict[int, _Field] = {}
    for field in dataclasses.fields(cls):
        described = _describe(field, hints[field.name])
        tag = field.metadata.get("tag")
        if tag is None:
            plain.append(described)
        else:
            # A tagged field is optional by its presence, never by a null marker.
            tagged[int(tag)] = dataclasses.replace(described, nullable_entity=False)
    return _Layout(bool(cls.__flexible__), tuple(plain), tagged)


def _describe(field: dataclasses.Field[Any], hint: Any) -> _Field:
    nullable = False
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
        nullable = True
    array = typing.get_origin(hint) is tuple
    if array:
        hint = typing.get_args(hint)[0]
        inner = typing.get_origin(hint)
        if inner in (types.UnionType, typing.Union):
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _Field(field.name, None, hint, array, nullable and not array)
    return _Field(field.name, str(field.metadata["kafka_type"]), None, array, False)
