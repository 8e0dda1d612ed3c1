"""kio payloads of any API version, every field filled, for the proxy's tests."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import types
import typing
import uuid
from typing import Any

from kio.schema.errors import ErrorCode


def filled(cls: type[Any], **values: Any) -> Any:
    """An instance of kio class `cls`: `values`, and every other field given a plain value
    of its type (entries of arrays of entities: one each)."""
    hints = typing.get_type_hints(cls)
    fields = {}
    for field in dataclasses.fields(cls):
        if field.name in values:
            fields[field.name] = values[field.name]
        else:
            fields[field.name] = _value(hints[field.name])
    return cls(**fields)


def _value(hint: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return None  # optional fields: null
    if origin is tuple:
        (item, _ellipsis) = typing.get_args(hint)
        return (filled(item),) if isinstance(item, type) and dataclasses.is_dataclass(item) else ()
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return filled(hint)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return ErrorCode.none if issubclass(hint, ErrorCode) else next(iter(hint))
    for kind, value in _SCALARS:  # bool before int: bool is an int
        if isinstance(hint, type) and issubclass(hint, kind):
            return value
    raise TypeError(f"no test value for {hint!r}")


_SCALARS: tuple[tuple[type[Any], Any], ...] = (
    (bool, False),
    (int, 1),
    (str, "s"),
    (datetime.timedelta, datetime.timedelta(milliseconds=5)),
    (datetime.datetime, datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)),
    (uuid.UUID, uuid.UUID(int=7)),
    (bytes, b""),
)
