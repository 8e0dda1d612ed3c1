"""`zdict-sidecar run`: wiring one relay process (or N worker processes) from the settings.

The loop itself is `sidecar.relay.loop`; this module builds its parts — metrics endpoint, the
relay's shared state and the Kafka clients that report into it, topic checks, the registry, the
per-topic namespaces (or the decoder), the commit strategy and the trainer — handles signals,
and maps failures to exit codes: 0 after a graceful stop, 1 when the relay had to stop (the log
line says why), 2 for configuration errors.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from types import FrameType
from typing import Final

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from sidecar.codec import Decoder, DictionaryResolver
from sidecar.config import Settings
from sidecar.dictionaries.lifecycle import adopt_local, sync_store
from sidecar.dictionaries.registry import Registry, RegistryResolver
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import ConfigError, StoreError, ZdictError
from sidecar.kafka import (
    LIBRDKAFKA_SOCKET_TIMEOUT_MS,
    Reachability,
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
from sidecar.kafka.batch_fill import (
    LEVEL_PROPERTY,
    batch_codec,
    batch_level,
    batch_records,
    configured_level,
    with_batch_level,
)
from sidecar.logs import get_logger
from sidecar.metrics import Metrics
from sidecar.namespaces import Namespaces, encoder_factory
from sidecar.observability import Observability
from sidecar.relay.commits import CommitLedger, CommitStrategy, OffsetCommits
from sidecar.relay.events import ClientEvents
from sidecar.relay.exactly_once import Transactions
from sidecar.relay.loop import Relay
from sidecar.relay.output_modes import RelayOutputModes
from sidecar.relay.producer_level import MakeProducer, ProducerLevel
from sidecar.relay.state import RelayState
from sidecar.relay.stored import RelayStored
from sidecar.runtime import exit_code, interrupt_start
from sidecar.stored_estimate import batch_compressor
from sidecar.training.trainer import Trainer

log = get_logger("sidecar.relay.service")

#: Seconds the start may spend reading a topic's offsets to size its backlog.
BACKLOG_TIMEOUT: Final = 10.0
#: Seconds the start waits at most for a broker to answer (`relay.unreachable_timeout` if less).
START_TIMEOUT: Final = 30.0


def _commit_limit(settings: Settings) -> float:
    """Seconds a commit may stay unanswered: librdkafka's own request timeout, plus 30 s."""
    consumer = settings.kafka.client_config(settings.consumer)
    return int(consumer.get("socket.timeout.ms", LIBRDKAFKA_SOCKET_TIMEOUT_MS)) / 1000 + 30.0


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


def _outputs(settings: Settings) -> dict[str, str]:
    """Input topic -> output topic."""
    relay = settings.relay
    return {t: relay.output_for(t, decode=relay.mode == "decode") for t in relay.input_topics}


def _prepare_topics(settings: Settings, admin: AdminClient) -> _Topics:
    """Check (or create) the output and dead-letter topics and read their size limits."""
    relay = settings.relay
    bootstrap = settings.kafka.client_config()["bootstrap.servers"]
    outputs = _outputs(settings)
    timeout = min(relay.unreachable_timeout, START_TIMEOUT)
    setting = f"ZDICT_RELAY__UNREACHABLE_TIMEOUT, at most {START_TIMEOUT:.0f} s at the start"
    partitions = ensure_output_topics(
        admin, outputs, relay.create_topics, timeout, bootstrap, setting
    )
    dead_letters = {t: d for t in relay.input_topics if (d := relay.dead_letter_for(t)) is not None}
    if dead_letters:
        partitions |= ensure_output_topics(
            admin, dead_letters, relay.create_topics, timeout, bootstrap, setting
        )
    limits = max_message_bytes(admin, sorted({*outputs.values(), *dead_letters.values()}), timeout)
    return _Topics(outputs, dead_letters, partitions, limits)


