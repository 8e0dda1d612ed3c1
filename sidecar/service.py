"""`zdict-sidecar run`: wiring one relay process (or N worker processes) from the settings.

The relay loop itself is in `sidecar.relay`; this module builds its parts — metrics endpoint,
Kafka clients, topic checks, the registry, encoders (or the decoder), reservoirs and the
trainer — handles signals, and maps failures to exit codes: 0 after a graceful stop, 1 when the
relay had to stop (the log line says why), 2 for configuration errors.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from types import FrameType
from typing import Any, Final

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client import CollectorRegistry

from sidecar.codec import Decoder, DictionaryResolver, Encoder
from sidecar.config import Settings
from sidecar.dictionaries.lifecycle import adopt_local, sync_store
from sidecar.dictionaries.registry import Registry, RegistryResolver
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import ConfigError, ZdictError
from sidecar.health import Health, ObservabilityServer
from sidecar.kafka import (
    LIBRDKAFKA_SOCKET_TIMEOUT_MS,
    backlog,
    delivery_timeout,
    ensure_output_topics,
    make_admin,
    make_consumer,
    make_producer,
    max_message_bytes,
    producer_config,
    reads_from_start,
)
from sidecar.logs import get_logger
from sidecar.metrics import Metrics
from sidecar.relay.exactly_once import TransactionalRelay
from sidecar.relay.loop import Relay
from sidecar.training.sampling import Reservoir
from sidecar.training.trainer import Trainer

log = get_logger("sidecar.service")

#: Seconds the start may spend reading a topic's offsets to size its backlog.
BACKLOG_TIMEOUT: Final = 10.0
#: `min_size` that makes every value pass through: the pass-through baseline runs the same path.
_NEVER: int = 2**62


def encoder_factory(settings: Settings) -> Callable[[DictionaryStore, str], Encoder]:
    """How the relay builds an encoder for a namespace from the current settings."""
    codec = settings.codec
    min_size = codec.min_size if settings.relay.compress else _NEVER

    def build(store: DictionaryStore, namespace: str) -> Encoder:
        return Encoder.from_store(
            store,
            namespace,
            level=codec.level,
            min_size=min_size,
            header_key=codec.header_key,
            frame=codec.frame,
            wire=codec.wire_format,
        )

    return build


def _commit_limit(settings: Settings) -> float:
    """Seconds a commit may stay unanswered: librdkafka's own request timeout, plus 30 s."""
    consumer = settings.kafka.client_config(settings.consumer)
    return int(consumer.get("socket.timeout.ms", LIBRDKAFKA_SOCKET_TIMEOUT_MS)) / 1000 + 30.0


