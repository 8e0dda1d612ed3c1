"""The answer the proxy gives itself to a request it does not forward: the API's own response in
the request's version, built from kio's schema, carrying an error code a client understands.

Every field is given its schema default or the zero of its type; every error code is the
refusal's (an error message, where the response has one, says why). Where the response answers
the request's entries one by one (topics, their partitions, groups, resources), each entry the
request named is answered by one of its own, found by field names and types: its topic name,
id, partition index, resource or group copied, its error the one `entry_error` gives its topic.
A client then sees the error on what it asked for, as from a broker, rather than a response
missing it (which some clients take for a broken session). When entries carrying errors are
answered, the response's top-level error code is NONE: there it speaks of the request as a
whole (Fetch's: of its session), and the entries say what went wrong.
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName

from sidecar.proxy.responses import encode_response, response_class

#: The fields that say which topic (or config resource) an entry is about.
_TOPIC_ID: Final = "topic_id"
_RESOURCE_FIELDS: Final = ("resource_type", "resource_name")
#: The fields that say which partition an entry is about.
_PARTITION_FIELDS: Final = ("partition_index", "partition")
_MESSAGE_FIELDS: Final = ("error_message", "message")


@dataclass(frozen=True, slots=True)
class EntryKey:
    """What a request's entry names: a topic by name or id, or a config resource."""

    name: str | None = None
    topic_id: uuid.UUID | None = None
    resource_type: int | None = None


#: The error of the entry answering a request's entry (by what it names).
EntryError = Callable[[EntryKey], ErrorCode]


def answer(
    api_key: int,
    version: int,
    correlation_id: int,
    error: ErrorCode,
    message: str,
    *,
    request: Any = None,
    entry_error: EntryError | None = None,
) -> bytes:
    """The response frame (size prefix included) refusing a request of `api_key` in `version`
    with `error`; with the parsed `request`, its entries answered each (see module), with the
    error `entry_error` gives (default: `error`)."""
    cls = response_class(api_key, version)
    if request is None:
        return encode_response(correlation_id, _zero(cls, error, message))
    mirror = _Mirror(entry_error or (lambda _key: error), message)
    body, echoed = mirror.entity(cls, request, EntryKey(), top=True)
    if echoed and "error_code" in _fields(cls):
        body = dataclasses.replace(body, error_code=ErrorCode.none)
    return encode_response(correlation_id, body)


@dataclass(frozen=True, slots=True)
class _Mirror:
    """Builds response entries after the request's (see module)."""

    entry_error: EntryError
    message: str

    def entity(
        self, cls: type[Any], source: Any, parent: EntryKey, *, top: bool = False
    ) -> tuple[Any, bool]:
        """An instance of response class `cls` answering request entry `source` (an entity,
        a topic name or a partition index) within `parent`'s topic; whether it holds entries
        answered after the request's."""
        key = _key(source, parent)
        error = self.entry_error(key)
        values: dict[str, Any] = _named_by(cls, source)
        echoed = False
        for field_name, hint in _hints(cls).items():
            inner = _array_item(hint)
            if inner is not None and dataclasses.is_dataclass(inner):
                items = _matching_array(source, field_name, typing.cast(type[Any], inner))
                if items is not None:
                    entry_cls = typing.cast(type[Any], inner)
                    values[field_name] = tuple(
                        self.entity(entry_cls, item, key)[0] for item in items
                    )
                    echoed = echoed or _carries_error(entry_cls)
            elif inner is None and not top:
                value = _scalar(field_name, hint, source, key)
                if value is not _NONE:
                    values[field_name] = value
        return dataclasses.replace(_zero(cls, error, self.message), **values), echoed


#: No value for a field from the request.
_NONE: Final = object()


def _scalar(field_name: str, hint: Any, source: Any, key: EntryKey) -> Any:
    """The value of response field `field_name` copied from request entry `source`."""
    if strip_none(hint) is TopicName:
        return _NONE if key.name is None else TopicName(key.name)
    if field_name == _TOPIC_ID:
        return _NONE if key.topic_id is None else key.topic_id
    if field_name in _PARTITION_FIELDS:
        if isinstance(source, int):
            return source
        for alias in _PARTITION_FIELDS:
            if dataclasses.is_dataclass(source) and alias in _fields(type(source)):
                return getattr(source, alias)
        return _NONE
    same = dataclasses.is_dataclass(source) and field_name in _fields(type(source))
    if same and strip_none(_hints(type(source))[field_name]) == strip_none(hint):
        return getattr(source, field_name)
    return _NONE


def _named_by(cls: type[Any], source: Any) -> dict[str, Any]:
    """A request entry that is a string alone (a group id, a topic name) as the first string
    field of the response entry answering it."""
    if not isinstance(source, str):
        return {}
    for field_name, hint in _hints(cls).items():
        base = strip_none(hint)
        if isinstance(base, type) and issubclass(base, str):
            return {field_name: source}
    return {}


