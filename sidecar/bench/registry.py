"""`bench registry`: what a registry reader's start costs as the registry grows.

A registry topic of the bench's own on the local broker is filled through the product's API
(`Registry.publish_dictionary`, then `publish_activation` of each namespace's newest) with N
dictionaries across `namespaces` namespaces, grown from one N to the next, so that one
invocation populates the largest N once and every run at an N reads the same registry. The
dictionaries' bytes come from `zdict-sidecar train` (one dictionary of `size` bytes per event
kind, `ZDICT_TRAINING__DICT_SIZES`): every published dictionary reuses one of them under its own
id, namespace and version (the id in its zstd header changes, so its sha256 does).

At each N, every run starts each reader as a fresh child process:

* the proxy serving the first namespace's topic, then one serving every namespace's topic
  (`--no-training`, an empty store): seconds from spawn to its `proxy_listening` line, its peak
  RSS then (VmHWM), the registry bytes it read (its `registry_loaded` line), the store it wrote;
* a consumer (`sidecar.bench.registry_reader`): seconds from spawn to its first decode of a
  record written with the first namespace's active dictionary, then the decode of one written
  with that namespace's oldest dictionary (a non-active one, first seen);
* `zdict-sidecar dicts list --registry`: seconds from spawn to exit, peak RSS, bytes read.

Then, after the largest N, every dictionary neither active nor in a rollback stack is retired
(`Registry.retire`, as `dicts retire --apply` does), the two topics are made to compact at once
(small segments, no delay: as the broker's own log cleaner would later) and every reader is
measured again: what a start costs once the registry keeps what is served and what is kept.

Bytes read and the registry's bytes are one measure: keys, values and headers of the records, as
the topic holds them before the registry producer's compression. The table projects each median
to 36,500 (`sidecar.bench.registry_tables`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from confluent_kafka import TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # public, not in __all__
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

from sidecar.bench.events import generate
from sidecar.bench.proxy_children import ProxyChild
from sidecar.bench.registry_reader import encoded_record, peak_rss_mib
from sidecar.codec import Encoder
from sidecar.config import KafkaSettings, RegistrySettings, Settings
from sidecar.dictionaries.model import Dictionary, with_new_id
from sidecar.dictionaries.registry import Registry
from sidecar.dictionaries.registry_state import (
    INDEX_SUFFIX,
    activation_record,
    dictionary_record,
)
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import InputError
from sidecar.kafka import plain_admin, plain_consumer

#: The sizes the issue's table is read at.
LEVELS: Final = (100, 1_000, 10_000)
#: The event kinds whose trained dictionaries every published one reuses.
KINDS: Final = ("product_viewed", "customer", "access_log", "order")
#: Events each base dictionary is trained on.
TRAINING_EVENTS: Final = 20_000
#: The readers measured, in the order of the tables.
READERS: Final = ("proxy_1", "proxy_all", "consumer", "dicts_list")
#: A reader's start the bench waits for at most, seconds.
START_TIMEOUT: Final = 300.0
#: Topic settings that make the log cleaner compact the registry and its index at once, and
#: drop the retirements' tombstones as soon as it has.
COMPACT_NOW: Final = {
    "segment.ms": "1000",
    "min.cleanable.dirty.ratio": "0.0001",
    "max.compaction.lag.ms": "1000",
    "delete.retention.ms": "0",
    "min.compaction.lag.ms": "0",
}
#: Seconds the bench waits for the compaction at most (the cleaner wakes every 15 s).
COMPACTION_TIMEOUT: Final = 240.0


@dataclass(frozen=True, slots=True)
class Reading:
    """One reader's start in one run."""

    seconds: float
    rss_mib: float
    bytes_read: int
    #: The store the proxy wrote (bytes, files); None for the other readers.
    store_bytes: int | None = None
    store_files: int | None = None
    #: The consumer's decode of a record of a non-active dictionary, first seen; seconds.
    older_s: float | None = None


@dataclass(slots=True)
class Level:
    """Every run's readings at one registry size."""

    dictionaries: int
    registry_bytes: int
    populate_s: float
    readings: dict[str, list[Reading]] = field(default_factory=lambda: {r: [] for r in READERS})


@dataclass(slots=True)
class Retired:
    """The largest registry after retirement and compaction, and every run's readings."""

    retired: int
    retire_s: float
    #: Whether the index topic was compacted down to what is kept within COMPACTION_TIMEOUT.
    compacted: bool
    compaction_s: float
    #: Records left in the index topic when measured.
    index_records: int
    level: Level


@dataclass(frozen=True, slots=True)
class RegistryResults:
    settings: dict[str, Any]
    bases: list[dict[str, Any]]
    levels: list[Level]
    retired: list[Retired] = field(default_factory=list)


