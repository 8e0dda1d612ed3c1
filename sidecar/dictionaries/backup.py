"""A backup of the registry topic in a file, and its restore: `dicts export` / `dicts import`.

The registry topic is the only source of truth for dictionaries (every compressed record names
the one it needs), so a backup is the topic itself: every record of its one partition, in
order, byte for byte (key, value or tombstone, headers). Restored into an empty topic in the
same order, the records mean what they meant: the same dictionaries under the same ids, the same
activations and rollback stacks, the same latest training runs; integrity checks (each
dictionary's sha256) hold because nothing is rewritten.

The file is JSON Lines, UTF-8: a first line `{"format": "zdict-registry-backup", "version": 1,
"topic": ..., "records": N}`, then one line per record, `{"offset": ..., "key": B64, "value":
B64 or null, "headers": [[name, B64 or null], ...]}` (base64 of the bytes).
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from sidecar.config import Settings
from sidecar.dictionaries.registry import Registry
from sidecar.dictionaries.registry_state import Headers
from sidecar.dictionaries.registry_topics import TOPIC_CONFIG
from sidecar.errors import InputError, KafkaUnavailable, RegistryError, RegistryUnavailable
from sidecar.kafka import make_admin, make_reader, make_writer, partition_counts

FORMAT: Final = "zdict-registry-backup"
VERSION: Final = 1


@dataclass(frozen=True)
class RawRecord:
    """One record of the registry topic as the broker holds it."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


# -- the file ------------------------------------------------------------------------------------


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _unb64(text: Any, where: str) -> bytes | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise InputError(f"{where}: expected base64 text or null, found {type(text).__name__}")
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise InputError(f"{where}: not base64") from None


def write_backup(path: Path, topic: str, records: list[RawRecord]) -> None:
    """Write `records` of registry topic `topic` to `path` (replaced only once complete)."""
    partial = path.with_name(path.name + ".partial")
    with partial.open("w", encoding="utf-8") as out:
        header = {"format": FORMAT, "version": VERSION, "topic": topic, "records": len(records)}
        out.write(json.dumps(header) + "\n")
        for record in records:
            line = {
                "offset": record.offset,
                "key": _b64(record.key),
                "value": _b64(record.value),
                "headers": [[name, _b64(value)] for name, value in record.headers],
            }
            out.write(json.dumps(line) + "\n")
    partial.replace(path)


