"""`zdict-sidecar cat`: print a topic's records decoded, like `kcat -C`.

Reads by assignment (no consumer group, nothing committed), decodes every record that carries
our header with the dictionaries of the registry (or of a local store), and prints one line per
record: the value (kcat's default), optionally prefixed by the key and the headers, or one JSON
object per record. A record that cannot be decoded stops the command with exit 1 and names its
partition and offset; nothing is skipped silently.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO, Final, cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaException,
    Message,
    TopicPartition,
)

from sidecar.codec import Decoder, header_tag, standard_frame
from sidecar.config import Settings
from sidecar.errors import CodecError, InputError, KafkaUnavailable
from sidecar.kafka import is_partition_eof, make_admin, make_reader, partition_counts

#: Seconds without a new record after which `--exit` treats a partition as read to its end.
IDLE_EXIT: Final = 2.0


@dataclass(frozen=True, slots=True)
class CatOptions:
    """What to read and how to print it."""

    topic: str
    partitions: Sequence[int] | None = None
    offset: str = "beginning"  # beginning | end | N (absolute) | -N (N before the end)
    count: int | None = None
    exit_at_end: bool = False
    key: bool = False
    headers: bool = False
    json: bool = False
    #: Print values as standard zstd frames instead of decoding them (`zstd -d -D` reads them).
    frames: bool = False
    delimiter: bytes = b"\n"
    key_delimiter: bytes = b"\t"


def start_offset(spec: str, low: int, high: int) -> int:
    """Where to start in a partition whose records are [low, high)."""
    if spec == "beginning":
        return int(OFFSET_BEGINNING)
    if spec == "end":
        return int(OFFSET_END)
    try:
        number = int(spec)
    except ValueError:
        raise InputError(
            f"--offset {spec!r}: use beginning, end, an offset, or -N for N records before the end"
        ) from None
    if number < 0:
        return max(low, high + number)
    return number


def _text_or_base64(data: bytes | None, name: str) -> dict[str, Any]:
    if data is None:
        return {name: None}
    try:
        return {name: data.decode("utf-8")}
    except UnicodeDecodeError:
        return {f"{name}_base64": base64.b64encode(data).decode("ascii")}


def render(
    msg: Message, value: bytes | None, dict_id: int | None, options: CatOptions, header_key: str
) -> bytes:
    """One output line (without the delimiter) for a record; our header is left out of a
    decoded one (with `frames`, the value is still a frame and keeps it)."""
    consumed = cast(list[tuple[str, bytes | None]], msg.headers() or [])
    ours = dict_id is not None and not options.frames
    headers = [(k, v) for k, v in consumed if k != header_key or not ours]
    if options.json:
        ts_type, ts = msg.timestamp()
        entry: dict[str, Any] = {
            "topic": msg.topic(),
            "partition": msg.partition(),
            "offset": msg.offset(),
            "timestamp": ts if ts_type else None,
            **_text_or_base64(msg.key(), "key"),
            **_text_or_base64(value, "value"),
            "headers": [
                [k, None if v is None else v.decode("utf-8", "replace")] for k, v in headers
            ],
            "dict_id": dict_id,
        }
        return json.dumps(entry, ensure_ascii=False).encode()
    parts: list[bytes] = []
    if options.headers:
        parts.append(b",".join(k.encode() + b"=" + (v or b"") for k, v in headers))
    if options.key:
        parts.append(msg.key() or b"")
    parts.append(value if value is not None else b"NULL")
    return options.key_delimiter.join(parts)


def cat(
    settings: Settings,
    decoder: Decoder,
    options: CatOptions,
    out: BinaryIO,
    stop: Callable[[], bool] = lambda: False,
) -> int:
    """Print records of `options.topic` to `out`; returns how many were printed.

    Raises:
        InputError: the topic or a partition does not exist.
        CodecError: a record could not be decoded (the message names partition and offset).
        KafkaUnavailable: no broker answered.
    """
    timeout = 30.0
    partitions = _partitions(settings, options, timeout)
    reader = make_reader(settings, "cat")
    printed = 0
    try:
        ends = _assign(reader, options, partitions, timeout)
        done: set[int] = {p for p in partitions if options.exit_at_end and ends[p] == 0}
        last_record = time.monotonic()
        while not stop():
            if options.count is not None and printed >= options.count:
                break
            if options.exit_at_end and len(done) == len(partitions):
                break
            messages = reader.consume(500, 0.5)
            if not messages and options.exit_at_end and time.monotonic() - last_record > IDLE_EXIT:
                break  # e.g. the last offsets are transaction markers or were compacted away
            for msg in messages:
                err = msg.error()
                if err is not None:
                    if is_partition_eof(err):
                        continue
                    raise KafkaUnavailable(f"reading {options.topic}: {err.str()}")
                last_record = time.monotonic()
                partition, offset = msg.partition(), msg.offset()
                assert partition is not None and offset is not None
                out.write(_line(msg, decoder, options) + options.delimiter)
                printed += 1
                if offset + 1 >= ends[partition]:
                    done.add(partition)
                if options.count is not None and printed >= options.count:
                    break
        out.flush()
    finally:
        reader.close()
    return printed


def _partitions(settings: Settings, options: CatOptions, timeout: float) -> list[int]:
    """The partitions to read: `options.partitions`, each checked to exist, else all of them.

    Raises:
        InputError: the topic or a partition does not exist.
        KafkaUnavailable: no broker answered within `timeout` (s).
    """
    bootstrap = settings.kafka.client_config()["bootstrap.servers"]
    counts = partition_counts(make_admin(settings), [options.topic], timeout, bootstrap)
    if options.topic not in counts:
        raise InputError(f"topic {options.topic} does not exist (bootstrap.servers={bootstrap})")
    partitions = list(options.partitions or range(counts[options.topic]))
    missing = [p for p in partitions if not 0 <= p < counts[options.topic]]
    if missing:
        raise InputError(
            f"topic {options.topic} has {counts[options.topic]} partitions; no partition {missing}"
        )
    return partitions


def _assign(
    reader: Consumer, options: CatOptions, partitions: Sequence[int], timeout: float
) -> dict[int, int]:
    """Assign `partitions` to `reader` from `options.offset`; returns each one's end offset.

    Raises:
        KafkaUnavailable: a partition's offsets could not be read within `timeout` (s).
    """
    ends: dict[int, int] = {}
    assignment = []
    for p in partitions:
        try:
            low, high = reader.get_watermark_offsets(
                TopicPartition(options.topic, p), timeout=timeout
            )
        except KafkaException as exc:
            raise KafkaUnavailable(f"cannot read offsets of {options.topic}[{p}]: {exc}") from None
        ends[p] = high
        assignment.append(TopicPartition(options.topic, p, start_offset(options.offset, low, high)))
    reader.assign(assignment)
    return ends


def _line(msg: Message, decoder: Decoder, options: CatOptions) -> bytes:
    """A record as `cat` prints it (without the delimiter): decoded, or its standard frame.

    Raises:
        CodecError: the record could not be decoded (the message names partition and offset).
    """
    headers = cast(list[tuple[str, bytes | None]], msg.headers() or [])
    try:
        tag = header_tag(headers, decoder.header_key)
        dict_id = None if tag is None else tag.dict_id
        value = msg.value()
        if not options.frames:
            value = decoder.decode(value, headers)
        elif tag is not None and value is not None:
            value = standard_frame(value, tag)
    except CodecError as exc:
        raise type(exc)(f"{options.topic}[{msg.partition()}]@{msg.offset()}: {exc}") from None
    return render(msg, value, dict_id, options, decoder.header_key)
