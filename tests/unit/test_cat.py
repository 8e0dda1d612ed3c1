"""`zdict-sidecar cat`'s pure parts: where it starts, and how a record is printed."""

from __future__ import annotations

import json
from unittest.mock import MagicMock

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Message

from sidecar.errors import InputError
from sidecar.tools.cat import CatOptions, render, start_offset


def _message(key: bytes | None, headers: list[tuple[str, bytes | None]]) -> MagicMock:
    msg = MagicMock(spec_set=Message)
    msg.topic.return_value = "orders.zd"
    msg.partition.return_value = 2
    msg.offset.return_value = 41
    msg.key.return_value = key
    msg.headers.return_value = headers
    msg.timestamp.return_value = (1, 1_700_000_000_000)
    return msg


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("beginning", OFFSET_BEGINNING),
        ("end", OFFSET_END),
        ("17", 17),
        ("-10", 90),
        ("-500", 50),  # not before the first record still there
    ],
)
def test_offsets_are_read_like_kcat(spec: str, expected: int) -> None:
    assert start_offset(spec, low=50, high=100) == expected


def test_a_bad_offset_names_the_forms_it_takes() -> None:
    with pytest.raises(InputError, match="beginning, end"):
        start_offset("yesterday", 0, 10)


def test_the_default_line_is_the_value_and_our_header_is_never_shown() -> None:
    msg = _message(b"user-1", [("trace", b"t1"), ("zd", b"32768")])
    options = CatOptions(topic="orders.zd", key=True, headers=True)
    assert render(msg, b'{"a":1}', 32768, options, "zd") == b'trace=t1\tuser-1\t{"a":1}'
    assert render(msg, b"v", 32768, CatOptions(topic="t"), "zd") == b"v"
    assert render(msg, None, None, CatOptions(topic="t"), "zd") == b"NULL"


def test_json_lines_carry_position_key_headers_and_the_dictionary_id() -> None:
    msg = _message(b"\xff\x00", [("trace", b"t1"), ("zd", b"32768")])
    line = json.loads(render(msg, b'{"a":1}', 32768, CatOptions(topic="t", json=True), "zd"))
    assert line == {
        "topic": "orders.zd",
        "partition": 2,
        "offset": 41,
        "timestamp": 1_700_000_000_000,
        "key_base64": "/wA=",
        "value": '{"a":1}',
        "headers": [["trace", "t1"]],
        "dict_id": 32768,
    }


def test_with_frames_our_header_stays_with_the_frame() -> None:
    headers: list[tuple[str, bytes | None]] = [("trace", b"1"), ("zd", b"\x80\x01")]
    line = render(
        _message(None, headers), b"frame", 32768, CatOptions(topic="t", headers=True, frames=True),
        "zd",
    )  # fmt: skip
    assert line.startswith(b"trace=1,zd=\x80\x01")
    decoded = render(
        _message(None, headers), b"value", 32768, CatOptions(topic="t", headers=True), "zd"
    )
    assert decoded.startswith(b"trace=1") and b"zd=" not in decoded  # decoded: ours left out