def _batch_level(settings: Settings, store: DictionaryStore) -> int | None:
    """The zstd level of the producer's batches: the lowest chosen at training by the active
    dictionaries of the input topics (`kafka.batch_fill.batch_level`), as the relay starts;
    logged with the level it sets. A dictionary activated later with another level replaces
    the producer (`relay.producer_level`)."""
    level = batch_level(
        d.meta.batch_level
        for d in (store.active(topic) for topic in settings.relay.input_topics)
        if d is not None
    )
    config = with_batch_level(producer_config(settings), level)
    # not "level": in a log line that is the log level
    log.info(
        "batch_level",
        chosen_level=level,
        codec=batch_codec(config),
        zstd_level=configured_level(config),
        set_by_user=LEVEL_PROPERTY in settings.kafka.client_config(settings.producer),
    )
    return level


def _checked_store(settings: Settings, decode: bool) -> DictionaryStore:
    """The dictionary store, checked before anything connects: an encoding relay loads each
    input topic's active dictionary, and writes to the store when it follows the registry or
    trains (a store mounted read-only serves one that does neither).

    Raises:
        StoreError: it is not writable, or an active dictionary does not load; the message names
            the store's setting.
    """
    store = DictionaryStore(settings.dictionaries)
    if decode:
        return store  # read only, and only for the ids records name
    try:
        if settings.registry.enabled or settings.training.enabled:
            store.ensure_writable()
        for topic in settings.relay.input_topics:
            store.active(topic)
    except StoreError as exc:
        raise StoreError(f"{exc} (the store: ZDICT_DICTIONARIES or --dictionaries)") from None
    return store


def _open_registry(
    settings: Settings, store: DictionaryStore, topics: list[str], decode: bool, metrics: Metrics
) -> Registry | None:
    """The dictionary registry, if enabled; an encoding relay's store synced with it first."""
    if not settings.registry.enabled:
        return None
    registry = Registry.open(settings, "sidecar", metrics)
    if not decode:
        for topic in topics:
            adopt_local(registry, store, topic)
        sync_store(registry, store, topics)
    return registry


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
    #: Makes the producer again, for another zstd level chosen at training.
    remake: MakeProducer


def _connect(settings: Settings, events: ClientEvents, level: int | None = None) -> _Clients:
    """The Kafka clients, reporting to `events` (a setting they refuse: a configuration error,
    exit 2), and the topics: outputs and dead letters checked or created, their size limits
    read. `level`: the zstd level of the producer's batches chosen at training (None: its
    default)."""
    relay = settings.relay
    admin = make_admin(settings)
    consumer = make_consumer(settings, events.on_error, events.on_stats, events.on_commit)
    transactional_id = (
        relay.transactional_id_for(socket.gethostname())
        if relay.guarantee == "exactly-once"
        else None
    )
    gapless = transactional_id is None
    # Refused settings: exit 2, before any topic is touched.
    make_producer(settings, events.on_error, transactional_id, gapless=gapless)
    found = _prepare_topics(settings, admin)

    # A record batch must fit every topic it may go to: the broker refuses a whole batch of
    # small records that together exceed a topic's max.message.bytes.
    def remake(batch_level: int | None) -> Producer:
        return make_producer(
            settings,
            events.on_error,
            transactional_id,
            batch_bytes=min(found.limits.values()),
            stats_cb=events.on_stats,
            gapless=gapless,
            batch_level=batch_level,
        )

    config = with_batch_level(producer_config(settings, transactional_id=transactional_id), level)
    producer_limit = int(config.get("message.max.bytes", 1_000_000))
    return _Clients(
        consumer,
        remake(level),
        found,
        transactional_id,
        producer_limit,
        delivery_timeout(config),
        remake,
    )


def _commits(
    settings: Settings, clients: _Clients, state: RelayState, ledger: CommitLedger
) -> CommitStrategy:
    """Offsets committed through the group (at-least-once), or transactions (exactly-once)."""
    if settings.relay.guarantee == "exactly-once":
        return Transactions(
            clients.consumer,
            clients.producer,
            state,
            transaction_records=settings.relay.transaction_records,
        )
    return OffsetCommits(clients.consumer, state, ledger, commit_limit=_commit_limit(settings))


