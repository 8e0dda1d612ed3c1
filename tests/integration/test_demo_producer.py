"""The compose stack's demo producer (deploy/demo/produce.py) against the real broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient

from .probe import KafkaProbe

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "demo" / "produce.py"


def _produce(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The script run to its end in `env`; it must exit 0."""
    result = subprocess.run(
        [sys.executable, str(SCRIPT)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result


def test_the_demo_producer_creates_its_topic_and_sends_the_events_it_is_asked_for(
    kafka_bootstrap: str, kafka_probe: KafkaProbe, kafka_admin: AdminClient
) -> None:
    topic = f"zdict-it-demo-{uuid.uuid4().hex}"
    env = dict(
        os.environ,
        KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap,
        DEMO_TOPIC=topic,
        DEMO_PARTITIONS="2",
        DEMO_COUNT="3000",
        DEMO_RATE="20000",
    )
    try:
        result = _produce(env)
        assert kafka_probe.partitions(topic) == [0, 1]
        assert kafka_probe.count(topic) == 3000
        assert "produced 3,000 events" in result.stderr
    finally:
        kafka_admin.delete_topics([topic])


def test_without_demo_topic_it_writes_the_first_topic_the_proxy_compresses(
    kafka_bootstrap: str, kafka_probe: KafkaProbe, kafka_admin: AdminClient
) -> None:
    """deploy/docker-compose.yml names its topic once, in the proxy's ZDICT_PROXY__TOPICS."""
    topic = f"zdict-it-demo-{uuid.uuid4().hex}"
    env = {k: v for k, v in os.environ.items() if k != "DEMO_TOPIC"}
    env.update(
        KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap,
        ZDICT_PROXY__TOPICS=json.dumps([topic, f"{topic}-other"]),
        DEMO_PARTITIONS="1",
        DEMO_COUNT="200",
        DEMO_RATE="20000",
    )
    try:
        _produce(env)
        assert kafka_probe.count(topic) == 200
    finally:
        kafka_admin.delete_topics([topic])
