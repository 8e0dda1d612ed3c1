"""A raw-socket Kafka client and hand-built frames, for the proxy's hostile-client
and fuzz tests: record batches (v2, CRC-32C computed, any field chosen by the test), Produce v7
requests (any declared count), Metadata requests, and what a process holds in memory."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c
import zstandard

from tests.kafka_frames import read_response

PRODUCE = 0
FETCH = 1
METADATA = 3
INIT_PRODUCER_ID = 22
#: The Produce version the frames are built in (classic encoding; kio reads the answers).
PRODUCE_VERSION = 7
#: Batch attributes: the codec bits' zstd value.
ZSTD = 4
NO_PRODUCER = -1
#: Record header: (key, value) as bytes, a key not necessarily UTF-8.
RawHeader = tuple[bytes, bytes | None]


def zigzag(value: int) -> bytes:
    """Kafka's signed varint (zig-zag, 7 bits a byte) of `value` (up to 64 bits)."""
    n = (value << 1) ^ (value >> 63)
    n &= (1 << 64) - 1
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _sized(data: bytes | None) -> bytes:
    return zigzag(-1) if data is None else zigzag(len(data)) + data


def record(
    offset_delta: int,
    value: bytes | None,
    *,
    key: bytes | None = None,
    headers: Sequence[RawHeader] = (),
    timestamp_delta: int = 0,
) -> bytes:
    """One v2 record, its length prefix included."""
    body = (
        b"\x00"
        + zigzag(timestamp_delta)
        + zigzag(offset_delta)
        + _sized(key)
        + _sized(value)
        + zigzag(len(headers))
        + b"".join(_sized(k) + _sized(v) for k, v in headers)
    )
    return zigzag(len(body)) + body


@dataclass(frozen=True)
class Batch:
    """A v2 record batch's fields; `encode` writes it with a correct CRC-32C."""

    records: bytes
    count: int
    base_timestamp: int
    attributes: int = 0
    producer_id: int = NO_PRODUCER
    producer_epoch: int = -1
    base_sequence: int = -1

    def encode(self) -> bytes:
        after_crc = (
            struct.pack(
                ">hiqqqhii",
                self.attributes,
                max(self.count - 1, 0),
                self.base_timestamp,
                self.base_timestamp,
                self.producer_id,
                self.producer_epoch,
                self.base_sequence,
                self.count,
            )
            + self.records
        )
        length = 4 + 1 + 4 + len(after_crc)  # leader epoch, magic, crc, the rest
        return struct.pack(">qiibI", 0, length, -1, 2, crc32c.crc32c(after_crc)) + after_crc


def batch(
    values: Sequence[bytes | None],
    base_timestamp: int,
    *,
    headers: Sequence[RawHeader] = (),
    compress: bool = False,
    **fields: Any,
) -> bytes:
    """A batch of one record per value (each with `headers`), zstd-compressed if `compress`."""
    records = b"".join(record(i, v, headers=headers) for i, v in enumerate(values))
    attributes = 0
    if compress:
        records, attributes = zstandard.ZstdCompressor().compress(records), ZSTD
    return Batch(records, len(values), base_timestamp, attributes, **fields).encode()


def fix_crc(encoded: bytes) -> bytes:
    """`encoded` (one batch) with its CRC-32C computed again over what follows it."""
    return encoded[:17] + struct.pack(">I", crc32c.crc32c(encoded[21:])) + encoded[21:]


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def header(api_key: int, version: int, correlation_id: int, client_id: str = "hostile") -> bytes:
    """A request header v1 (the classic versions)."""
    return struct.pack(">hhi", api_key, version, correlation_id) + _string(client_id)


def framed(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def produce(
    topics: Sequence[tuple[str, Sequence[tuple[int, bytes | None]]]],
    *,
    correlation_id: int = 1,
    acks: int = -1,
    timeout_ms: int = 30_000,
) -> bytes:
    """A Produce v7 request frame (size prefix included): topics of (partition, records)."""
    body = struct.pack(">hhi", -1, acks, timeout_ms) + struct.pack(">i", len(topics))
    for name, partitions in topics:
        body += _string(name) + struct.pack(">i", len(partitions))
        for index, records in partitions:
            if records is None:
                body += struct.pack(">ii", index, -1)
            else:
                body += struct.pack(">ii", index, len(records)) + records
    return framed(header(PRODUCE, PRODUCE_VERSION, correlation_id) + body)


def metadata(topics: Sequence[str] | None, correlation_id: int = 1) -> bytes:
    """A Metadata v4 request frame (None: every topic), auto-creation off."""
    if topics is None:
        listed = struct.pack(">i", -1)
    else:
        listed = struct.pack(">i", len(topics)) + b"".join(_string(t) for t in topics)
    return framed(header(METADATA, 4, correlation_id) + listed + b"\x00")


class RawClient:
    """One TCP connection speaking frames (size prefix included both ways)."""

    def __init__(self, address: str, timeout: float = 10.0) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.timeout = timeout

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def receive(self, timeout: float | None = None) -> bytes | None:
        """The next frame without its size prefix; None if the peer closed the connection."""
        self.sock.settimeout(self.timeout if timeout is None else timeout)
        prefix = self._exactly(4)
        if prefix is None:
            return None
        return self._exactly(struct.unpack(">i", prefix)[0])

    def closed_by_peer(self, timeout: float) -> bool:
        """Whether the peer closes the connection within `timeout` s (reading what it sends)."""
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                self.sock.settimeout(max(deadline - time.monotonic(), 0.01))
                if not self.sock.recv(65536):
                    return True
        except TimeoutError:
            return False
        except ConnectionError:
            return True
        return False

    def _exactly(self, size: int) -> bytes | None:
        chunks = bytearray()
        while len(chunks) < size:
            try:
                chunk = self.sock.recv(min(size - len(chunks), 1 << 20))
            except ConnectionError:
                return None
            if not chunk:
                return None
            chunks += chunk
        return bytes(chunks)


def produce_errors(frame: bytes) -> dict[tuple[str, int], int]:
    """The error code per (topic, partition) of a Produce v7 response frame."""
    _, body = read_response(PRODUCE, PRODUCE_VERSION, frame)
    return {
        (str(topic.name), int(part.index)): int(part.error_code)
        for topic in body.responses
        for part in topic.partition_responses
    }


def listed_topics(frame: bytes) -> set[str]:
    """The topic names of a Metadata v4 response frame."""
    _, body = read_response(METADATA, 4, frame)
    return {str(t.name) for t in body.topics}


def rss_bytes(pid: int) -> int:
    """Resident memory of process `pid` (VmRSS of /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")
