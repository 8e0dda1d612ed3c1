"""`FollowingEncoder` without a broker: the registry's real rules over an in-memory log, and its
reads made to block, fail or come back on demand.

What is checked: the active dictionary is used from the first record when the registry answers
at start, an activation is picked up within the follow interval, `encoder()` never waits for the
registry, an unreachable registry means compressing without a dictionary (said in a log line)
until it answers, and threads encoding while encoders are swapped all write decodable records
(through the producers' serializer too, its metrics naming the dictionary taken up).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import zstandard
from confluent_kafka.serialization import MessageField, SerializationContext
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from sidecar.bench.events import generate
from sidecar.codec import NO_DICTIONARY, Decoder, Outcome, StaticResolver, header_dict_id
from sidecar.dictionaries.model import Dictionary
from sidecar.dictionaries.registry_state import Dictionaries, RegistryState
from sidecar.errors import RegistryUnavailable
from sidecar.serde import ZdictSerializer
from sidecar.serde.following import FAILURE_LOG_INTERVAL, FollowingEncoder
from sidecar.serde.metrics import ProducerMetrics
from tests.unit.log_registry import NAMESPACE, LogRegistry, dictionary

#: Fast enough for tests, slow enough not to spin.
INTERVAL = 0.05


@pytest.fixture(scope="module")
def dictionaries() -> tuple[Dictionary, Dictionary]:
    """Two dictionaries of NAMESPACE, trained on two kinds of events."""
    first = zstandard.train_dictionary(8192, list(generate("product_viewed", 3000, seed=1)))
    second = zstandard.train_dictionary(8192, list(generate("order", 3000, seed=1)))
    return dictionary(first.as_bytes(), 32768), dictionary(second.as_bytes(), 32769)


@pytest.fixture
def registry() -> LogRegistry:
    return LogRegistry()


@pytest.fixture
def follow(registry: LogRegistry) -> Iterator[Any]:
    """Factory: a FollowingEncoder over `registry`, closed after the test."""
    made: list[FollowingEncoder] = []

    def make(**options: Any) -> FollowingEncoder:
        options.setdefault("follow_interval", INTERVAL)
        encoder = FollowingEncoder(registry, **options)
        made.append(encoder)
        return encoder

    yield make
    for encoder in made:
        encoder.close()


def wait_for(predicate: Any, timeout: float, what: str) -> float:
    """Seconds until `predicate()` held; fails after `timeout`."""
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < timeout, f"timed out waiting for {what}"
        time.sleep(0.005)
    return time.monotonic() - started


def test_the_active_dictionary_is_used_from_the_first_record(
    registry: LogRegistry, follow: Any, dictionaries: tuple[Dictionary, Dictionary], events: Any
) -> None:
    first, _ = dictionaries
    registry.publish(first)
    encoders = follow(namespaces=[NAMESPACE], ready_timeout=5.0)
    value, headers = encoders.encoder(NAMESPACE).encode(events[0])
    assert header_dict_id(headers, "zd") == first.id
    assert Decoder(StaticResolver([first])).decode(value, headers) == events[0]
    assert encoders.dictionary(NAMESPACE) == first


def test_a_dictionary_whose_record_cannot_be_read_again_is_said_not_raised(
    registry: LogRegistry,
    follow: Any,
    dictionaries: tuple[Dictionary, Dictionary],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first, _ = dictionaries
    registry.publish(first)
    registry.refresh()
    registry.state.dictionaries = Dictionaries(registry._fetch, 0)  # a start keeps no bytes
    registry.state.dictionaries.index(first.meta, 0)

    def unreachable(offset: int, meta: Any) -> Any:
        raise RegistryUnavailable("registry topic _zdict_test: the record was not read (test)")

    monkeypatch.setattr(registry.fetcher, "fetch", unreachable)
    with capture_logs() as logs:
        encoders = follow(ready_timeout=5.0)
        encoder = encoders.encoder(NAMESPACE)
    assert encoder.dict_id == NO_DICTIONARY
    (line,) = [e for e in logs if e["event"] == "no_dictionary"]
    assert "the record was not read" in line["reason"]


def test_an_activation_is_picked_up_within_the_follow_interval_and_a_rollback_too(
    registry: LogRegistry, follow: Any, dictionaries: tuple[Dictionary, Dictionary]
) -> None:
    first, second = dictionaries
    registry.publish(first)
    encoders = follow(namespaces=[NAMESPACE], ready_timeout=5.0)
    before = encoders.encoder(NAMESPACE)
    with capture_logs() as logs:
        registry.publish(second)
        took = wait_for(lambda: encoders.dictionary(NAMESPACE) == second, 5.0, "the switch")
    assert took < 2.0  # the interval is 0.05 s: one read and one build, on a loaded machine
    switched = [e for e in logs if e["event"] == "dictionary_switched"]
    assert [(e["previous_dict_id"], e["dict_id"]) for e in switched] == [(first.id, second.id)]
    # An encoder handed out before the switch keeps compressing with its own dictionary.
    assert before.dict_id == first.id
    registry.rollback(NAMESPACE)
    wait_for(lambda: encoders.dictionary(NAMESPACE) == first, 5.0, "the rollback")


def test_encoder_never_waits_for_a_registry_read(
    registry: LogRegistry, follow: Any, dictionaries: tuple[Dictionary, Dictionary], events: Any
) -> None:
    registry.publish(dictionaries[0])
    encoders = follow(ready_timeout=5.0)
    registry.gate.clear()  # every read from now on hangs
    time.sleep(3 * INTERVAL)  # the follow thread is inside one
    started = time.monotonic()
    for event in events[:1000]:
        encoders.encoder("other-namespace").encode(event)
        encoders.encoder(NAMESPACE).encode(event)
    assert time.monotonic() - started < 1.0
    # The namespace the registry already knew got its dictionary on first use.
    assert encoders.dictionary(NAMESPACE) == dictionaries[0]
    registry.gate.set()


def test_a_registry_unreachable_at_start_means_no_dictionary_until_it_answers(
    registry: LogRegistry, follow: Any, dictionaries: tuple[Dictionary, Dictionary], events: Any
) -> None:
    first, _ = dictionaries
    registry.publish(first)  # in the log, but the log cannot be read by a new reader:
    registry.state = RegistryState()
    registry.down = True
    reads: list[bool] = []
    with capture_logs() as logs:
        started = time.monotonic()
        encoders = follow(namespaces=[NAMESPACE], ready_timeout=2.0, on_read=reads.append)
        assert time.monotonic() - started < 1.0  # the first read failed: no need to wait on
        encoder = encoders.encoder(NAMESPACE)
        assert encoder.dict_id == NO_DICTIONARY
        large = next(e for e in events if len(e) >= 160)
        small = min(events, key=len)
        assert encoder.encode_record(large).outcome == Outcome.COMPRESSED
        assert encoder.encode_record(small).outcome == Outcome.BELOW_THRESHOLD
        value, headers = encoder.encode(large)
        assert header_dict_id(headers, "zd") == NO_DICTIONARY
        assert Decoder().decode(value, headers) == large
        registry.down = False
        wait_for(lambda: encoders.dictionary(NAMESPACE) == first, 5.0, "the dictionary")
    names = [e["event"] for e in logs]
    assert names.count("registry_read_failed") == 1, names  # not one per failed read
    assert names.count("no_dictionary") == 1
    assert names.index("registry_read_recovered") < names.index("dictionary_switched")
    no_dictionary = next(e for e in logs if e["event"] == "no_dictionary")
    assert "cannot be read" in no_dictionary["reason"] and no_dictionary["namespace"] == NAMESPACE
    assert reads[0] is False and reads[-1] is True


def test_while_reads_keep_failing_one_line_a_minute_says_how_many(registry: LogRegistry) -> None:
    now = [0.0]
    registry.down = True
    encoders = FollowingEncoder(
        registry, follow_interval=INTERVAL, ready_timeout=1.0, clock=lambda: now[0]
    )
    try:
        with capture_logs() as logs:
            wait_for(lambda: registry.reads >= 5, 5.0, "failed reads")
            now[0] = FAILURE_LOG_INTERVAL + 1
            reads = registry.reads
            wait_for(lambda: registry.reads > reads + 1, 5.0, "one more read")
    finally:
        encoders.close()
    failed = [e for e in logs if e["event"] == "registry_read_failed"]
    assert len(failed) == 1 and failed[0]["repeated"] >= 3


def test_a_registry_topic_that_does_not_exist_yet_delays_nothing(
    registry: LogRegistry, follow: Any
) -> None:
    registry.missing = True
    registry.gate.clear()  # a read would wait for the topic
    started = time.monotonic()
    with capture_logs() as logs:
        encoders = follow(namespaces=[NAMESPACE], ready_timeout=5.0)
    assert time.monotonic() - started < 2.0
    assert encoders.dictionary(NAMESPACE) is None
    reason = next(e for e in logs if e["event"] == "no_dictionary")["reason"]
    assert "does not exist" in reason
    with capture_logs() as logs:
        registry.gate.set()
        wait_for(lambda: any(e["event"] == "registry_read_recovered" for e in logs), 5.0, "it")


def serialized(serializer: ZdictSerializer, value: bytes) -> tuple[bytes | None, Any]:
    """`value` as the in-process producers send it: (value, headers)."""
    headers: list[tuple[str, str | bytes | None]] = []
    out = serializer(value, SerializationContext(NAMESPACE, MessageField.VALUE, headers))
    return out, headers


def test_a_producing_thread_takes_up_an_activation_at_its_next_record(
    registry: LogRegistry, follow: Any, dictionaries: tuple[Dictionary, Dictionary], events: Any
) -> None:
    first, second = dictionaries
    registry.publish(first)
    encoders = follow(namespaces=[NAMESPACE], ready_timeout=5.0)
    collectors = CollectorRegistry()
    serializer = ZdictSerializer(encoders, metrics=ProducerMetrics(collectors))
    info = {"topic": NAMESPACE, "dict_id": str(first.id), "version": str(first.meta.version)}
    _, headers = serialized(serializer, events[0])
    assert header_dict_id(headers, "zd") == first.id
    assert collectors.get_sample_value("zdict_producer_dictionary_info", info) == 1.0
    registry.publish(second)
    wait_for(lambda: encoders.dictionary(NAMESPACE) == second, 5.0, "the switch")
    value, headers = serialized(serializer, events[1])
    assert header_dict_id(headers, "zd") == second.id
    assert Decoder(StaticResolver([second])).decode(value, headers) == events[1]
    info.update(dict_id=str(second.id), version=str(second.meta.version))
    assert collectors.get_sample_value("zdict_producer_dictionary_info", info) == 1.0
    counted = {"topic": NAMESPACE, "outcome": Outcome.COMPRESSED}
    assert collectors.get_sample_value("zdict_producer_records_total", counted) == 2.0


def test_threads_encoding_while_encoders_are_swapped_write_only_decodable_records(
    registry: LogRegistry, follow: Any, dictionaries: tuple[Dictionary, Dictionary]
) -> None:
    first, second = dictionaries
    registry.publish(first)
    encoders = follow(namespaces=[NAMESPACE], ready_timeout=5.0, follow_interval=0.001)
    values = list(generate("product_viewed", 2000, seed=9))
    written: list[list[tuple[bytes | None, Any]]] = [[] for _ in range(4)]
    stop = threading.Event()
    # Two threads ask for the encoder per record, two go through the producers' serializer
    # (its metrics tallied per thread). Each goes on (the same values again) until its records
    # used both dictionaries, for 10 s at most.
    serializer = ZdictSerializer(encoders, metrics=ProducerMetrics(CollectorRegistry()))

    def produce(out: list[tuple[bytes | None, Any]], through_serializer: bool) -> None:
        used: set[int | None] = set()
        deadline = time.monotonic() + 10.0
        while len(used) < 2 and time.monotonic() < deadline:
            for value in values:
                if through_serializer:
                    encoded = serialized(serializer, value)
                else:
                    encoded = encoders.encoder(NAMESPACE).encode(value)
                out.append(encoded)
                used.add(header_dict_id(encoded[1], "zd"))

    def swap() -> None:
        while not stop.is_set():
            registry.publish_activation(NAMESPACE, second.id, "activate")
            time.sleep(0.002)
            registry.rollback(NAMESPACE)
            time.sleep(0.002)

    registry.publish_dictionary(second, keep_id=True)
    swapper = threading.Thread(target=swap)
    swapper.start()
    threads = [
        threading.Thread(target=produce, args=(out, i % 2 == 1)) for i, out in enumerate(written)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stop.set()
    swapper.join()
    decoder = Decoder(StaticResolver([first, second]))
    for out in written:
        assert [decoder.decode(v, h) for v, h in out] == values * (len(out) // len(values))
        # The swaps happened while each thread encoded, and each took them up.
        assert {header_dict_id(h, "zd") for _, h in out} == {first.id, second.id}


def test_close_stops_following_and_closes_the_registry(registry: LogRegistry) -> None:
    encoders = FollowingEncoder(registry, follow_interval=INTERVAL, ready_timeout=1.0)
    encoders.close()
    reads = registry.reads
    time.sleep(5 * INTERVAL)
    assert registry.reads == reads and registry.closed
    encoders.close()  # idempotent


@pytest.mark.parametrize(
    "options",
    [{"follow_interval": 0}, {"read_timeout": -1}, {"ready_timeout": -0.5}],
)
def test_intervals_that_make_no_sense_are_refused(
    registry: LogRegistry, options: dict[str, Any]
) -> None:
    with pytest.raises(ValueError, match="must be > 0 s"):
        FollowingEncoder(registry, **options)