class _ClientCallbacks:
    """librdkafka's callbacks, given to the clients before the relay they report to exists."""

    def __init__(self) -> None:
        self.relay: Relay | None = None

    def error(self, error: KafkaError) -> None:
        if self.relay is not None:
            self.relay.on_error(error)

    def stats(self, stats_json: str) -> None:
        if self.relay is not None:
            self.relay.on_stats(stats_json)

    def commit(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        if self.relay is not None:
            self.relay.on_commit(error, partitions)


@dataclass(frozen=True, slots=True)
class _Topics:
    """The relay's topics as found (or created) at start."""

    #: Input topic -> output topic.
    outputs: dict[str, str]
    #: Input topic -> dead-letter topic (only those with one).
    dead_letters: dict[str, str]
    #: Partitions per input, output and dead-letter topic.
    partitions: dict[str, int]
    #: `max.message.bytes` per output and dead-letter topic.
    limits: dict[str, int]


def _prepare_topics(settings: Settings, admin: AdminClient, decode: bool) -> _Topics:
    """Check (or create) the output and dead-letter topics and read their size limits."""
    relay = settings.relay
    bootstrap = settings.kafka.client_config()["bootstrap.servers"]
    outputs = {t: relay.output_for(t, decode=decode) for t in relay.input_topics}
    timeout = min(relay.unreachable_timeout, 30.0)
    partitions = ensure_output_topics(admin, outputs, relay.create_topics, timeout, bootstrap)
    dead_letters = {t: d for t in relay.input_topics if (d := relay.dead_letter_for(t)) is not None}
    if dead_letters:
        partitions |= ensure_output_topics(
            admin, dead_letters, relay.create_topics, timeout, bootstrap
        )
    limits = max_message_bytes(admin, sorted({*outputs.values(), *dead_letters.values()}), timeout)
    return _Topics(outputs, dead_letters, partitions, limits)


def _open_registry(
    settings: Settings, store: DictionaryStore, topics: list[str], decode: bool, metrics: Metrics
) -> Registry | None:
    """The dictionary registry, if enabled; an encoding relay's store synced with it first."""
    if not settings.registry.enabled:
        return None
    dictionaries = Registry.open(settings, "sidecar", metrics)
    if not decode:
        for topic in topics:
            adopt_local(dictionaries, store, topic)
        sync_store(dictionaries, store, topics)
    return dictionaries


def _reservoirs(settings: Settings) -> dict[str, Reservoir]:
    """Per input topic, the training sample's reservoir (none when nothing is trained)."""
    if not (settings.training.enabled and settings.relay.compress):
        return {}
    sampling = settings.sampling
    return {
        topic: Reservoir(
            topic,
            max_bytes=sampling.max_bytes,
            every=sampling.every,
            min_messages=sampling.min_messages,
            max_value_bytes=sampling.max_value_bytes,
        )
        for topic in settings.relay.input_topics
    }


@dataclass(frozen=True, slots=True)
class _Clients:
    """The relay's Kafka clients, and the topics they were checked against."""

    consumer: Consumer
    producer: Producer
    topics: _Topics
    #: The producer's transactional.id (None: at-least-once).
    transactional_id: str | None
    #: Bytes the producer accepts for one record (its message.max.bytes).
    producer_limit: int
    #: Seconds a produced record may wait for its acknowledgement (its message.timeout.ms).
    delivery_timeout: float


def _connect(settings: Settings, callbacks: _ClientCallbacks, decode: bool) -> _Clients:
    """The Kafka clients (a setting they refuse: a configuration error, exit 2), and the topics:
    outputs and dead letters checked or created, their size limits read."""
    relay = settings.relay
    admin = make_admin(settings)
    consumer = make_consumer(settings, callbacks.error, callbacks.stats, callbacks.commit)
    transactional_id = (
        relay.transactional_id_for(socket.gethostname())
        if relay.guarantee == "exactly-once"
        else None
    )
    gapless = transactional_id is None
    # Refused settings: exit 2, before any topic is touched.
    make_producer(settings, callbacks.error, transactional_id, gapless=gapless)
    found = _prepare_topics(settings, admin, decode)
    # A record batch must fit every topic it may go to: the broker refuses a whole batch of
    # small records that together exceed a topic's max.message.bytes.
    producer = make_producer(
        settings,
        callbacks.error,
        transactional_id,
        batch_bytes=min(found.limits.values()),
        stats_cb=callbacks.stats,
        gapless=gapless,
    )
    config = producer_config(settings, transactional_id=transactional_id)
    producer_limit = int(config.get("message.max.bytes", 1_000_000))
    return _Clients(
        consumer, producer, found, transactional_id, producer_limit, delivery_timeout(config)
    )


def _relay_arguments(
    settings: Settings, clients: _Clients, store: DictionaryStore, metrics: Metrics, health: Health
) -> dict[str, Any]:
    """What the relay takes in either direction: its clients, topics, store, metrics, tuning."""
    relay = settings.relay
    found = clients.topics
    return {
        "consumer": clients.consumer,
        "producer": clients.producer,
        "store": store,
        "outputs": found.outputs,
        "partitions": found.partitions,
        "metrics": metrics,
        "health": health,
        "batch_size": relay.batch_size,
        "poll_timeout": relay.poll_timeout,
        "commit_interval": relay.commit_interval,
        "unreachable_timeout": relay.unreachable_timeout,
        "commit_limit": _commit_limit(settings),
        "delivery_timeout": clients.delivery_timeout,
        "dead_letters": found.dead_letters,
        "max_record_bytes": {
            t: min(found.limits[t], clients.producer_limit) for t in found.outputs.values()
        },
    }


def _relay_class(settings: Settings) -> Callable[..., Relay]:
    """The at-least-once relay, or the transactional one (exactly-once)."""
    if settings.relay.guarantee == "exactly-once":
        return partial(TransactionalRelay, transaction_records=settings.relay.transaction_records)
    return Relay


def _decoding_relay(
    settings: Settings,
    store: DictionaryStore,
    dictionaries: Registry | None,
    arguments: dict[str, Any],
) -> Relay:
    """A relay that decodes with the registry's dictionaries (else the store's)."""
    resolver: DictionaryResolver = store
    if dictionaries is not None:
        resolver = RegistryResolver(dictionaries, settings.registry.follow_interval)
    decoder = Decoder(
        resolver,
        max_output_size=settings.codec.max_output_size,
        header_key=settings.codec.header_key,
    )
    return _relay_class(settings)(decoder=decoder, **arguments)


def _backlogs(settings: Settings, clients: _Clients, store: DictionaryStore) -> dict[str, int]:
    """Per input topic without a dictionary yet, the records waiting in it when they are enough
    to train a first dictionary on (the relay holds them back for it); empty when nothing trains
    or nothing would wait."""
    if not (settings.training.enabled and settings.relay.compress and settings.relay.backlog_wait):
        return {}
    from_start = reads_from_start(settings)
    found: dict[str, int] = {}
    for topic in settings.relay.input_topics:
        if store.active(topic) is not None:
            continue
        try:
            waiting = backlog(
                clients.consumer,
                topic,
                clients.topics.partitions[topic],
                BACKLOG_TIMEOUT,
                from_start=from_start,
            )
        except ZdictError as exc:
            log.warning("backlog_unknown", topic=topic, error=str(exc))
            continue
        if waiting >= settings.sampling.min_messages:
            found[topic] = waiting
    return found


def _encoding_relay(
    settings: Settings,
    store: DictionaryStore,
    dictionaries: Registry | None,
    arguments: dict[str, Any],
    backlogs: dict[str, int],
) -> tuple[Relay, Trainer]:
    """A relay that encodes, and the trainer beside it (not started yet) that keeps its
    dictionaries fresh, sharing its store and metrics. Topics with a `backlog` are held back
    until their first dictionary, trained from the backlog, is active."""
    reservoirs = _reservoirs(settings)
    relay = _relay_class(settings)(
        encoder_factory=encoder_factory(settings),
        reservoirs=reservoirs,
        hold={topic: settings.relay.backlog_wait for topic in backlogs},
        **arguments,
    )
    trainer = Trainer(
        settings=settings,
        store=store,
        registry=dictionaries,
        metrics=relay.metrics,
        reservoirs=reservoirs,
        topics=list(settings.relay.input_topics),
        encoder_stats=relay.encoder_stats,
        dictionaries_changed=relay.request_refresh,
        backlogs=backlogs,
    )
    relay.on_assignment = trainer.on_assignment
    return relay, trainer


def run_relay(settings: Settings) -> int:
    """Run one relay process until SIGTERM/SIGINT (exit 0) or a failure (exit 1).

    1. the metrics endpoint, so a relay that cannot start is seen failing;
    2. the Kafka clients (a setting they refuse: a configuration error, exit 2);
    3. the topics: outputs and dead letters checked or created, their size limits read;
    4. the store, synced with the registry;
    5. the relay (encoding with a trainer beside it, or decoding), then its loop.
    """
    relay_settings = settings.relay
    if not relay_settings.input_topics:
        raise ConfigError(
            "no input topic: give --input-topic TOPIC (repeatable) or ZDICT_RELAY__INPUT_TOPICS"
        )
    decode = relay_settings.mode == "decode"
    registry = CollectorRegistry()
    metrics = Metrics(registry, group=relay_settings.group_id)
    health = Health()
    server = ObservabilityServer(registry, health)
    server.start_if_enabled(settings.metrics)
    dictionaries: Registry | None = None
    trainer: Trainer | None = None
    try:
        callbacks = _ClientCallbacks()
        clients = _connect(settings, callbacks, decode)
        store = DictionaryStore(settings.dictionaries)
        dictionaries = _open_registry(
            settings, store, list(relay_settings.input_topics), decode, metrics
        )
        arguments = _relay_arguments(settings, clients, store, metrics, health)
        if decode:
            relay = _decoding_relay(settings, store, dictionaries, arguments)
        else:
            backlogs = _backlogs(settings, clients, store)
            relay, trainer = _encoding_relay(settings, store, dictionaries, arguments, backlogs)
        callbacks.relay = relay
        if trainer is not None:
            trainer.start()
        _stop_on_signals(relay)
        log.info(
            "relay_configured",
            mode=relay_settings.mode,
            guarantee=relay_settings.guarantee,
            dead_letters=clients.topics.dead_letters or None,
            transactional_id=clients.transactional_id,
            outputs=clients.topics.outputs,
            kafka=settings.kafka.redacted(),
            bootstrap=settings.kafka.client_config()["bootstrap.servers"],
            registry=settings.registry.topic if dictionaries else None,
            training=bool(trainer and settings.training.enabled),
        )
        relay.run()
        return 0
    except ZdictError as exc:
        if isinstance(exc, ConfigError):
            raise
        log.error("relay_failed", error=str(exc))
        return 1
    finally:
        if trainer is not None:
            trainer.stop()
        if dictionaries is not None:
            dictionaries.close()
        server.stop()


def _stop_on_signals(relay: Relay) -> None:
    """SIGTERM/SIGINT stop the relay gracefully; SIGUSR2 stalls it if the test hook is set."""

    def stop(signum: int, frame: FrameType | None) -> None:
        log.info("signal_received", signal=signal.Signals(signum).name)
        relay.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    install_stall_hook()


#: Fault-injection hook for tests: with this variable set to N, SIGUSR2 blocks the relay loop
#: for N seconds while librdkafka's own threads go on (heartbeats included) - a stall such as a
#: long GC pause, which exceeds max.poll.interval.ms without the session timing out.
STALL_HOOK_ENV = "ZDICT_TEST_STALL_ON_SIGUSR2"


def install_stall_hook() -> None:
    seconds = os.environ.get(STALL_HOOK_ENV)
    if not seconds:
        return

    def stall(signum: int, frame: FrameType | None) -> None:
        log.warning("stalling_on_purpose", seconds=float(seconds), hook=STALL_HOOK_ENV)
        time.sleep(float(seconds))

    signal.signal(signal.SIGUSR2, stall)


def run_workers(argv: Sequence[str], workers: int, metrics_port: int) -> int:
    """Run `workers` relay processes in one consumer group; forward signals; worst exit wins.

    Each worker is this program again with `--workers 1`; with a fixed metrics port, worker i
    listens on port + i.
    """
    base = [sys.executable, "-m", "sidecar", *argv, "--workers", "1"]
    procs: list[subprocess.Popen[bytes]] = []
    for i in range(workers):
        env = dict(os.environ)
        if metrics_port:
            env["ZDICT_METRICS__PORT"] = str(metrics_port + i)
        # Each worker its own transactional.id, the same after a restart (exactly-once mode).
        env["ZDICT_RELAY__WORKER_INDEX"] = str(i)
        procs.append(subprocess.Popen(base, env=env))
    log.info("workers_started", workers=workers, pids=[p.pid for p in procs])

    def forward(signum: int, frame: FrameType | None) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    codes: list[int] = []
    while procs:
        for proc in list(procs):
            code = proc.poll()
            if code is not None:
                procs.remove(proc)
                codes.append(code)
                if code != 0:
                    log.error("worker_exited", pid=proc.pid, code=code)
        time.sleep(0.2)
    return max(codes, key=lambda c: (c != 0, abs(c)), default=0)
