"""`zdict-sidecar proxy`: wiring the produce proxy from the settings, with the same dictionary
lifecycle as `run`.

Per namespace (a topic the clients produce to, by the name they use): an encoder with its
active dictionary, a reservoir sampling what was written (for training), and a trainer. The
proxies of a topic (one per producer pod) join one consumer group on its upstream topic
(`proxy.group_id`) without reading anything: as in `run`, the member holding partition 0
trains and publishes to the registry; every proxy follows the registry and switches encoders.
Topics named in `proxy.topics` are set up before the proxy listens; others when a client first
produces to them (they compress without a dictionary until one is active).

Exit codes: 0 after SIGTERM/SIGINT (requests under way answered, the producer flushed), 1 when
the proxy cannot start or its upstream producer fails fatally, 2 for configuration errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from typing import Final

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from sidecar.config import KafkaSettings, Settings
from sidecar.dictionaries.lifecycle import adopt_local, sync_store
from sidecar.dictionaries.registry import Registry
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import ConfigError, KafkaUnavailable, ZdictError
from sidecar.health import Health
from sidecar.kafka import (
    is_all_brokers_down,
    make_admin,
    make_consumer,
    make_producer,
    partition_counts,
    producer_config,
)
from sidecar.logs import get_logger
from sidecar.metrics import Metrics
from sidecar.namespaces import Namespaces, encoder_factory
from sidecar.observability import Observability
from sidecar.proxy.metadata import UpstreamTopics
from sidecar.proxy.produce import ProduceHandler, Route, Written
from sidecar.proxy.sequences import ProducerIds, Sequences
from sidecar.proxy.server import Dispatcher, ProxyServer
from sidecar.runtime import exit_code, interrupt_start
from sidecar.training.trainer import Trainer

log = get_logger("sidecar.proxy")

#: Seconds between two heartbeats of the event loop (/healthz).
BEAT_INTERVAL: Final = 1.0
#: Seconds the upstream producer may take to deliver what is queued when the proxy stops.
FLUSH_TIMEOUT: Final = 30.0
#: Seconds between two looks at the upstream producer's delivery reports while records are
#: under way, and while none is.
BUSY_POLL: Final = 0.001
IDLE_POLL: Final = 0.05


class Elector:
    """Who trains what: a consumer in the proxies' group, subscribed to the upstream topics,
    reading nothing (every partition is paused as it is assigned). The member holding a
    topic's partition 0 trains its namespace, as in `run`."""

    def __init__(
        self,
        settings: Settings,
        namespace_of: Callable[[str], str | None],
        on_assignment: Callable[[set[tuple[str, int]]], None],
    ) -> None:
        self._consumer: Consumer = make_consumer(settings, group_id=settings.proxy.group_id)
        self._namespace_of = namespace_of
        self._on_assignment = on_assignment
        self._held: set[tuple[str, int]] = set()
        self._wanted: list[str] = []
        self._subscribed: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="zdict-elector", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def subscribe(self, upstream_topics: Iterable[str]) -> None:
        """Join the group for these upstream topics (thread-safe; applied on the thread)."""
        with self._lock:
            self._wanted = sorted(set(upstream_topics))

    @property
    def held(self) -> set[tuple[str, int]]:
        """(namespace, partition) pairs this proxy holds now."""
        return set(self._held)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30.0)
        self._consumer.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                wanted = list(self._wanted)
            if wanted != self._subscribed and wanted:
                self._consumer.subscribe(
                    wanted, on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked
                )
                self._subscribed = wanted
            if self._subscribed:
                self._consumer.poll(0.5)  # serves the rebalance callbacks; returns nothing
            else:
                self._stop.wait(0.5)

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.assign(partitions)
        consumer.pause(partitions)  # nothing is ever fetched
        self._held |= self._pairs(partitions)
        self._on_assignment(set(self._held))

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._held -= self._pairs(partitions)
        self._on_assignment(set(self._held))

    def _pairs(self, partitions: list[TopicPartition]) -> set[tuple[str, int]]:
        pairs = set()
        for tp in partitions:
            namespace = self._namespace_of(tp.topic)
            if namespace is not None:
                pairs.add((namespace, tp.partition))
        return pairs


