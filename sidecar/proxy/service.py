"""`zdict-sidecar proxy`: wiring the produce proxy from the settings, with the same dictionary
lifecycle as `run`.

Per namespace (a topic the clients produce to, by the name they use): an encoder with its
active dictionary, a reservoir sampling what was written (for training), and a trainer, as the
forwarding proxy has them (`sidecar.proxy.forward.routes`). Topics named in `proxy.topics` are
set up before the proxy listens; others when a client first produces to them.

Exit codes: 0 after SIGTERM/SIGINT (requests under way answered, the producer flushed), 1 when
the proxy cannot start or its upstream producer fails fatally, 2 for configuration errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Final

from confluent_kafka import KafkaError, KafkaException, Producer

from sidecar.config import KafkaSettings, Settings
from sidecar.dictionaries.registry import Registry
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import ConfigError, KafkaUnavailable
from sidecar.health import Health
from sidecar.kafka import (
    is_all_brokers_down,
    make_admin,
    make_producer,
    partition_counts,
    producer_config,
)
from sidecar.logs import get_logger
from sidecar.observability import Observability
from sidecar.proxy.forward.routes import ProxyRoutes
from sidecar.proxy.metadata import UpstreamTopics
from sidecar.proxy.produce import ProduceHandler, Written
from sidecar.proxy.sequences import ProducerIds, Sequences
from sidecar.proxy.server import Dispatcher, ProxyServer
from sidecar.runtime import exit_code, interrupt_start

log = get_logger("sidecar.proxy")

#: Seconds between two heartbeats of the event loop (/healthz).
BEAT_INTERVAL: Final = 1.0
#: Seconds the upstream producer may take to deliver what is queued when the proxy stops.
FLUSH_TIMEOUT: Final = 30.0
#: Seconds between two looks at the upstream producer's delivery reports while records are
#: under way, and while none is.
BUSY_POLL: Final = 0.001
IDLE_POLL: Final = 0.05


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
