"""Driving a real sidecar with generated traffic: what `make demo` and `bench lifecycle` share.

* `SteadyProducer`: generated events at a fixed rate, switching to the drifted schema after a
  given time (`generate --drift-at`), keeping a digest of every value it produced;
* `SidecarProcess`: `zdict-sidecar run` as a child process with JSON logs in a file, its metrics
  scraped over HTTP and its log events read back;
* `drift_run`: one run of the lifecycle under a schema drift, reduced to a timeline (ratio per
  second) and its milestones: first dictionary, drift detected, retrained dictionary active,
  ratio back to its level before the drift.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final, cast

from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]
from prometheus_client.parser import text_string_to_metric_families

from sidecar.bench.events import generate
from sidecar.codec import Decoder, header_cost
from sidecar.dictionaries.registry import RegistryResolver
from sidecar.kafka import plain_admin, plain_consumer, plain_producer

#: Seconds over which the timeline's ratio is smoothed (traffic of one second is noisy).
SMOOTHING: Final = 5


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def digest(value: bytes) -> bytes:
    """A short fingerprint of a value: what the producer keeps to check the decoded output."""
    return hashlib.blake2b(value, digest_size=8).digest()


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = plain_admin(bootstrap)
    for future in admin.create_topics([NewTopic(topic, num_partitions=partitions)]).values():
        future.result(30)


class SteadyProducer(threading.Thread):
    """Produces `kind` events at `rate` per second until stopped; drifted after `drift_after` s."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        rate: int,
        *,
        kind: str = "product_viewed",
        drift_after: float | None = None,
        seed: int = 42,
    ) -> None:
        super().__init__(daemon=True, name="steady-producer")
        self.producer = plain_producer(bootstrap, {"linger.ms": 5})
        self.topic, self.rate, self.kind, self.seed = topic, rate, kind, seed
        self.drift_after = drift_after
        self.sent = 0
        self.raw_bytes = 0
        self.digests: Counter[bytes] = Counter()
        self.started_at = 0.0
        self.drifted_at: float | None = None  # Unix seconds of the first drifted event
        self.stopped = threading.Event()

    def run(self) -> None:
        before = generate(self.kind, 10_000_000, seed=self.seed)
        after = generate(self.kind, 10_000_000, seed=self.seed + 1, drift_at=0)
        self.started_at = time.time()
        start = time.monotonic()
        while not self.stopped.is_set():
            elapsed = time.monotonic() - start
            drifted = self.drift_after is not None and elapsed >= self.drift_after
            if drifted and self.drifted_at is None:
                self.drifted_at = time.time()
            value = next(after if drifted else before)
            while True:
                try:
                    self.producer.produce(self.topic, value, key=value[16:24])
                    break
                except BufferError:
                    self.producer.poll(0.05)
            self.sent += 1
            self.raw_bytes += len(value)
            self.digests[digest(value)] += 1
            if self.sent % 500 == 0:
                self.producer.poll(0)
                ahead = self.sent / self.rate - (time.monotonic() - start)
                if ahead > 0:
                    time.sleep(ahead)
        self.producer.flush(30)