def results_dict(results: RegistryResults) -> dict[str, Any]:
    return {
        "bases": results.bases,
        "levels": [asdict(level) for level in results.levels],
        "retired": [asdict(retired) for retired in results.retired],
    }


def namespace(i: int) -> str:
    return f"bench-registry-{i:03d}"


def _settings(bootstrap: str, topic: str) -> Settings:
    return Settings(
        kafka=KafkaSettings.model_validate({"bootstrap.servers": bootstrap}),
        registry=RegistrySettings(topic=topic, create=True, timeout=120.0),
    )


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment of a child: without the caller's ZDICT_ settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZDICT_")}
    env.update(extra)
    return env


def train_bases(tmp: Path, size: int) -> list[Dictionary]:
    """One dictionary of `size` bytes per event kind, by `zdict-sidecar train`."""
    store_dir = tmp / "bases"
    env = _clean_env(ZDICT_TRAINING__DICT_SIZES=json.dumps([size]))
    bases: list[Dictionary] = []
    for kind in KINDS:
        sample = tmp / f"{kind}.txt"
        sample.write_bytes(b"\n".join(generate(kind, TRAINING_EVENTS, seed=11)) + b"\n")
        trained = subprocess.run(
            [sys.executable, "-m", "sidecar", "train", "--input", str(sample),
             "--namespace", kind.replace("_", "-"), "--dictionaries", str(store_dir)],
            capture_output=True, stdin=subprocess.DEVNULL, check=False, env=env,
        )  # fmt: skip
        if trained.returncode != 0:
            raise InputError(f"bench registry: training failed: {trained.stderr.decode()[-2000:]}")
        active = DictionaryStore(store_dir).active(kind.replace("_", "-"))
        if active is None:
            raise InputError(f"bench registry: training on {kind} kept no dictionary")
        bases.append(active)
    return bases


class Populated:
    """The bench's registry topic, grown through the product's API."""

    def __init__(self, bootstrap: str, topic: str, bases: Sequence[Dictionary], namespaces: int):
        self.registry = Registry.open(_settings(bootstrap, topic), "bench")
        self.bases = bases
        self.namespaces = namespaces
        self.count = 0
        self.bytes = 0
        #: Each dictionary's record bytes, by id; each namespace's activation record bytes.
        self.sizes: dict[int, int] = {}
        self.activation_bytes: dict[str, int] = {}
        #: Per namespace, its dictionaries' ids, oldest first.
        self.ids: dict[str, list[int]] = {}

    def grow_to(self, n: int, log: Callable[[str], None]) -> float:
        """Publish dictionaries up to `n` in all, then activate each namespace's newest;
        returns the seconds it took."""
        started = time.monotonic()
        state = self.registry.state
        # One line per publication is the product's; here it would be thousands.
        logging.getLogger("sidecar.dictionaries.registry").setLevel(logging.WARNING)
        touched: set[str] = set()
        while self.count < n:
            name = namespace(self.count % self.namespaces)
            base = self.bases[self.count % len(self.bases)]
            meta = base.meta.model_copy(
                update={"namespace": name, "version": len(self.ids.get(name, ())) + 1}
            )
            candidate = with_new_id(Dictionary(meta=meta, data=base.data), state.next_id())
            published = self.registry.publish_dictionary(candidate)
            self.sizes[published.id] = _record_bytes(*dictionary_record(published))
            self.bytes += self.sizes[published.id]
            self.ids.setdefault(name, []).append(published.id)
            touched.add(name)
            self.count += 1
            if self.count % 1000 == 0:
                log(f"  {self.count:,} dictionaries published")
        for name in sorted(touched):
            activation = self.registry.publish_activation(name, self.ids[name][-1], "promote")
            self.activation_bytes[name] = _record_bytes(*activation_record(activation))
            self.bytes += self.activation_bytes[name]
        return time.monotonic() - started

    def retire(self) -> tuple[int, float]:
        """Retire every dictionary neither active nor in a rollback stack; how many, and the
        seconds it took. What is kept is then the registry's bytes."""
        started = time.monotonic()
        logging.getLogger("sidecar.dictionaries.registry").setLevel(logging.WARNING)
        retired = self.registry.retire(self.registry.state.versions())
        for meta in retired:
            del self.sizes[meta.id]
            self.ids[meta.namespace].remove(meta.id)
        self.count = len(self.sizes)
        self.bytes = sum(self.sizes.values()) + sum(self.activation_bytes.values())
        return len(retired), time.monotonic() - started

    def compact(self, admin: AdminClient, log: Callable[[str], None]) -> tuple[bool, float, int]:
        """Have the broker compact the registry and its index (`COMPACT_NOW`); whether the
        index came down to what is kept within `COMPACTION_TIMEOUT`, the seconds, and the
        index's records then. A training entry published every few seconds rolls the
        segments, so that the cleaner takes them."""
        started = time.monotonic()
        topic = self.registry.topic
        entries = [
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in COMPACT_NOW.items()
        ]
        resources = [
            ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=entries)
            for name in (topic, topic + INDEX_SUFFIX)
        ]
        for future in admin.incremental_alter_configs(resources).values():
            future.result(60)
        # What is left once compacted: an entry per dictionary kept, an activation and a
        # training entry per namespace, `through`.
        wanted = self.count + 2 * self.namespaces + 1
        records = _count(self.registry.settings.kafka.client_config()["bootstrap.servers"], topic)
        while records > wanted and time.monotonic() - started < COMPACTION_TIMEOUT:
            time.sleep(2.0)
            self.registry.publish_training(namespace(0), {"bench": "compaction"})
            records = _count(
                self.registry.settings.kafka.client_config()["bootstrap.servers"], topic
            )
            log(f"  the index holds {records:,} records (compacted: {wanted:,})")
        return records <= wanted, time.monotonic() - started, records

    def records(self, path: Path) -> None:
        """The consumer's two records (see module), written to `path`."""
        name = namespace(0)
        raw = next(iter(generate(KINDS[0], 1, seed=3)))
        records: dict[str, Any] = {}
        for label, dict_id in (("active", self.ids[name][-1]), ("older", self.ids[name][0])):
            encoder = Encoder(self.registry.state.dictionaries[dict_id], min_size=1)
            value, headers = encoder.encode(raw)
            assert value is not None
            records[label] = encoded_record(raw, value, [(k, v or b"") for k, v in headers])
        path.write_text(json.dumps(records))

    def close(self) -> None:
        self.registry.close()


