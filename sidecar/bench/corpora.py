"""Corpora of real data nobody here wrote, collected from the machine the benchmark runs on.

The synthetic events of `sidecar.bench.events` are ours: a dictionary choice tuned on them could
be tuned to the generator. These corpora come from files other programs wrote — package
managers' logs, compiler logs, the Kafka broker's own log, package metadata as JSON, Python
package manifests, Maven POMs — in the shapes the product meets in the field: log lines,
JSON events, kilobyte snapshots, and one shape no dictionary helps (base64).

Each corpus is one message per line, in the order the source holds them (held-out splits are
time splits), at most `limit` messages. A source missing on this machine is skipped, and said so.
"""

from __future__ import annotations

import base64
import glob
import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

#: Messages per corpus unless told otherwise.
DEFAULT_LIMIT: Final = 20_000


@dataclass(frozen=True, slots=True)
class Source:
    """One corpus: its name, the shape of its messages, and how to read them."""

    name: str
    shape: str
    read: Callable[[], Iterator[bytes]]


def _lines(*patterns: str, min_bytes: int = 1) -> Callable[[], Iterator[bytes]]:
    """Non-empty lines of the files matching `patterns` (sorted), longer than `min_bytes`."""

    def read() -> Iterator[bytes]:
        for pattern in patterns:
            for name in sorted(glob.glob(pattern)):
                try:
                    data = Path(name).read_bytes()
                except OSError:
                    continue
                for line in data.splitlines():
                    line = line.rstrip()
                    if len(line) >= min_bytes:
                        yield line

    return read


def _stanzas(data: bytes) -> Iterator[dict[str, str]]:
    """RFC 822-style stanzas (dpkg status, apt Packages) as field dictionaries."""
    for block in re.split(rb"\n\s*\n", data):
        fields: dict[str, str] = {}
        last = ""
        for line in block.decode("utf-8", "replace").splitlines():
            if line[:1] in (" ", "\t") and last:
                fields[last] += "\n" + line.strip()
            elif ":" in line:
                last, _, value = line.partition(":")
                fields[last] = value.strip()
        if fields:
            yield fields


def _json_stanzas(
    path: str, decompress: Callable[[bytes], bytes] | None = None
) -> Callable[[], Iterator[bytes]]:
    def read() -> Iterator[bytes]:
        for name in sorted(glob.glob(path)):
            try:
                data = Path(name).read_bytes()
            except OSError:
                continue
            if decompress is not None:
                data = decompress(data)
            for fields in _stanzas(data):
                yield json.dumps(fields, separators=(",", ":")).encode()

    return read


def _lz4_frame(data: bytes) -> bytes:
    import lz4.frame

    out: bytes = lz4.frame.decompress(data)
    return out


def _one_line_files(*patterns: str, max_bytes: int = 65_536) -> Callable[[], Iterator[bytes]]:
    """Whole files (up to `max_bytes`), whitespace runs folded to one space: one message each."""

    def read() -> Iterator[bytes]:
        names = sorted({n for p in patterns for n in glob.glob(p, recursive=True)})
        for name in names:
            try:
                data = Path(name).read_bytes()
            except OSError:
                continue
            folded = b" ".join(data.split())
            if 0 < len(folded) <= max_bytes:
                yield folded

    return read


def _minified_json(pattern: str) -> Callable[[], Iterator[bytes]]:
    def read() -> Iterator[bytes]:
        for name in sorted(glob.glob(pattern, recursive=True)):
            try:
                value = json.loads(Path(name).read_bytes())
            except (OSError, ValueError):
                continue
            yield json.dumps(value, separators=(",", ":")).encode()

    return read


def _base64_chunks(pattern: str) -> Callable[[], Iterator[bytes]]:
    """Binary files as base64 lines of 200 bytes: a shape no dictionary helps."""

    def read() -> Iterator[bytes]:
        for name in sorted(glob.glob(pattern)):
            try:
                data = Path(name).read_bytes()
            except OSError:
                continue
            for i in range(0, len(data) - 150, 150):
                yield base64.b64encode(data[i : i + 150])

    return read