class ProxyRoutes:
    """Every namespace the proxy serves: its route (the per-topic core, `Namespaces`, and the
    upstream topic), and the trainer of them all."""

    def __init__(
        self,
        settings: Settings,
        store: DictionaryStore,
        registry: Registry | None,
        metrics: Metrics,
    ) -> None:
        self.settings = settings
        self.store = store
        self.registry = registry
        self.metrics = metrics
        self._training = settings.training.enabled and settings.proxy.compress
        self.namespaces = Namespaces(
            store,
            encoder_factory(settings.codec, compress=settings.proxy.compress),
            metrics,
            settings.sampling if self._training else None,
        )
        self._routes: dict[str, Route] = {}
        self._trainer: Trainer | None = None
        self._trained: set[str] = set()
        self._elector: Elector | None = None
        self._setup = threading.Lock()
        self._closed = False

    # -- routes (the event loop) ---------------------------------------------------------------

    def upstream_for(self, topic: str) -> str:
        return self.settings.proxy.upstream_for(topic)

    def namespace_of(self, upstream: str) -> str | None:
        for topic, route in list(self._routes.items()):
            if route.upstream == upstream:
                return topic
        return None

    def route(self, topic: str) -> Route:
        """The route of `topic`, set up on first use (its trainer in the background)."""
        route = self._routes.get(topic)
        if route is None:
            route = self._add(topic)
            threading.Thread(
                target=self._set_up_training, name="zdict-proxy-setup", daemon=True
            ).start()
        return route

    def _add(self, topic: str) -> Route:
        route = Route(self.namespaces.add(topic), self.upstream_for(topic))
        self._routes[topic] = route
        return route

    def tick(self) -> None:
        """Switch encoders whose active dictionary changed (see `Namespaces.refresh_if_due`)."""
        self.namespaces.refresh_if_due()

    # -- training (worker threads) -------------------------------------------------------------

    def set_up(self, topics: Iterable[str]) -> None:
        """Set up `topics` now (at start, before listening): routes, registry, trainer."""
        for topic in topics:
            if topic not in self._routes:
                self._add(topic)
        self._set_up_training()

    def _set_up_training(self) -> None:
        """Give the trainer every namespace: a new trainer when namespaces were added (the old
        one stopped first, so that one thread at a time reads the registry)."""
        with self._setup:
            topics = sorted(self._routes)
            if self._closed or set(topics) == self._trained:
                return
            if self._trainer is not None:
                self._trainer.stop()
            new = [t for t in topics if t not in self._trained]
            if self.registry is not None:
                for topic in new:
                    try:
                        adopt_local(self.registry, self.store, topic)
                    except ZdictError as exc:
                        log.warning("dictionary_not_adopted", namespace=topic, error=str(exc))
                sync_store(self.registry, self.store, new)
            self._trainer = Trainer(
                settings=self.settings,
                store=self.store,
                registry=self.registry,
                metrics=self.metrics,
                reservoirs=self.namespaces.reservoirs(),
                topics=topics,
                encoder_stats=self.namespaces.encoder_stats,
                dictionaries_changed=self.namespaces.request_refresh,
            )
            self._trained = set(topics)
            if self._elector is not None:
                self._trainer.on_assignment(self._elector.held)
            self._trainer.start()
            self.namespaces.request_refresh()
            if self._elector is not None:
                self._elector.subscribe(self._routes[t].upstream for t in topics)
            log.info("namespaces_set_up", namespaces=topics)

    def elect(self) -> None:
        """Join the proxies' group so that one proxy per topic trains it."""
        if not self._training:
            return
        self._elector = Elector(self.settings, self.namespace_of, self._assigned)
        self._elector.subscribe(r.upstream for r in self._routes.values())
        self._elector.start()

    def _assigned(self, held: set[tuple[str, int]]) -> None:
        self.metrics.set_assigned_partitions(len(held))
        trainer = self._trainer
        if trainer is not None:
            trainer.on_assignment(held)

    def close(self) -> None:
        with self._setup:
            self._closed = True
            if self._trainer is not None:
                self._trainer.stop()
        if self._elector is not None:
            self._elector.stop()


class _Upstream:
    """The upstream producer and what its callbacks report. Its delivery reports are served on
    the event loop (`deliver`): a second Python thread calling `poll` would wait for the GIL
    once per record while the loop works, which added tens of milliseconds to every answer."""

    def __init__(self, settings: Settings) -> None:
        self.fatal: str | None = None
        if "linger.ms" not in settings.producer.properties:
            linger = {"linger.ms": f"{settings.proxy.linger_ms:g}"}
            producer = KafkaSettings(properties={**settings.producer.properties, **linger})
            settings = settings.model_copy(update={"producer": producer})
        self.producer: Producer = make_producer(settings, self._error)
        limit = producer_config(settings).get("message.max.bytes", 1_000_000)
        self.max_record_bytes = int(limit)
        self.cluster_id: str | None = None
        self._busy: asyncio.Event | None = None

    def produced(self) -> None:
        """Records were handed to the producer: look at its delivery reports now (event loop)."""
        if self._busy is not None:
            self._busy.set()

    def _error(self, error: KafkaError) -> None:
        if error.fatal():
            self.fatal = f"fatal Kafka client error: {error.str()}"
        elif is_all_brokers_down(error):
            log.warning("upstream_unreachable", error=error.str())

    async def deliver(self, stopping: asyncio.Event) -> None:
        """Serve delivery reports until `stopping`: every millisecond while records are under
        way; otherwise as soon as records are produced, or every 50 ms."""
        poll = self.producer.poll
        self._busy = busy = asyncio.Event()
        while not stopping.is_set():
            poll(0)
            if len(self.producer):
                await asyncio.sleep(BUSY_POLL)
                continue
            busy.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(busy.wait(), IDLE_POLL)

    def topics(self, timeout: float) -> dict[str, int]:
        """Every upstream topic's partition count (the metadata cache's lister)."""
        try:
            metadata = self.producer.list_topics(timeout=timeout)
        except KafkaException as exc:
            raise KafkaUnavailable(f"upstream metadata: {exc.args[0]}") from None
        self.cluster_id = metadata.cluster_id
        return {
            name: len(topic.partitions)
            for name, topic in metadata.topics.items()
            if topic.error is None
        }

    async def drain(self, timeout: float) -> None:
        """Serve delivery reports until nothing is under way or `timeout` seconds passed (the
        answers still awaited get theirs)."""
        deadline = time.monotonic() + timeout
        while len(self.producer) and time.monotonic() < deadline:
            self.producer.poll(0)
            await asyncio.sleep(BUSY_POLL)

    def stop(self) -> int:
        """Deliver what is still queued; returns the records left undelivered."""
        remaining: int = self.producer.flush(FLUSH_TIMEOUT)
        return remaining


