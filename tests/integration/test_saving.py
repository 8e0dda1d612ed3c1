"""Saved against the producer's codec, as Prometheus shows it, is what the broker's log segments
say: a real Prometheus scrapes a real proxy and two real relays while the same records are
produced directly (producer zstd) and through the proxy, and relayed from the direct topic, at
fills of 4 and 128 records a batch. For each, `zdict_stored_without_sidecar_bytes_total` minus
`zdict_stored_bytes_total` over the run must equal the bytes of the direct topic's batches minus
those of the sidecar's (read from the broker's segment files, `bench storage`'s `Storage`):
within 3% of that saving for the proxy (which counts both sides), and within 5% of it for the
relay, which estimates what the producer's own batches store from a sample
(`stored_estimate`). Run with `-s` for the figures.

The broker must run on this machine: its `log.dirs` (asked of the broker itself) are read.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from sidecar.bench.events import generate
from sidecar.bench.storage import Storage

from .forward_proxies import allowed, start_proxy
from .launch import StartSidecar
from .log_dirs import log_dirs
from .process import Sidecar
from .prometheus_server import PrometheusServer
from .training import train_dictionary
from .waiting import wait_until

FILLS = (4, 128)
#: Records per fill: 1,024 batches of 4, 32 of 128.
RECORDS = 4096
#: The sidecars' producers report their batches this often (ms).
STATISTICS_MS = "500"
PROXY_TOLERANCE = 0.03
RELAY_TOLERANCE = 0.05


def _produce(bootstrap: str, topic: str, values: list[bytes], fill: int, now: int) -> None:
    """`values` keyed, one timestamp, partition 0, producer zstd, `fill` records a batch."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": "zstd",
            "batch.num.messages": str(fill),
            "linger.ms": "1000",
            "enable.idempotence": True,
        }
    )
    for i, value in enumerate(values):
        producer.produce(topic, value, b"user-%05d" % i, 0, timestamp=now)
        producer.poll(0)
    assert producer.flush(60) == 0


def _stored(storage: Storage, topic: str) -> int:
    """Bytes of `topic`'s record batches in the broker's segments, once all records are in."""
    wait_until(
        lambda: sum(b.records for b in storage.batches(topic)) == RECORDS,
        30,
        f"{RECORDS} records in the segments of {topic}",
    )
    return sum(b.size for b in storage.batches(topic))


def _saved(prometheus: PrometheusServer, topic: str, path: str) -> float:
    """Saved against the producer's codec over the run, once every record is counted."""
    selector = f'{{topic="{topic}", path="{path}"}}'

    def counted() -> bool:
        result = prometheus.result(f"sum(zdict_stored_records_total{selector})")
        return bool(result) and float(result[0]["value"][1]) == RECORDS

    wait_until(counted, 60, f"Prometheus to count {RECORDS} records of {topic} ({path})")
    (sample,) = prometheus.result(
        f"sum(zdict_stored_without_sidecar_bytes_total{selector})"
        f" - sum(zdict_stored_bytes_total{selector})"
    )
    return float(sample["value"][1])


@pytest.fixture
def storage(kafka_admin: AdminClient, kafka_bootstrap: str) -> Iterator[Storage]:
    store = Storage(kafka_bootstrap, log_dirs(kafka_admin)[0], None, 1)
    yield store
    store.delete_all()


def test_saved_against_the_producers_codec_is_what_the_broker_stores_less(
    sidecar: StartSidecar, storage: Storage, kafka_bootstrap: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    topics = {
        fill: (storage.topic(f"direct{fill}"), storage.topic(f"proxy{fill}")) for fill in FILLS
    }
    store = tmp_path / "dictionaries"
    training = list(generate("product_viewed", 5_000, seed=904))
    for direct, proxied in topics.values():
        for topic in (direct, proxied):
            train_dictionary(store, topic, training, tmp_path)
    common = {
        "ZDICT_DICTIONARIES": str(store),
        "ZDICT_REGISTRY__ENABLED": "false",
        "ZDICT_TRAINING__ENABLED": "false",
        "ZDICT_CODEC__OUTPUT_MODE": "auto",
    }
    address, proxy = start_proxy(
        sidecar,
        "saving-proxy",
        "--no-training",
        env={**common, **allowed(*(proxied for _, proxied in topics.values()))},
    )
    relays: dict[int, Sidecar] = {}
    for fill, (direct, _) in topics.items():
        relays[fill] = sidecar(
            "run",
            *("--input-topic", direct, "--create-topics"),
            *("--group-id", f"zdict-it-saving-{uuid.uuid4().hex[:12]}"),
            env={
                **common,
                "ZDICT_RELAY__INPUT_COMPRESSION": "zstd",
                "ZDICT_PRODUCER__COMPRESSION_TYPE": "zstd",
                "ZDICT_PRODUCER__BATCH_NUM_MESSAGES": str(fill),
                "ZDICT_PRODUCER__LINGER_MS": "1000",
                "ZDICT_PRODUCER__STATISTICS_INTERVAL_MS": STATISTICS_MS,
            },
            name=f"saving-relay-{fill}",
        )
        relays[fill].wait_for_event("partitions_assigned", timeout=30)
    ports = [p.metrics_port for p in (proxy, *relays.values()) if p.metrics_port is not None]
    prometheus = PrometheusServer(tmp_path, ports)
    try:
        prometheus.wait_ready()
        values = list(generate("product_viewed", RECORDS, seed=905))
        now = int(time.time() * 1000)
        for fill, (direct, proxied) in topics.items():
            _produce(kafka_bootstrap, direct, values, fill, now)
            _produce(address, proxied, values, fill, now)
            direct_bytes = _stored(storage, direct)
            # The proxy counts both sides: its saving within 3% of the broker's. The relay
            # estimates what the producer's own batches store: its saving within 5%.
            for path, topic, output, tolerance in (
                ("proxy", proxied, proxied, PROXY_TOLERANCE),
                ("relay", direct, f"{direct}.zd", RELAY_TOLERANCE),
            ):
                if output not in storage.topics:
                    storage.topics.append(output)  # deleted with the others
                expected = direct_bytes - _stored(storage, output)
                shown = _saved(prometheus, topic, path)
                error = abs(shown - expected)
                line = (
                    f"fill {fill} {path}: direct {direct_bytes:,} B, saved {expected:,} B "
                    f"({expected / direct_bytes:.1%}); Prometheus {shown:,.0f} B: off by "
                    f"{error:,.0f} B ({error / max(1, abs(expected)):.1%} of the saving)"
                )
                print(line)
                assert error <= tolerance * abs(expected), line
    finally:
        prometheus.close()
    print(f"{time.monotonic() - started:.0f} s")
