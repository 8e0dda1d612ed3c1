"""The demo producer of deploy/docker-compose.yml: generated events into a topic at a steady rate.

Runs inside the zdict-sidecar image (it uses the package's generator and confluent-kafka):
creates the topic if it is missing, then produces `zdict-sidecar generate` events, keyed,
until stopped (SIGTERM) or until DEMO_COUNT events were sent.

Environment:
    KAFKA_BOOTSTRAP_SERVERS  the broker (default kafka:9092, the compose service)
    DEMO_PRODUCE_TO          where the events are produced, if not the broker: the proxy
                             (`zdict-sidecar proxy`) on localhost; the topic is still created
                             on the broker
    DEMO_TOPIC               topic to produce to (default: the first of ZDICT_PROXY__TOPICS,
                             the proxy's, so that the compose file names it once; else events)
    DEMO_PARTITIONS          partitions when it creates the topic (default 3)
    DEMO_RATE                events per second (default 2000)
    DEMO_KIND                product_viewed, customer or access_log (default product_viewed)
    DEMO_COUNT               stop after this many events (default 0: never)
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from types import FrameType

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # public, but not in __all__
    AdminClient,
    NewTopic,
)

from sidecar.bench.events import generate

#: Events per produce/poll round: the rate is kept per round, not per event.
BATCH = 200


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create `topic` unless it exists; waits up to 60 s for the broker to answer."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=60).topics:
        return
    future = admin.create_topics([NewTopic(topic, num_partitions=partitions)])[topic]
    try:
        future.result(timeout=60)
    except KafkaException as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise


def demo_topic() -> str:
    """DEMO_TOPIC, else the first topic of the proxy's ZDICT_PROXY__TOPICS (a JSON list), else
    `events`."""
    proxy_topics = json.loads(os.environ.get("ZDICT_PROXY__TOPICS") or "[]")
    return os.environ.get("DEMO_TOPIC") or next(iter(proxy_topics), "events")


def main() -> int:
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "kafka:9092")
    topic = demo_topic()
    rate = float(os.environ.get("DEMO_RATE", "2000"))
    count = int(os.environ.get("DEMO_COUNT", "0"))
    ensure_topic(bootstrap, topic, int(os.environ.get("DEMO_PARTITIONS", "3")))

    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    produce_to = os.environ.get("DEMO_PRODUCE_TO") or bootstrap
    producer = Producer({"bootstrap.servers": produce_to, "linger.ms": 5})
    events = generate(os.environ.get("DEMO_KIND", "product_viewed"), count or 10**12, seed=42)
    sent = 0
    started = time.monotonic()
    print(f"producing to {topic} at {rate:,.0f} events/s", file=sys.stderr, flush=True)
    for value in events:
        if stopping:
            break
        # Keyed like real traffic: a slice of the event id spreads records over the partitions.
        producer.produce(topic, value, key=value[16:24])
        sent += 1
        if sent % BATCH == 0:
            producer.poll(0)
            ahead = sent / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
    producer.flush(30)
    print(f"produced {sent:,} events", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