def _matching_array(source: Any, field_name: str, entry_cls: type[Any]) -> tuple[Any, ...] | None:
    """The request array of `source` that response array `field_name` (of `entry_cls`
    entries) answers: the one of the same name, else the first that names topics as the
    response's entries do, else the only one."""
    if not dataclasses.is_dataclass(source):
        return None
    arrays = [name for name, hint in _hints(type(source)).items() if _array_item(hint) is not None]
    if field_name in arrays:
        chosen: str | None = field_name
    else:
        topics = _names_topics(entry_cls)
        alike = [a for a in arrays if _array_names_topics(type(source), a) == topics]
        chosen = alike[0] if alike else (arrays[0] if len(arrays) == 1 else None)
    if chosen is None:
        return None
    value = getattr(source, chosen)
    return () if value is None else tuple(value)


def _array_names_topics(cls: type[Any], field_name: str) -> bool:
    inner = _array_item(_hints(cls)[field_name])
    if inner is TopicName:
        return True
    return dataclasses.is_dataclass(inner) and _names_topics(typing.cast(type[Any], inner))


def _key(source: Any, parent: EntryKey) -> EntryKey:
    """What request entry `source` names (a topic name alone, or an entity), else `parent`'s."""
    if isinstance(source, str):
        return EntryKey(name=source)
    if not dataclasses.is_dataclass(source):
        return parent
    name: str | None = None
    for field_name, hint in _hints(type(source)).items():
        if strip_none(hint) is TopicName:
            name = getattr(source, field_name)
            break
    resource_type = getattr(source, "resource_type", None)
    if resource_type is not None:
        name = getattr(source, "resource_name", None)
    topic_id = getattr(source, _TOPIC_ID, None)
    if topic_id is not None and not topic_id.int:
        topic_id = None
    if name is None and topic_id is None:
        return parent
    return EntryKey(
        name=name,
        topic_id=topic_id,
        resource_type=None if resource_type is None else int(resource_type),
    )


def _names_topics(cls: type[Any]) -> bool:
    hints = _hints(cls)
    return (
        any(strip_none(h) is TopicName for h in hints.values())
        or _TOPIC_ID in hints
        or all(f in hints for f in _RESOURCE_FIELDS)
    )


def _carries_error(cls: type[Any]) -> bool:
    """Whether entries of `cls` (or entries within them) have an error code."""
    found = _CARRIES_ERROR.get(cls)
    if found is None:
        found = False
        for hint in _hints(cls).values():
            inner = _array_item(hint)
            inner = strip_none(hint) if inner is None else inner
            if inner is ErrorCode or (
                dataclasses.is_dataclass(inner) and _carries_error(typing.cast(type[Any], inner))
            ):
                found = True
        _CARRIES_ERROR[cls] = found
    return found


def _array_item(hint: Any) -> Any:
    """The entry class of an array `hint` (None: not an array)."""
    hint = strip_none(hint)
    if typing.get_origin(hint) is not tuple:
        return None
    return strip_none(typing.get_args(hint)[0])


def _zero(cls: type[Any], error: ErrorCode, message: str) -> Any:
    """An instance of kio class `cls`: defaults, zeros, `error` in every error code."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        hint = _hints(cls)[field.name]
        if _base(hint) is ErrorCode:
            values[field.name] = error
        elif field.name in _MESSAGE_FIELDS and _nullable(hint):
            values[field.name] = message
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            values[field.name] = _zero_value(hint, error, message)
    return cls(**values)


def _zero_value(hint: Any, error: ErrorCode, message: str) -> Any:
    if _nullable(hint):
        return None
    if _is_array(hint):
        return ()
    base = _base(hint)
    if dataclasses.is_dataclass(base):
        return _zero(typing.cast(type[Any], base), error, message)
    if issubclass(base, bool):
        return False
    if issubclass(base, datetime.timedelta):
        return base.parse(datetime.timedelta(0))
    if issubclass(base, datetime.datetime):
        return base.parse(datetime.datetime.fromtimestamp(0, datetime.UTC))
    if issubclass(base, uuid.UUID):
        return uuid.UUID(int=0)
    if issubclass(base, str):
        return base("")
    if issubclass(base, bytes):
        return b""
    return base(0)  # int and kio's subclasses of it


def strip_none(hint: Any) -> Any:
    """`hint` without its `| None`."""
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        return next(a for a in typing.get_args(hint) if a is not type(None))
    return hint


def _nullable(hint: Any) -> bool:
    return typing.get_origin(hint) in (types.UnionType, typing.Union)


def _is_array(hint: Any) -> bool:
    return typing.get_origin(strip_none(hint)) is tuple


def _base(hint: Any) -> Any:
    """The class of `hint`, nullability stripped (arrays are left as they are)."""
    return strip_none(hint)


def _hints(cls: type[Any]) -> dict[str, Any]:
    """The type hints of kio class `cls` (read once: kio's classes are a fixed set)."""
    hints = _HINTS.get(cls)
    if hints is None:
        every = typing.get_type_hints(cls)  # the class variables' too: left out
        hints = _HINTS[cls] = {f.name: every[f.name] for f in dataclasses.fields(cls)}
    return hints


def _fields(cls: type[Any]) -> frozenset[str]:
    return frozenset(_hints(cls))


_HINTS: dict[type[Any], dict[str, Any]] = {}
_CARRIES_ERROR: dict[type[Any], bool] = {}
