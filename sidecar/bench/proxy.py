"""`zdict-sidecar bench proxy`: the produce proxy next to producing directly, in one run.

On a real broker, with `kind` events (~100 B `product_viewed` by default), one proxy process
(`zdict-sidecar proxy --no-registry`, its dictionary trained from a warm-up stream first):

* **throughput**: `count` events produced as fast as one confluent-kafka producer can
  (idempotent, acks=all, linger.ms=5), directly and through the proxy: records/s, and the
  proxy's own CPU seconds (`/proc/<pid>/stat`, its training child excluded), hence records/s
  per core of the proxy;
* **latency at a fixed rate** (5,000 records/s for `seconds`): each record's time from
  `produce()` to its delivery report, directly and through the proxy, p50/p99: what the proxy
  adds;
* **bytes stored**: the fixed-rate streams as the broker stores them (record batches in the
  topic's log segments, read from `data_dir`): the client producing raw values with producer
  zstd, against the proxy's per-record frames (batch-compressed with zstd by its producer), at
  the batch fill the client's own settings give.

Each measured part runs `runs` times after a warm-up round, direct and proxy interleaved;
medians and [min-max] are reported.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from sidecar.bench.events import generate
from sidecar.bench.relay import percentile
from sidecar.bench.storage import broker_cpu
from sidecar.bench.workload import free_port
from sidecar.errors import InputError
from sidecar.kafka import plain_admin, plain_producer
from sidecar.record_batch import BatchInfo, segment_batches

#: The fixed rate of the latency and bytes part (records/s).
RATE: Final = 5000
#: Records each fixed-rate stream starts with, untimed: the client's metadata and connections.
PRIME: Final = 100
#: Events of the stream before the measured ones that the proxy's dictionary is trained on
#: (the proxy runs with --no-training: no training run takes CPU while it is measured).
WARMUP: Final = 20_000
#: The measured parts: throughput (direct, proxy), then the fixed-rate streams over
#: `partitions` and over `sparse_partitions` (fewer records per batch).
PARTS: Final = (
    "direct",
    "proxy",
    "direct, fixed rate",
    "proxy, fixed rate",
    "direct, fixed rate, sparse",
    "proxy, fixed rate, sparse",
)
#: The client's settings in every part: librdkafka's defaults but for these.
CLIENT: Final = {"linger.ms": 5, "acks": "all", "enable.idempotence": True}


@dataclass(slots=True)
class Part:
    """One measured part, direct or through the proxy: per round, what it gave."""

    name: str
    records_per_s: list[float] = field(default_factory=list)
    proxy_cpu_s: list[float] = field(default_factory=list)
    p50_ms: list[float] = field(default_factory=list)
    p99_ms: list[float] = field(default_factory=list)
    stored_bytes: list[int] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)
    records: list[int] = field(default_factory=list)

    def median(self, values: Sequence[float]) -> float | None:
        return statistics.median(values) if values else None


@dataclass(slots=True)
class ProxyResults:
    settings: dict[str, Any]
    parts: dict[str, Part]
    dictionary: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "parts": {name: asdict(part) for name, part in self.parts.items()},
            "dictionary": self.dictionary,
        }


class _ProxyProcess:
    """`zdict-sidecar proxy` as a child process, its JSON log in a file."""

    def __init__(self, bootstrap: str, store: Path, topic: str, log_path: Path) -> None:
        self.address = f"127.0.0.1:{free_port()}"
        self.log_path = log_path
        env = {k: v for k, v in os.environ.items() if not k.startswith("ZDICT_")}
        env.update({"KAFKA_BOOTSTRAP_SERVERS": bootstrap, "ZDICT_LOG_FORMAT": "json"})
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sidecar", "proxy", "--listen", self.address,
                 "--no-registry", "--no-training", "--dictionaries", str(store), "--topic", topic,
                 "--metrics-port", "0"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            )  # fmt: skip

    def wait_for(self, text: str, timeout: float) -> str:
        """The first log line containing `text`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.log_path.read_text(errors="replace").splitlines():
                if text in line:
                    return line
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        tail = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-20:])
        raise InputError(f"bench proxy: the proxy logged no {text!r} in {timeout:.0f} s:\n{tail}")

    def cpu(self) -> float:
        seconds = broker_cpu(self.proc.pid)
        if seconds is None:
            raise InputError("bench proxy: cannot read the proxy's CPU time from /proc")
        return seconds

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def _producer(bootstrap: str, compression: str) -> Producer:
    return plain_producer(
        bootstrap,
        {**CLIENT, "compression.type": compression, "queue.buffering.max.messages": 1_000_000},
    )


