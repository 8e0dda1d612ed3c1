"""The compose stack's demo producer (deploy/demo/produce.py) against the real broker."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient

from .probe import KafkaProbe

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "demo" / "produce.py"


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
        result = subprocess.run(
            [sys.executable, str(SCRIPT)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert kafka_probe.partitions(topic) == [0, 1]
        assert kafka_probe.count(topic) == 3000
        assert "produced 3,000 events" in result.stderr
    finally:
        kafka_admin.delete_topics([topic])
