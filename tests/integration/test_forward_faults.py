"""The proxy while its upstream cluster goes away and comes back (a broker of the test's own):
the proxy closes the clients' connections it cannot serve and they retry, nothing is
acknowledged that was not written, nothing is lost after the cluster is back, and an
idempotent client's records are written once, in order."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import KafkaError, Message, Producer

from sidecar.codec import Decoder, StaticResolver

from .forward_proxies import allowed, start_proxy
from .launch import environment_for, start_sidecars
from .private_broker import StartPrivateBroker
from .topics import create_topic
from .upstream_records import decoded, event, read_all


def test_upstream_down_and_back(private_broker: StartPrivateBroker, tmp_path: Path) -> None:
    broker = private_broker("proxy-upstream")
    topic = create_topic(broker.admin(), 2, None, "zdict-it-fwd-faults")
    env = environment_for(broker.bootstrap, f"_zdict_dictionaries-{uuid.uuid4().hex}")
    starter = start_sidecars(env, tmp_path)
    start = next(starter)
    address, proxy = start_proxy(start, "forward-faults", "--no-training", env=allowed(topic))

    acknowledged: dict[str, set[bytes]] = {"idempotent": set(), "plain": set()}
    failed: dict[str, list[KafkaError]] = {"idempotent": [], "plain": []}
    sent: dict[str, list[bytes]] = {"idempotent": [], "plain": []}
    halfway = threading.Event()

    def client(name: str) -> None:
        producer = Producer(
            {
                "bootstrap.servers": address,
                "enable.idempotence": name == "idempotent",
                "acks": "all" if name == "idempotent" else "1",
                # Short, so that requests under way when upstream went are retried soon.
                "request.timeout.ms": 5000,
                "message.timeout.ms": 120_000,
                "linger.ms": 5,
            }
        )

        def report(err: KafkaError | None, msg: Message) -> None:
            value = msg.value()
            assert value is not None
            if err is None:
                acknowledged[name].add(value)
            else:
                failed[name].append(err)

        for i in range(3000):
            value = event(i, name)
            sent[name].append(value)
            producer.produce(topic, value=value, key=name.encode(), on_delivery=report)
            producer.poll(0)
            if i == 1000:
                halfway.set()
            time.sleep(0.004)  # ~250 records/s: the outage falls in the middle
        assert producer.flush(150) == 0

    threads = [threading.Thread(target=client, args=(name,)) for name in sent]
    for thread in threads:
        thread.start()
    assert halfway.wait(60)
    broker.stop()
    time.sleep(8)
    # Nothing was written meanwhile, so nothing may have been acknowledged meanwhile either.
    during = {name: len(values) for name, values in acknowledged.items()}
    time.sleep(4)
    assert {name: len(values) for name, values in acknowledged.items()} == during
    broker.start()
    for thread in threads:
        thread.join(240)
    assert failed == {"idempotent": [], "plain": []}
    assert proxy.events("upstream_unreachable"), "upstream was away for the proxy too"

    got = decoded(Decoder(StaticResolver()), read_all(broker.bootstrap, topic, 6000, 120))
    for name, values in sent.items():
        mine = sorted(
            (r for r in got if r["key"] == name.encode()),
            key=lambda r: (r["partition"], r["offset"]),
        )
        written = [r["value"] for r in mine]
        assert set(written) == set(values), f"{name}: nothing lost"
        assert acknowledged[name] <= set(written)
        if name == "idempotent":
            assert written == values, "the idempotent client's records once each, in order"
    proxy.terminate()
    assert proxy.wait() == 0, proxy.tail()
    next(starter, None)
