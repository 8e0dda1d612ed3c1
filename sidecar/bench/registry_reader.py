"""A consumer's start against a registry, for `bench registry`: run as a child process
(`python -m sidecar.bench.registry_reader BOOTSTRAP TOPIC RECORDS`), it builds a `Decoder` over
`RegistryResolver.connect` and decodes two records named in the JSON file RECORDS: one written
with a namespace's active dictionary, then one with an older dictionary of it. It prints one
JSON line: when the first decode ended (Unix time, for the parent to subtract its spawn time),
how long the older record's decode took, its peak RSS then, and the registry bytes it read.

A decoded value that differs from the one written is an error (exit 1), not a figure.
"""

from __future__ import annotations

import base64
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sidecar.codec import Decoder
from sidecar.dictionaries.registry import RegistryResolver


def peak_rss_mib(pid: int | str = "self") -> float:
    """A process's peak resident set so far (VmHWM), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise OSError(f"no VmHWM in /proc/{pid}/status")


def encoded_record(
    raw: bytes, value: bytes, headers: Sequence[tuple[str, bytes]]
) -> dict[str, Any]:
    """A record as RECORDS holds it: the raw value, and the value and headers produced."""
    return {
        "raw": base64.b64encode(raw).decode(),
        "value": base64.b64encode(value).decode(),
        "headers": [[k, base64.b64encode(v).decode()] for k, v in headers],
    }


def _decode(decoder: Decoder, record: Mapping[str, Any]) -> None:
    headers = [(k, base64.b64decode(v)) for k, v in record["headers"]]
    value = decoder.decode(base64.b64decode(record["value"]), headers)
    if value != base64.b64decode(record["raw"]):
        raise SystemExit("bench registry: a record decoded to other bytes than were written")


def main(argv: Sequence[str]) -> int:
    bootstrap, topic, records_file = argv
    records = json.loads(Path(records_file).read_text())
    resolver = RegistryResolver.connect(bootstrap, topic=topic, follow_interval=None)
    with Decoder(resolver) as decoder:
        _decode(decoder, records["active"])
        decoded_at = time.time()
        started = time.monotonic()
        _decode(decoder, records["older"])
        older_s = time.monotonic() - started
        print(
            json.dumps(
                {
                    "decoded_at": decoded_at,
                    "older_s": older_s,
                    "rss_mib": peak_rss_mib(),
                    "bytes_read": resolver.registry.bytes_read,
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