async def _serve(
    settings: Settings,
    routes: ProxyRoutes,
    upstream: _Upstream,
    health: Health,
    ready: Callable[[str, int], None] | None,
) -> int:
    topics = UpstreamTopics(upstream.topics, settings.proxy)
    await topics.refresh(None)
    handler = ProduceHandler(
        producer=upstream.producer,
        routes=routes,
        topics=topics,
        metrics=routes.metrics,
        sequences=Sequences[asyncio.Future[Written]](),
        max_batch_bytes=settings.proxy.max_request_bytes,
        max_record_bytes=upstream.max_record_bytes,
        produced=upstream.produced,
    )
    dispatcher = Dispatcher(
        produce=handler,
        topics=topics,
        producer_ids=ProducerIds(),
        upstream_for=routes.upstream_for,
        cluster_id=lambda: upstream.cluster_id,
    )
    server = ProxyServer(settings.proxy, dispatcher)
    host, port = await server.start()
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    health.set_encoder_ready(True)
    log.info(
        "proxy_listening",
        listen=f"{host}:{port}",
        upstream=settings.kafka.client_config()["bootstrap.servers"],
        upstream_topic=settings.proxy.upstream_topic,
        kafka=settings.kafka.redacted(),
        registry=settings.registry.topic if routes.registry else None,
        training=settings.training.enabled,
    )
    if ready is not None:
        ready(host, port)
    delivering = asyncio.create_task(upstream.deliver(stopping))
    code = 0
    while not stopping.is_set():
        health.beat()
        routes.tick()
        if upstream.fatal is not None:
            log.error("proxy_failed", error=upstream.fatal)
            code = 1
            break
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), BEAT_INTERVAL)
    health.set_stopping()
    log.info("shutting_down", batches=handler.batches, records=handler.records)
    stopping.set()
    await delivering
    stop_serving = asyncio.create_task(server.stop())
    await upstream.drain(FLUSH_TIMEOUT)
    await stop_serving
    return code


def run_proxy(settings: Settings, ready: Callable[[str, int], None] | None = None) -> int:
    """Run the proxy until SIGTERM/SIGINT (exit 0) or a failure (exit 1); `ready` is called
    with the address it listens on."""
    interrupt_start()
    with Observability(settings.metrics, settings.proxy.group_id) as observed, ExitStack() as stack:
        stack.callback(log.info, "proxy_stopped")
        return exit_code(
            lambda: _run(settings, observed, stack, ready),
            log,
            failed="proxy_failed",
            stopped="proxy_stopped",
        )


def _run(
    settings: Settings,
    observed: Observability,
    stack: ExitStack,
    ready: Callable[[str, int], None] | None,
) -> int:
    """The proxy's start and its serving (see `run_proxy`); what must be closed goes on
    `stack`."""
    bootstrap = settings.kafka.client_config()["bootstrap.servers"]
    # Reachable at all? ZDICT_PROXY__START_TIMEOUT bounds the wait.
    partition_counts(make_admin(settings), [], settings.proxy.start_timeout, bootstrap)
    upstream = _Upstream(settings)
    stack.callback(_flush, upstream)
    store = DictionaryStore(settings.dictionaries)
    registry: Registry | None = None
    if settings.registry.enabled:
        registry = Registry.open(settings, "proxy", observed.metrics)
        stack.callback(registry.close)
    routes = ProxyRoutes(settings, store, registry, observed.metrics)
    stack.callback(routes.close)
    routes.set_up(settings.proxy.topics)
    routes.elect()
    try:
        return asyncio.run(_serve(settings, routes, upstream, observed.health, ready))
    except OSError as exc:  # the listen address is taken or not ours
        raise ConfigError(
            f"cannot listen on {settings.proxy.listen} (ZDICT_PROXY__LISTEN, --listen): "
            f"{exc.strerror or exc}"
        ) from None


def _flush(upstream: _Upstream) -> None:
    """Deliver what the upstream producer still holds; log what could not be."""
    undelivered = upstream.stop()
    if undelivered:
        log.error("flush_incomplete", undelivered=undelivered)