def _relay(
    settings: Settings,
    clients: _Clients,
    state: RelayState,
    commits: CommitStrategy,
    *,
    namespaces: Namespaces | None = None,
    decoder: Decoder | None = None,
    hold: dict[str, float] | None = None,
    on_assignment: Callable[[set[tuple[str, int]]], None] | None = None,
    producer_level: ProducerLevel | None = None,
) -> Relay:
    """The relay, encoding with `namespaces` or decoding with `decoder`, on its clients and
    topics, tuned by the settings."""
    relay = settings.relay
    found = clients.topics
    return Relay(
        consumer=clients.consumer,
        producer=clients.producer,
        state=state,
        commits=commits,
        outputs=found.outputs,
        partitions=found.partitions,
        namespaces=namespaces,
        decoder=decoder,
        dead_letters=found.dead_letters,
        max_record_bytes={
            t: min(found.limits[t], clients.producer_limit) for t in found.outputs.values()
        },
        hold=hold,
        batch_size=relay.batch_size,
        poll_timeout=relay.poll_timeout,
        commit_interval=relay.commit_interval,
        delivery_timeout=clients.delivery_timeout,
        on_assignment=on_assignment,
        producer_level=producer_level,
    )


def _decoder(settings: Settings, store: DictionaryStore, registry: Registry | None) -> Decoder:
    """A decoder resolving ids in the registry (else in the store)."""
    resolver: DictionaryResolver = store
    if registry is not None:
        resolver = RegistryResolver(registry, settings.registry.follow_interval)
    return Decoder(
        resolver,
        max_output_size=settings.codec.max_output_size,
        header_key=settings.codec.header_key,
    )


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
    registry: Registry | None,
    clients: _Clients,
    state: RelayState,
    commits: CommitStrategy,
    level: int | None,
) -> tuple[Relay, Trainer]:
    """A relay that encodes, and the trainer beside it (not started yet) that keeps its
    dictionaries fresh, sharing its store, namespaces and metrics. Topics with a backlog are
    held back until their first dictionary, trained from the backlog, is active."""
    relay_settings = settings.relay
    training = settings.training.enabled and relay_settings.compress
    namespaces = Namespaces(
        store,
        encoder_factory(settings.codec, compress=relay_settings.compress),
        state.metrics,
        settings.sampling if training else None,
        compress=relay_settings.compress,
    )
    for topic in relay_settings.input_topics:
        namespaces.add(topic)
    backlogs = _backlogs(settings, clients, store)
    trainer = Trainer(
        settings=settings,
        store=store,
        registry=registry,
        metrics=state.metrics,
        reservoirs=namespaces.reservoirs(),
        topics=list(relay_settings.input_topics),
        encoder_stats=namespaces.encoder_stats,
        dictionaries_changed=namespaces.request_refresh,
        backlogs=backlogs,
    )
    relay = _relay(
        settings,
        clients,
        state,
        commits,
        namespaces=namespaces,
        hold={topic: relay_settings.backlog_wait for topic in backlogs},
        on_assignment=trainer.on_assignment,
        producer_level=ProducerLevel(producer_config(settings), level, clients.remake),
    )
    return relay, trainer


def run_relay(settings: Settings) -> int:
    """Run one relay process until SIGTERM/SIGINT (exit 0) or a failure (exit 1).

    1. the metrics endpoint, so a relay that cannot start is seen failing;
    2. the store: each input topic's active dictionary loads, writable if it will be written
       (before any broker is waited for);
    3. the Kafka clients (a setting they refuse: a configuration error, exit 2);
    4. the topics: outputs and dead letters checked or created, their size limits read;
       then the store is synced with the registry;
    5. the relay (encoding with a trainer beside it, or decoding), then its loop.
    """
    relay_settings = settings.relay
    if not relay_settings.input_topics:
        raise ConfigError(
            "no input topic: give --input-topic TOPIC (repeatable) or ZDICT_RELAY__INPUT_TOPICS"
        )
    interrupt_start()
    with Observability(settings.metrics, relay_settings.group_id) as observed, ExitStack() as stack:
        return exit_code(
            lambda: _run(settings, observed, stack),
            log,
            failed="relay_failed",
            stopped="relay_stopped",
        )