def _count(bootstrap: str, registry_topic: str) -> int:
    """The records the index topic of `registry_topic` holds now."""
    topic = registry_topic + INDEX_SUFFIX
    consumer = plain_consumer(
        bootstrap, f"bench-registry-count-{os.getpid()}", {"enable.partition.eof": True}
    )
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        consumer.assign([TopicPartition(topic, 0, 0)])
        count, position = 0, 0
        while position < high:
            for msg in consumer.consume(1000, 1.0):
                if msg.error() is None:
                    count += 1
                    position = (msg.offset() or 0) + 1
                else:  # the end: compaction can leave the last offsets empty
                    position = high
        return count
    finally:
        consumer.close()


def _record_bytes(key: bytes, value: bytes, headers: Sequence[tuple[str, Any]]) -> int:
    """A record's bytes as `Registry.bytes_read` counts them."""
    return len(key) + len(value) + sum(len(k) + len(v or b"") for k, v in headers)


def _log_field(line: str, name: str) -> Any:
    return json.loads(line)[name]


def _tree(path: Path) -> tuple[int, int]:
    """Bytes and files under `path`."""
    files = [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def measure_proxy(
    bootstrap: str, topic: str, topics: Sequence[str], tmp: Path, node_ids: Sequence[int]
) -> Reading:
    store = tmp / "proxy-store"
    log_path = tmp / "proxy.log"
    spawned = time.time()
    proxy = ProxyChild(
        bootstrap, store, topics, log_path,
        output_mode="auto", node_ids=node_ids, registry_topic=topic,
    )  # fmt: skip
    try:
        ready = proxy.wait_for('"proxy_listening"', START_TIMEOUT)
        rss = peak_rss_mib(proxy.proc.pid)
        loaded = proxy.wait_for('"registry_loaded"', 1)
    finally:
        proxy.stop()
    at = datetime.fromisoformat(_log_field(ready, "timestamp")).timestamp()
    store_bytes, store_files = _tree(store)
    with contextlib.suppress(FileNotFoundError):
        for path in sorted(store.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
    return Reading(at - spawned, rss, _log_field(loaded, "bytes"), store_bytes, store_files)


def measure_consumer(bootstrap: str, topic: str, records: Path) -> Reading:
    spawned = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "sidecar.bench.registry_reader", bootstrap, topic, str(records)],
        capture_output=True, stdin=subprocess.DEVNULL, check=False, env=_clean_env(),
        timeout=START_TIMEOUT,
    )  # fmt: skip
    if done.returncode != 0:
        raise InputError(f"bench registry: the consumer failed: {done.stderr.decode()[-2000:]}")
    out = json.loads(done.stdout.decode().splitlines()[-1])
    return Reading(
        out["decoded_at"] - spawned, out["rss_mib"], out["bytes_read"], older_s=out["older_s"]
    )


