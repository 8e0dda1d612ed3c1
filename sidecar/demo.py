"""`zdict-sidecar demo`: the whole job on a local broker, in about a minute and a half.

1. create an input topic (3 partitions) and produce generated events at a steady rate;
2. once 20,000 are in, train a first dictionary from a topic sample;
3. run the sidecar (`zdict-sidecar run`, a real subprocess) while events keep flowing;
4. stop producing, let the sidecar catch up, stop it (SIGTERM), and read the output topic back:
   messages, raw and output bytes (header bytes counted), ratio, bytes saved, and latency
   percentiles from the sidecar's own histogram.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import cast

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from prometheus_client.parser import text_string_to_metric_families

from sidecar.codec import header_cost
from sidecar.generate import generate
from sidecar.tables import render


def _bootstrap() -> str:
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not bootstrap:
        raise SystemExit(
            "zdict-sidecar demo: KAFKA_BOOTSTRAP_SERVERS is not set; run `make demo` "
            "(it starts a local broker) or point it at your cluster"
        )
    return bootstrap


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _SteadyProducer(threading.Thread):
    """Produces generated events at `rate` per second until stopped."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic, self.rate = topic, rate
        self.sent = 0
        self.raw_bytes = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        events = generate("product_viewed", 10_000_000, seed=42)
        start = time.monotonic()
        for value in events:
            if self.stopped.is_set():
                break
            self.producer.produce(self.topic, value, key=value[16:24])
            self.sent += 1
            self.raw_bytes += len(value)
            if self.sent % 500 == 0:
                self.producer.poll(0)
                ahead = self.sent / self.rate - (time.monotonic() - start)
                if ahead > 0:
                    time.sleep(ahead)
        self.producer.flush(30)


def _count(bootstrap: str, topic: str, partitions: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"demo-{uuid.uuid4().hex}"})
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        )
    finally:
        consumer.close()


def _read_output(bootstrap: str, topic: str, expected: int) -> tuple[int, int, int]:
    """(records, value + added header bytes, compressed records) of the output topic."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"demo-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    records = out_bytes = compressed = 0
    deadline = time.monotonic() + 60
    try:
        while records < expected and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 1.0):
                if msg.error() is not None:
                    continue
                records += 1
                out_bytes += len(msg.value() or b"")
                headers = cast(list[tuple[str, bytes | None]], msg.headers() or [])
                for key, value in headers:
                    if key == "zd" and value is not None:
                        out_bytes += header_cost(key, value)
                        compressed += 1
    finally:
        consumer.close()
    return records, out_bytes, compressed


def _latency_quantiles(metrics_text: str) -> tuple[float, float]:
    buckets: list[tuple[float, float]] = []
    for family in text_string_to_metric_families(metrics_text):
        if family.name == "zdict_relay_latency_seconds":
            for sample in family.samples:
                if sample.name.endswith("_bucket"):
                    buckets.append((float(sample.labels["le"]), sample.value))
    buckets.sort()
    total = buckets[-1][1] if buckets else 0.0

    def quantile(q: float) -> float:
        for bound, count in buckets:
            if total and count >= q * total:
                return bound
        return float("nan")

    return quantile(0.5), quantile(0.99)


def main(duration: float = 60.0, rate: int = 5000) -> int:
    bootstrap = _bootstrap()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"demo-events-{uuid.uuid4().hex[:6]}"
    for future in admin.create_topics([NewTopic(topic, num_partitions=3)]).values():
        future.result(30)
    print(f"input topic {topic} (3 partitions) on {bootstrap}; producing {rate:,} events/s")
    producer = _SteadyProducer(bootstrap, topic, rate)
    producer.start()
    store = Path(tempfile.mkdtemp(prefix="zdict-demo-dicts-"))
    while producer.sent < 20_000:
        time.sleep(0.2)
    time.sleep(1)
    cli = [sys.executable, "-m", "sidecar"]
    print("training a first dictionary from the latest 20,000 records of the topic ...")
    train = subprocess.run(
        [*cli, "train", "--topic", topic, "--sample", "20000", "--dictionaries", str(store)],
        capture_output=True,
        text=True,
    )
    print(
        "\n".join(
            line
            for line in train.stdout.splitlines()
            if line.startswith(("decision", "dictionary"))
        )
    )
    port = _free_port()
    log_path = store / "sidecar.log"
    with open(log_path, "wb") as log:
        sidecar = subprocess.Popen(
            [
                *cli,
                "run",
                "--input-topic",
                topic,
                "--create-topics",
                "--dictionaries",
                str(store),
                "--metrics-port",
                str(port),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "ZDICT_LOG_FORMAT": "json"},
        )
    print(f"sidecar running: metrics at http://127.0.0.1:{port}/metrics (log: {log_path})")
    metrics_text = ""
    try:
        time.sleep(duration)
        producer.stopped.set()
        producer.join()
        produced = producer.sent
        output = f"{topic}.zd"
        deadline = time.monotonic() + 60
        while _count(bootstrap, output, 3) < produced and time.monotonic() < deadline:
            time.sleep(0.5)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            metrics_text = response.read().decode()
    except KeyboardInterrupt:
        producer.stopped.set()
    finally:
        sidecar.send_signal(signal.SIGTERM)
        code = sidecar.wait(30)
    records, out_bytes, compressed = _read_output(bootstrap, f"{topic}.zd", producer.sent)
    p50, p99 = _latency_quantiles(metrics_text)
    raw = producer.raw_bytes
    rows: list[list[object]] = [
        ["messages produced / relayed", f"{producer.sent:,} / {records:,}"],
        ["compressed (zd header)", f"{compressed:,}"],
        ["raw value bytes", f"{raw:,}"],
        ["output bytes (values + zd headers)", f"{out_bytes:,}"],
        ["ratio", f"{raw / out_bytes:.3f}" if out_bytes else "-"],
        ["bytes saved", f"{raw - out_bytes:,} ({1 - out_bytes / raw:.1%})" if raw else "-"],
        [
            "relay latency p50 / p99 (histogram bucket bound)",
            f"≤ {p50 * 1000:g} ms / ≤ {p99 * 1000:g} ms",
        ],
        ["sidecar exit code after SIGTERM", code],
    ]
    print()
    print(
        render(
            ("", "value"), rows, f"demo: {duration:.0f} s of {rate:,} events/s through the sidecar"
        )
    )
    return 0 if code == 0 and records == producer.sent else 1