def _run(settings: Settings, observed: Observability, stack: ExitStack) -> int:
    """The relay's start and loop (see `run_relay`); what must be closed goes on `stack`."""
    relay_settings = settings.relay
    metrics = observed.metrics
    decode = relay_settings.mode == "decode"
    store = _checked_store(settings, decode)
    level = None if decode else _batch_level(settings, store)
    producing = with_batch_level(producer_config(settings), level)
    modes = RelayOutputModes(
        metrics,
        enabled=settings.codec.output_mode == "auto",
        codec=batch_codec(producing),
        batch_records=batch_records(producing),
        level=configured_level(producing),
    )
    if not decode:
        for topic in relay_settings.input_topics:
            metrics.set_batch_level(topic, configured_level(producing))
    state = RelayState(
        metrics,
        observed.health,
        Reachability(relay_settings.unreachable_timeout),
        output_modes=modes,
        stored=None
        if decode
        else RelayStored(
            metrics.stored,
            _outputs(settings),
            batch_compressor(
                relay_settings.input_compression, relay_settings.input_compression_level
            ),
        ),
    )
    ledger = CommitLedger(state)
    clients = _connect(settings, ClientEvents(state, ledger.answered), level)
    commits = _commits(settings, clients, state, ledger)
    with observed.health.starting():  # a long registry read is a start, not a hung loop
        registry = _open_registry(
            settings, store, list(relay_settings.input_topics), decode, metrics
        )
    if registry is not None:
        stack.callback(registry.close)
    trainer: Trainer | None = None
    if decode:
        relay = _relay(
            settings, clients, state, commits, decoder=_decoder(settings, store, registry)
        )
    else:
        relay, trainer = _encoding_relay(settings, store, registry, clients, state, commits, level)
    _stop_on_signals(relay)
    if trainer is not None:
        trainer.start()
        stack.callback(trainer.stop)
    log.info(
        "relay_configured",
        mode=relay_settings.mode,
        guarantee=relay_settings.guarantee,
        dead_letters=clients.topics.dead_letters or None,
        transactional_id=clients.transactional_id,
        outputs=clients.topics.outputs,
        kafka=settings.kafka.redacted(),
        bootstrap=settings.kafka.client_config()["bootstrap.servers"],
        registry=settings.registry.topic if registry else None,
        training=bool(trainer and settings.training.enabled),
    )
    relay.run()
    return 0


def _stop_on_signals(relay: Relay) -> None:
    """SIGTERM/SIGINT stop the relay gracefully; SIGUSR2 stalls it if the test hook is set."""

    def stop(signum: int, frame: FrameType | None) -> None:
        log.info("signal_received", signal=signal.Signals(signum).name)
        relay.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    install_stall_hook(relay)


#: Fault-injection hook for tests: with this variable set to N, SIGUSR2 blocks the relay loop
#: for N seconds between two polls while librdkafka's own threads go on (heartbeats included) -
#: a stall such as a long GC pause, which exceeds max.poll.interval.ms without the session
#: timing out. (Sleeping in the handler itself would sleep inside a poll whenever the signal
#: lands there, which librdkafka counts as polling.)
STALL_HOOK_ENV = "ZDICT_TEST_STALL_ON_SIGUSR2"


def install_stall_hook(relay: Relay) -> None:
    seconds = os.environ.get(STALL_HOOK_ENV)
    if not seconds:
        return

    def stall(signum: int, frame: FrameType | None) -> None:
        log.warning("stalling_on_purpose", seconds=float(seconds), hook=STALL_HOOK_ENV)
        relay.state.control.stall(float(seconds))

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
