"""Responses the proxy writes itself, on kio's generated messages: the response class of an API
version, an instance built for any version, and the frame it goes out in.

The proxy answers some requests locally (a refused Produce, a client's SASL handshake) and
writes again the responses it rewrites (broker addresses, topic listings, decoded Fetch). kio
(Python dataclasses generated from Kafka's own JSON message specs) writes every version; this
module picks the class and frames the result: a 4-byte big-endian size, the response header
the version takes (tagged fields from the flexible versions on), the body.
"""

from __future__ import annotations

import dataclasses
import io
import struct
import sys
from typing import Any, Final

from kio.index import load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError

from sidecar.errors import ProtocolError
from sidecar.proxy.bounded import check
from sidecar.proxy.versions import api_name

_SIZE: Final = struct.Struct(">i")


def response_class(api_key: int, version: int) -> type[Any]:
    """kio's response payload class of an API version."""
    return load_response_schema(api_key, version)


def build(cls: type[Any], **values: Any) -> Any:
    """An instance of kio class `cls` from `values`, leaving out those the version has no
    field for (one call site serves every version: newer fields are simply dropped)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def nested(cls: type[Any], name: str) -> type[Any]:
    """The class `name` of the same message version as `cls` (e.g. its topic entries)."""
    found: type[Any] = getattr(sys.modules[cls.__module__], name)
    return found


def encode_response(correlation_id: int, payload: Any) -> bytes:
    """A response frame: size prefix, the header the payload's version takes, the payload."""
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    header_class = type(payload).__header_schema__
    entity_writer(header_class)(buffer, header_class(correlation_id=correlation_id))
    entity_writer(type(payload))(buffer, payload)
    with buffer.getbuffer() as data:
        _SIZE.pack_into(data, 0, len(data) - _SIZE.size)
    # Not a copy (CPython hands over BytesIO's own buffer once no view is left): a decoded
    # Fetch answer is held once, as the budget counts it, not twice while it is framed.
    return buffer.getvalue()


def parse_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, kio payload) of a response frame without its size prefix.

    Raises:
        ProtocolError: the bytes do not parse as that response.
    """
    try:
        schema = load_response_schema(api_key, version)
        # kio allocates for declared counts before checking them: bounds first.
        check(schema, frame, check(schema.__header_schema__, frame))
        header, offset = entity_reader(schema.__header_schema__)(frame, 0)
        body, used = entity_reader(schema)(frame, offset)
    except (SerialError, ValueError, KeyError, TypeError, OverflowError, IndexError) as exc:
        raise ProtocolError(
            f"{api_name(api_key)} v{version} response does not parse: {type(exc).__name__}: {exc}"
        ) from None
    if offset + used != len(frame):
        raise ProtocolError(
            f"{api_name(api_key)} v{version} response has {len(frame) - offset - used} bytes "
            "after its end"
        )
    return int(header.correlation_id), body