#: Runs its arguments, then prints on stderr their seconds and peak RSS (KiB) as JSON. A child of
#: the bench itself would not do: Linux carries the RSS high-water mark of the memory a process
#: replaces at exec into its ru_maxrss, so a child of the bench reports at least the bench's own
#: peak; a child of this small process, its own.
_MEASURED: Final = """
import json, os, subprocess, sys, time
started = time.monotonic()
child = subprocess.Popen(sys.argv[1:])
_, status, usage = os.wait4(child.pid, 0)
measured = {"seconds": time.monotonic() - started, "maxrss_kib": usage.ru_maxrss}
print(json.dumps(measured), file=sys.stderr)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def measure_dicts_list(bootstrap: str, topic: str) -> Reading:
    env = _clean_env(
        KAFKA_BOOTSTRAP_SERVERS=bootstrap, ZDICT_REGISTRY__TOPIC=topic, ZDICT_LOG_FORMAT="json"
    )
    with tempfile.TemporaryFile() as err:
        done = subprocess.run(
            [sys.executable, "-c", _MEASURED, sys.executable, "-m", "sidecar", "dicts", "list",
             "--registry"],
            stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL, env=env, check=False,
            timeout=START_TIMEOUT,
        )  # fmt: skip
        err.seek(0)
        lines = err.read().decode(errors="replace").splitlines()
    if done.returncode != 0:
        raise InputError("bench registry: dicts list failed:\n" + "\n".join(lines[-20:]))
    measured = json.loads(lines[-1])
    loaded = next(line for line in lines if '"registry_loaded"' in line)
    return Reading(measured["seconds"], measured["maxrss_kib"] / 1024, _log_field(loaded, "bytes"))


@contextlib.contextmanager
def _topic(admin: AdminClient, topic: str) -> Iterator[None]:
    """The bench's registry topic and its index, deleted at the end (best effort)."""
    try:
        yield
    finally:
        topics = [topic, topic + INDEX_SUFFIX]
        for future in admin.delete_topics(topics, operation_timeout=30).values():
            with contextlib.suppress(Exception):
                future.result(60)


def bench_registry(
    bootstrap: str,
    *,
    levels: Sequence[int] = LEVELS,
    namespaces: int = 100,
    size: int = 64 * 1024,
    runs: int = 3,
    log: Callable[[str], None] = print,
) -> RegistryResults:
    """Run the benchmark (see module) at each of `levels` (ascending) dictionaries."""
    if list(levels) != sorted(set(levels)):
        raise InputError("bench registry: --levels must be ascending and distinct")
    settings = {"levels": list(levels), "namespaces": namespaces, "size": size, "runs": runs}
    topic = f"_zdict_bench_registry_{os.getpid()}_{int(time.time())}"
    admin = plain_admin(bootstrap)
    node_ids = sorted(admin.list_topics(timeout=30).brokers)
    served = [namespace(i) for i in range(namespaces)]
    results = RegistryResults(settings, [], [])
    with tempfile.TemporaryDirectory(prefix="bench-registry-") as tmp_name, _topic(admin, topic):
        tmp = Path(tmp_name)
        log(f"training {len(KINDS)} dictionaries of {size:,} bytes")
        bases = train_bases(tmp, size)
        results.bases.extend({"namespace": b.namespace, "size": b.meta.size} for b in bases)
        populated = Populated(bootstrap, topic, bases, namespaces)
        try:
            for n in levels:
                log(f"registry {topic}: publishing up to {n:,} dictionaries")
                level = Level(n, 0, populated.grow_to(n, log))
                level.registry_bytes = populated.bytes
                records = tmp / "records.json"
                populated.records(records)
                for run in range(1, runs + 1):
                    log(f"  N = {n:,}, run {run}/{runs}")
                    _measure(level, bootstrap, topic, served, tmp, node_ids, records)
                results.levels.append(level)
            log(f"registry {topic}: retiring what is neither active nor in a rollback stack")
            retired, retire_s = populated.retire()
            compacted, compaction_s, index_records = populated.compact(admin, log)
            records = tmp / "records.json"
            populated.records(records)  # the oldest dictionary kept is the non-active one
            after = Level(populated.count, populated.bytes, 0.0)
            for run in range(1, runs + 1):
                log(f"  retired, {populated.count:,} kept, run {run}/{runs}")
                _measure(after, bootstrap, topic, served, tmp, node_ids, records)
            results.retired.append(
                Retired(retired, retire_s, compacted, compaction_s, index_records, after)
            )
        finally:
            populated.close()
    return results


def _measure(
    level: Level,
    bootstrap: str,
    topic: str,
    served: Sequence[str],
    tmp: Path,
    node_ids: Sequence[int],
    records: Path,
) -> None:
    """One run of every reader (see the module), its readings added to `level`."""
    level.readings["proxy_1"].append(measure_proxy(bootstrap, topic, served[:1], tmp, node_ids))
    level.readings["proxy_all"].append(measure_proxy(bootstrap, topic, served, tmp, node_ids))
    level.readings["consumer"].append(measure_consumer(bootstrap, topic, records))
    level.readings["dicts_list"].append(measure_dicts_list(bootstrap, topic))