class SidecarProcess:
    """`zdict-sidecar run ...` (or another `command`: `proxy`) as a child process: JSON log in
    a file, metrics over HTTP."""

    def __init__(
        self,
        args: Sequence[str],
        env: Mapping[str, str],
        log_path: Path,
        name: str = "sidecar",
        command: str = "run",
    ) -> None:
        self.port = free_port()
        self.log_path = log_path
        self.name = name
        full_env = {**os.environ, **env, "ZDICT_LOG_FORMAT": "json"}
        full_env["ZDICT_METRICS__HOST"] = "127.0.0.1"
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sidecar", command, *args, "--metrics-port", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=full_env,
            )

    def metrics(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        """One scrape of /metrics: sample (name, labels) → value; empty if it does not answer."""
        url = f"http://127.0.0.1:{self.port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                text = response.read().decode()
        except OSError:
            return {}
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """Logged events (all, or those called `name`), each with `t`: Unix seconds."""
        out: list[dict[str, Any]] = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if not isinstance(event, dict) or (name and event.get("event") != name):
                continue
            stamp = event.get("timestamp")
            if isinstance(stamp, str):
                event["t"] = datetime.fromisoformat(stamp).timestamp()
            out.append(event)
        return out

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, then the exit code."""
        if self.running():
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)


def totals(metrics: Mapping[tuple[str, frozenset[tuple[str, str]]], float]) -> tuple[float, ...]:
    """(input bytes, output bytes, messages) summed over namespaces, from one scrape."""
    sums = {"zdict_input_bytes_total": 0.0, "zdict_output_bytes_total": 0.0}
    messages = 0.0
    for (name, _), value in metrics.items():
        if name in sums:
            sums[name] += value
        elif name == "zdict_records_total":
            messages += value
    return sums["zdict_input_bytes_total"], sums["zdict_output_bytes_total"], messages


@dataclass(slots=True)
class Point:
    """One scrape: seconds since the run started, cumulative counters, the active dictionary."""

    t: float
    input_bytes: float
    output_bytes: float
    messages: float
    dict_id: int | None


@dataclass(slots=True)
class DriftRun:
    """One run under a schema drift: the timeline and its milestones (seconds since start)."""

    rate: int
    seconds: float
    drift_at: float
    points: list[Point] = field(default_factory=list)
    trainings: list[dict[str, Any]] = field(default_factory=list)
    first_dictionary: float | None = None
    detected: float | None = None
    switched: float | None = None
    recovered: float | None = None
    heldout_ratio: float | None = None  # the first dictionary's, as training measured it
    pre_ratio: float | None = None
    dip_ratio: float | None = None
    post_ratio: float | None = None
    produced: int = 0
    relayed: int = 0
    decoded: int = 0
    mismatched: int = 0
    raw_bytes: int = 0
    output_bytes: int = 0
    exit_code: int | None = None

    def ratios(self) -> list[tuple[float, float]]:
        """(t, ratio over the last `SMOOTHING` seconds) for every point with traffic."""
        out: list[tuple[float, float]] = []
        for i in range(SMOOTHING, len(self.points)):
            now, then = self.points[i], self.points[i - SMOOTHING]
            produced = now.output_bytes - then.output_bytes
            if produced > 0:
                out.append((now.t, (now.input_bytes - then.input_bytes) / produced))
        return out

    def milestones(self) -> None:
        """Derive pre-drift, dip and final ratios and when the ratio came back.

        "Before" is the steady state with the first dictionary: from one smoothing window after
        it was active (at most 20 s) up to the change.
        """
        ratios = self.ratios()
        since = self.drift_at - 20
        if self.first_dictionary is not None:
            since = max(since, self.first_dictionary + SMOOTHING)
        before = [r for t, r in ratios if since <= t < self.drift_at]
        after = [(t, r) for t, r in ratios if t >= self.drift_at]
        if before:
            self.pre_ratio = statistics.median(before)
        if after:
            self.dip_ratio = min(r for _, r in after)
            self.post_ratio = statistics.median(r for t, r in after if t >= self.seconds - 15)
        if self.pre_ratio is not None and self.switched is not None:
            back = [t for t, r in after if t >= self.switched and r >= self.pre_ratio]
            self.recovered = back[0] if back else None

    def to_dict(self) -> dict[str, Any]:
        data = {k: getattr(self, k) for k in self.__slots__ if k != "points"}
        data["timeline"] = [[round(t, 2), round(r, 4)] for t, r in self.ratios()]
        return data


#: Settings that make a one-minute run show the whole lifecycle (production defaults judge
#: drift over 5 minutes and train at most once a minute).
DEMO_SETTINGS: Final = {
    "ZDICT_TRAINING__DRIFT_WINDOW": "8",
    "ZDICT_TRAINING__DRIFT_MIN_MESSAGES": "5000",
    "ZDICT_TRAINING__MIN_INTERVAL": "10",
    "ZDICT_SAMPLING__MAX_BYTES": str(4 * 1024 * 1024),
    "ZDICT_SAMPLING__EVERY": "4",
    "ZDICT_REGISTRY__FOLLOW_INTERVAL": "1",
}


def drift_run(
    bootstrap: str,
    work_dir: Path,
    *,
    rate: int,
    seconds: float,
    drift_after: float,
    settings: Mapping[str, str] = DEMO_SETTINGS,
    verify: bool = True,
    progress: Any = None,
) -> DriftRun:
    """Produce at `rate` for `seconds` (drifted after `drift_after`) through a fresh sidecar.

    The sidecar starts with no dictionary and its own registry topic; it is scraped every
    second. At the end the output is read back and (with `verify`) decoded by a decoder that
    knows only the registry, and compared with what was produced.
    """
    run_id = uuid.uuid4().hex[:8]
    topic, registry = f"lifecycle-{run_id}", f"_zdict_dictionaries-{run_id}"
    create_topic(bootstrap, topic, 3)
    env = {**settings, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "ZDICT_REGISTRY__TOPIC": registry}
    work_dir.mkdir(parents=True, exist_ok=True)
    sidecar = SidecarProcess(
        ["--input-topic", topic, "--create-topics", "--dictionaries", str(work_dir / run_id)],
        env,
        work_dir / f"sidecar-{run_id}.log",
    )
    run = DriftRun(rate=rate, seconds=seconds, drift_at=drift_after)
    while not sidecar.events("partitions_assigned"):
        if not sidecar.running():
            raise RuntimeError(f"the sidecar exited; see {sidecar.log_path}")
        time.sleep(0.1)
    producer = SteadyProducer(bootstrap, topic, rate, drift_after=drift_after)
    producer.start()
    while not producer.started_at:
        time.sleep(0.01)
    start = producer.started_at
    try:
        while time.time() - start < seconds:
            tick = time.time()
            scrape = sidecar.metrics()
            infos = [
                dict(labels)
                for (name, labels), _ in scrape.items()
                if name == "zdict_dictionary_info"
            ]
            dict_id = int(infos[0]["dict_id"]) if infos else None
            inp, out, msgs = totals(scrape)
            run.points.append(Point(tick - start, inp, out, msgs, dict_id or None))
            if progress is not None:
                progress(run, sidecar)
            time.sleep(max(0.0, 1.0 - (time.time() - tick)))
    finally:
        producer.stopped.set()
        producer.join(60)
    output = f"{topic}.zd"
    deadline = time.monotonic() + 120
    while _relayed(bootstrap, output) < producer.sent and time.monotonic() < deadline:
        time.sleep(0.5)
    run.exit_code = sidecar.stop()
    run.produced, run.raw_bytes = producer.sent, producer.raw_bytes
    if producer.drifted_at is not None:
        run.drift_at = producer.drifted_at - start
    run.trainings = [{**e, "t": e["t"] - start} for e in sidecar.events("training_finished")]
    promoted = [e for e in run.trainings if e["decision"] == "promoted"]
    if promoted:
        run.first_dictionary = promoted[0]["t"]
        run.heldout_ratio = promoted[0].get("heldout_ratio")
    drift_starts = [
        e["t"] - start
        for e in sidecar.events("training_started")
        if e.get("trigger") == "drift" and e["t"] - start >= run.drift_at
    ]
    run.detected = drift_starts[0] if drift_starts else None
    if run.detected is not None:
        loads = [
            e["t"] - start
            for e in sidecar.events("dictionary_loaded")
            if e["t"] - start >= run.detected
        ]
        run.switched = loads[0] if loads else None
    run.milestones()
    decoder = Decoder(RegistryResolver.connect(bootstrap, topic=registry)) if verify else None
    try:
        relayed, out_bytes, decoded, mismatched = _read_back(
            bootstrap, output, producer.sent, decoder, producer.digests
        )
    finally:
        if decoder is not None:
            decoder.close()
    run.relayed, run.output_bytes, run.decoded, run.mismatched = (
        relayed,
        out_bytes,
        decoded,
        mismatched,
    )
    return run


def _relayed(bootstrap: str, topic: str) -> int:
    from confluent_kafka import TopicPartition

    consumer = plain_consumer(bootstrap, f"w-{uuid.uuid4().hex}")
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return 0
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in metadata.partitions
        )
    finally:
        consumer.close()


def _read_back(
    bootstrap: str,
    topic: str,
    expected: int,
    decoder: Decoder | None,
    digests: Counter[bytes],
) -> tuple[int, int, int, int]:
    """(records, value + added header bytes, decoded, mismatched) of the output topic.

    Every decoded value must be one the producer sent (its digest is taken off the count).
    """
    consumer = plain_consumer(
        bootstrap,
        f"w-{uuid.uuid4().hex}",
        {"auto.offset.reset": "earliest", "enable.auto.commit": False},
    )
    consumer.subscribe([topic])
    remaining = Counter(digests)
    records = out_bytes = decoded = mismatched = 0
    deadline = time.monotonic() + 120
    try:
        while records < expected and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 1.0):
                if msg.error() is not None:
                    continue
                records += 1
                value = msg.value() or b""
                out_bytes += len(value)
                headers = cast(list[tuple[str, bytes | None]], msg.headers() or [])
                for key, header in headers:
                    if key == "zd" and header is not None:
                        out_bytes += header_cost(key, header)
                if decoder is not None:
                    plain = decoder.decode(value, headers) or b""
                    fingerprint = digest(plain)
                    if remaining[fingerprint] > 0:
                        remaining[fingerprint] -= 1
                        decoded += 1
                    else:
                        mismatched += 1
    finally:
        consumer.close()
    return records, out_bytes, decoded, mismatched