def sources(site_packages: str) -> list[Source]:
    """Every source this module knows; `site_packages` is the running interpreter's."""
    return [
        Source("dpkg-log", "log lines, ~90 B", _lines("/var/log/dpkg.log*")),
        Source("apt-term-log", "log lines, mixed", _lines("/var/log/apt/term.log*", min_bytes=8)),
        Source(
            "compiler-log",
            "build log lines (gcc, configure)",
            _lines("/tmp/python-build.*.log", min_bytes=8),
        ),
        Source(
            "kafka-broker-log",
            "log4j lines of a Kafka broker",
            _lines("deploy/kafka/.cache/run/*.log", "deploy/kafka/.cache/run/logs/*.log"),
        ),
        Source(
            "postgres-log",
            "a database server's log",
            _lines("/var/log/postgresql/*.log", min_bytes=8),
        ),
        Source(
            "dpkg-status-json",
            "JSON snapshots, 0.3-3 KB",
            _json_stanzas("/var/lib/dpkg/status"),
        ),
        Source(
            "apt-packages-json",
            "JSON snapshots, ~1 KB",
            _json_stanzas("/var/lib/apt/lists/*main_binary-amd64_Packages.lz4", _lz4_frame),
        ),
        Source(
            "python-record-csv",
            "CSV lines, ~100 B (path, sha256, size)",
            _lines(f"{site_packages}/*.dist-info/RECORD"),
        ),
        Source(
            "python-metadata",
            "package metadata texts, KBs",
            _one_line_files(
                f"{site_packages}/*.dist-info/METADATA",
                f"{sys.base_prefix}/lib/python3*/site-packages/*.dist-info/METADATA",
                f"{Path(sys.base_prefix).parent}/*/lib/python3*/site-packages/*.dist-info/METADATA",
            ),
        ),
        Source(
            "npm-package-json",
            "JSON documents, KBs",
            _minified_json("/usr/lib/node_modules/**/package.json"),
        ),
        Source(
            "maven-pom",
            "XML documents, KBs",
            _one_line_files(str(Path.home() / ".m2/repository/**/*.pom")),
        ),
        Source("go-api", "API listing lines, ~80 B", _lines("/usr/local/go/api/*.txt")),
        Source("pypi-index", "TSV lines, ~100 B", _lines("/work/.library/env/packages/pypi.tsv")),
        Source("mime-magic", "text lines", _lines("/etc/mime.types", min_bytes=4)),
        Source("base64-binary", "base64, 200 B (incompressible)", _base64_chunks("/usr/bin/zstd")),
    ]


@dataclass(frozen=True, slots=True)
class Corpus:
    """A collected corpus."""

    name: str
    shape: str
    messages: list[bytes]

    @property
    def mean_bytes(self) -> float:
        return sum(map(len, self.messages)) / max(1, len(self.messages))


def collect(source: Source, limit: int = DEFAULT_LIMIT, min_messages: int = 150) -> Corpus | None:
    """The first `limit` messages of `source`; None if it has fewer than `min_messages`."""
    messages: list[bytes] = []
    for message in source.read():
        messages.append(message)
        if len(messages) >= limit:
            break
    if len(messages) < min_messages:
        return None
    return Corpus(source.name, source.shape, messages)


def collect_all(
    site_packages: str, limit: int = DEFAULT_LIMIT, only: Iterable[str] = ()
) -> tuple[list[Corpus], list[str]]:
    """The corpora this machine has (and the names of the sources it lacks)."""
    wanted = set(only)
    found: list[Corpus] = []
    missing: list[str] = []
    for source in sources(site_packages):
        if wanted and source.name not in wanted:
            continue
        corpus = collect(source, limit)
        if corpus is None:
            missing.append(source.name)
        else:
            found.append(corpus)
    return found, missing