def read_backup(path: Path) -> tuple[str, list[RawRecord]]:
    """The topic name and the records of backup file `path`.

    Raises:
        InputError: the file is missing, not a backup of this format, or damaged (the message
            names the line).
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path} is not a registry backup (not UTF-8 text)") from None
    rows = list(_json_lines(path, lines))
    if not rows or not isinstance(rows[0], dict) or rows[0].get("format") != FORMAT:
        raise InputError(f"{path} is not a registry backup: its first line is not a {FORMAT} one")
    header = rows[0]
    if header.get("version") != VERSION:
        raise InputError(
            f"{path}: backup version {header.get('version')!r}; this release reads version "
            f"{VERSION} (export again with it, or import with the release that exported)"
        )
    records = [_record(path, number, row) for number, row in enumerate(rows[1:], start=2)]
    if header.get("records") != len(records):
        raise InputError(
            f"{path}: the header announces {header.get('records')} records, the file holds "
            f"{len(records)}: it is truncated or was edited"
        )
    return str(header.get("topic", "")), records


def _json_lines(path: Path, lines: list[str]) -> Iterator[Any]:
    for number, line in enumerate(lines, start=1):
        try:
            yield json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}, line {number}: not JSON ({exc.msg})") from None


def _record(path: Path, number: int, row: Any) -> RawRecord:
    where = f"{path}, line {number}"
    if not isinstance(row, dict) or not isinstance(row.get("offset"), int):
        raise InputError(f"{where}: not a record (offset, key, value, headers)")
    headers = row.get("headers", [])
    if not isinstance(headers, list) or not all(
        isinstance(h, list) and len(h) == 2 and isinstance(h[0], str) for h in headers
    ):
        raise InputError(f"{where}: headers must be a list of [name, base64] pairs")
    return RawRecord(
        offset=row["offset"],
        key=_unb64(row.get("key"), where),
        value=_unb64(row.get("value"), where),
        headers=tuple((name, _unb64(value, where)) for name, value in headers),
    )


# -- the topic -----------------------------------------------------------------------------------


def export_records(settings: Settings) -> list[RawRecord]:
    """Every record of the registry topic of `settings`, from its first offset to its end.

    Raises:
        RegistryError: the topic is missing or cannot be read within `registry.timeout`.
    """
    topic, timeout = settings.registry.topic, settings.registry.timeout
    bootstrap = settings.kafka.client_config()["bootstrap.servers"]
    try:
        # Reachable, and the topic there: the error names the brokers if not.
        counts = partition_counts(
            make_admin(settings), [topic], timeout, bootstrap, "ZDICT_REGISTRY__TIMEOUT"
        )
    except KafkaUnavailable as exc:
        raise RegistryUnavailable(str(exc)) from None
    if topic not in counts:
        raise RegistryError(
            f"registry topic {topic} does not exist at {bootstrap}: nothing to export "
            "(check ZDICT_REGISTRY__TOPIC and the bootstrap servers)"
        )
    reader = make_reader(settings, "registry-export")
    try:
        tp = TopicPartition(topic, 0)
        try:
            low, high = reader.get_watermark_offsets(tp, timeout=timeout, cached=False)
        except KafkaException as exc:
            raise RegistryUnavailable(
                f"registry topic {topic} cannot be read: {exc.args[0].str()}"
            ) from None
        reader.assign([TopicPartition(topic, 0, low)])
        records: list[RawRecord] = []
        deadline = time.monotonic() + timeout
        position = low
        while position < high:
            if time.monotonic() > deadline:
                raise RegistryUnavailable(
                    f"registry topic {topic}: read up to offset {position} of {high} within "
                    f"{timeout:.0f} s (ZDICT_REGISTRY__TIMEOUT)"
                )
            messages = reader.consume(500, 0.2)
            for msg in messages:
                _raise_on_error(topic, msg)
                records.append(_raw(msg))
            if records:
                position = records[-1].offset + 1
            if not messages:
                # Compaction can leave the last offsets empty: the position says we are there.
                current = reader.position([tp])[0].offset
                position = max(position, current)
        return records
    finally:
        reader.close()


def _raise_on_error(topic: str, msg: Message) -> None:
    err: KafkaError | None = msg.error()
    if err is not None:
        raise RegistryUnavailable(f"registry topic {topic}: {err.str()}")


def _raw(msg: Message) -> RawRecord:
    offset = msg.offset()
    assert offset is not None
    headers = tuple(
        (name, value.encode() if isinstance(value, str) else value)
        for name, value in cast(Headers, msg.headers() or [])
    )
    return RawRecord(offset, msg.key(), msg.value(), headers)


def import_records(settings: Settings, records: Iterable[RawRecord]) -> int:
    """Publish `records`, in order, into the registry topic of `settings`, created if missing
    (`registry.create`) and empty; returns how many. Each is acknowledged (acks=all) before
    the next is sent, so the topic holds them in the backup's order.

    Raises:
        RegistryError: the topic already holds records (a restore goes into an empty topic),
            or a record was not acknowledged.
    """
    registry = Registry(settings)
    registry.ensure_topic()
    topic = settings.registry.topic
    reader = make_reader(settings, "registry-import")
    try:
        _, high = reader.get_watermark_offsets(
            TopicPartition(topic, 0), timeout=settings.registry.timeout, cached=False
        )
    except KafkaException as exc:
        raise RegistryUnavailable(f"registry topic {topic}: {exc.args[0].str()}") from None
    finally:
        reader.close()
    if high > 0:
        raise RegistryError(
            f"registry topic {topic} already holds records (end offset {high}): a restore goes "
            "into an empty topic; delete and recreate it, or set ZDICT_REGISTRY__TOPIC to a new "
            "one, then import again"
        )
    overrides = {
        "linger.ms": "0",
        "message.max.bytes": TOPIC_CONFIG["max.message.bytes"],
        "max.in.flight.requests.per.connection": "1",
    }
    producer = make_writer(settings, "registry-import", overrides)
    count = 0
    for record in records:
        outcome: dict[str, KafkaError | None] = {}

        def delivered(err: KafkaError | None, _msg: Message, box: dict[str, Any] = outcome) -> None:
            box["error"] = err

        producer.produce(
            topic,
            key=record.key,
            value=record.value,
            headers=list(record.headers),
            on_delivery=delivered,
        )
        producer.flush(settings.registry.timeout + 5.0)
        if "error" not in outcome:
            raise RegistryUnavailable(
                f"registry topic {topic}: no acknowledgement for record {count + 1} within "
                f"{settings.registry.timeout:.0f} s; the topic may hold the first {count}: "
                "delete it and import again"
            )
        error = outcome["error"]
        if error is not None:
            raise RegistryUnavailable(
                f"registry topic {topic} did not take record {count + 1} (offset "
                f"{record.offset} in the backup): {error.str()}; the topic now holds the first "
                f"{count}: delete it and import again"
            )
        count += 1
    return count