def _produce(
    producer: Producer,
    topic: str,
    values: Sequence[bytes],
    rate: float | None,
    on_latency: Callable[[float], None] | None = None,
    *,
    spread: int = 1,
) -> float:
    """Produce `values` round-robin over `spread` partitions (at `rate` records/s, or as fast
    as possible); seconds until every one is delivered. `on_latency` gets each record's
    produce-to-delivery seconds."""
    failures: list[KafkaError] = []
    started = time.monotonic()
    for i, value in enumerate(values):
        sent = time.monotonic()

        def delivered(err: KafkaError | None, _msg: Message, sent: float = sent) -> None:
            if err is not None:
                failures.append(err)
            elif on_latency is not None:
                on_latency(time.monotonic() - sent)

        while True:
            try:
                producer.produce(topic, value, partition=i % spread, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
        if rate is not None:
            ahead = (i + 1) / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
    if producer.flush(120) or failures:
        raise InputError(f"bench proxy: producing to {topic} failed: {failures[:3]}")
    return time.monotonic() - started


def _batches(
    data_dir: Path | None, topic: str, partitions: int
) -> dict[int, list[BatchInfo]] | None:
    """The record batches of `topic` in the broker's segments, per partition; None without a
    data directory."""
    if data_dir is None:
        return None
    return {p: segment_batches(data_dir / f"{topic}-{p}") for p in range(partitions)}


def bench_proxy(
    bootstrap: str,
    data_dir: Path | None,
    *,
    kind: str = "product_viewed",
    count: int = 200_000,
    seconds: float = 10.0,
    partitions: int = 4,
    sparse_partitions: int = 64,
    runs: int = 3,
    log: Callable[[str], None] = print,
) -> ProxyResults:
    """Run the benchmark (see module); `data_dir` is the broker's log directory (None: bytes
    are not measured)."""
    if data_dir is not None and not data_dir.is_dir():
        raise InputError(f"broker data directory {data_dir} does not exist (--data-dir)")
    admin = plain_admin(bootstrap)
    run_id = uuid.uuid4().hex[:6]
    # One topic each way, with enough partitions for every part: one namespace for the proxy
    # (its dictionary trained once), and the bytes of each part counted as the batches it added.
    direct, proxied = f"bench-proxy-{run_id}-direct", f"bench-proxy-{run_id}-proxied"
    spread_max = max(partitions, sparse_partitions)
    for future in admin.create_topics(
        [NewTopic(t, num_partitions=spread_max) for t in (direct, proxied)]
    ).values():
        future.result(30)
    stream = generate(kind, WARMUP + (count + 2 * int(RATE * seconds)) * (runs + 1), seed=7)
    parts = {name: Part(name) for name in PARTS}

    def fixed_rate(
        name: str, address: str, topic: str, values: list[bytes], spread: int, round_: int
    ) -> None:
        """One fixed-rate stream over `spread` partitions into `parts[name]` (round > 0)."""
        producer = _producer(address, "zstd")
        # Metadata and connections first (its records are counted in the bytes, not timed).
        before = _batches(data_dir, topic, spread_max)
        _produce(producer, topic, values[:PRIME], None, spread=spread)
        latencies: list[float] = []
        _produce(producer, topic, values[PRIME:], RATE, latencies.append, spread=spread)
        if round_ == 0:
            return
        part = parts[name]
        part.p50_ms.append(percentile(latencies, 0.5) * 1000)
        part.p99_ms.append(percentile(latencies, 0.99) * 1000)
        if before is not None:
            added = _batches(data_dir, topic, spread_max)
            assert added is not None
            new = [b for key, batches in added.items() for b in batches[len(before.get(key, [])) :]]
            part.stored_bytes.append(sum(b.size for b in new))
            part.batches.append(len(new))
            part.records.append(sum(b.records for b in new))

    with tempfile.TemporaryDirectory(prefix="bench-proxy-") as tmp:
        store = Path(tmp) / "dictionaries"
        log(f"a dictionary for {proxied}, trained on {WARMUP:,} events of the stream")
        sample = Path(tmp) / "sample.txt"
        sample.write_bytes(b"\n".join(next(stream) for _ in range(WARMUP)) + b"\n")
        trained = subprocess.run(
            [sys.executable, "-m", "sidecar", "train", "--input", str(sample),
             "--namespace", proxied, "--dictionaries", str(store)],
            capture_output=True, stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip
        if trained.returncode != 0:
            raise InputError(f"bench proxy: training failed: {trained.stderr.decode()[-2000:]}")
        proxy = _ProxyProcess(bootstrap, store, proxied, Path(tmp) / "proxy.log")
        try:
            proxy.wait_for('"proxy_listening"', 60)
            loaded = proxy.wait_for('"dictionary_loaded"', 10)
            for round_ in range(runs + 1):
                measured = round_ > 0
                label = f"round {round_}" if measured else "warm-up round"
                values = [next(stream) for _ in range(count)]
                log(f"{label}: throughput, {count:,} events direct, then through the proxy")
                for name, address, target in (
                    ("direct", bootstrap, direct),
                    ("proxy", proxy.address, proxied),
                ):
                    cpu = proxy.cpu()
                    producer = _producer(address, "none")
                    took = _produce(producer, target, values, None, spread=partitions)
                    if measured:
                        parts[name].records_per_s.append(count / took)
                        parts[name].proxy_cpu_s.append(proxy.cpu() - cpu)
                for spread in (partitions, sparse_partitions):
                    fixed = [next(stream) for _ in range(int(RATE * seconds))]
                    log(
                        f"{label}: {RATE:,} records/s for {seconds:.0f} s over {spread} "
                        "partitions, direct, then through the proxy"
                    )
                    suffix = "" if spread == partitions else ", sparse"
                    fixed_rate(
                        f"direct, fixed rate{suffix}", bootstrap, direct, fixed, spread, round_
                    )
                    fixed_rate(
                        f"proxy, fixed rate{suffix}", proxy.address, proxied, fixed, spread, round_
                    )
        finally:
            proxy.stop()
            for future in admin.delete_topics([direct, proxied], operation_timeout=30).values():
                with contextlib.suppress(Exception):  # best effort: the bench's own topics
                    future.result(60)
    dictionary = json.loads(loaded)
    settings = {
        "kind": kind,
        "count": count,
        "rate": RATE,
        "seconds": seconds,
        "partitions": partitions,
        "sparse_partitions": sparse_partitions,
        "runs": runs,
        "client": CLIENT,
        "warmup": WARMUP,
        "data_dir": str(data_dir) if data_dir else None,
    }
    return ProxyResults(
        settings, parts, {k: dictionary.get(k) for k in ("dict_id", "heldout_ratio")}
    )


MS: Final = "{:.1f}"


def _range(values: Sequence[float], fmt: str) -> str:
    if not values:
        return "-"
    median = fmt.format(statistics.median(values))
    if len(values) == 1:
        return median
    return f"{median} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def format_results(results: ProxyResults) -> str:
    """`bench proxy`'s tables: throughput per core, latency added at the fixed rate, bytes."""
    from sidecar.tools.tables import render

    parts = results.parts
    direct, proxy = parts["direct"], parts["proxy"]
    # Records per CPU second of the proxy process: what one core of it moves.
    per_core = [results.settings["count"] / cpu for cpu in proxy.proxy_cpu_s if cpu]
    throughput = render(
        ["path", "records/s", "proxy CPU s", "records/s per proxy core"],
        [
            ["direct", _range(direct.records_per_s, "{:,.0f}"), "-", "-"],
            [
                "through the proxy",
                _range(proxy.records_per_s, "{:,.0f}"),
                _range(proxy.proxy_cpu_s, "{:.2f}"),
                _range(per_core, "{:,.0f}"),
            ],
        ],
        f"Throughput: {results.settings['count']:,} {results.settings['kind']} events, one "
        "producer (idempotent, acks=all, linger.ms=5)",
    )
    fixed_direct, fixed_proxy = parts["direct, fixed rate"], parts["proxy, fixed rate"]
    added = [p - d for p, d in zip(fixed_proxy.p99_ms, fixed_direct.p99_ms, strict=True)]
    latency = render(
        ["path", "p50 ms", "p99 ms"],
        [
            ["direct", _range(fixed_direct.p50_ms, MS), _range(fixed_direct.p99_ms, MS)],
            ["through the proxy", _range(fixed_proxy.p50_ms, MS), _range(fixed_proxy.p99_ms, MS)],
            ["added by the proxy", "", _range(added, "{:+.1f}")],
        ],
        f"Latency at {RATE:,} records/s: produce() to delivery report",
    )
    rows = []
    for spread, suffix in (
        (results.settings["partitions"], ""),
        (results.settings["sparse_partitions"], ", sparse"),
    ):
        for label, part in (
            ("client: raw values, producer zstd", parts[f"direct, fixed rate{suffix}"]),
            ("through the proxy: frames, its zstd", parts[f"proxy, fixed rate{suffix}"]),
        ):
            per_record = [b / r for b, r in zip(part.stored_bytes, part.records, strict=True) if r]
            fill = [r / b for r, b in zip(part.records, part.batches, strict=True) if b]
            rows.append([spread, label, _range(fill, "{:.1f}"), _range(per_record, "{:.1f}")])
    stored = render(
        ["partitions", "what the broker stores", "records/batch", "bytes/record"],
        rows,
        f"Bytes stored: {RATE:,} records/s, the log segments' record batches",
    )
    return "\n\n".join([throughput, latency, stored])
