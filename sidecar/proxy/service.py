"""`zdict-sidecar proxy`: the proxy wired from the settings.

Every request is forwarded to the upstream broker the client addressed, broker addresses are
rewritten to the proxy's listeners, Produce requests are rewritten in place (`produce`):
values encoded with the namespace's dictionary, and Fetch responses decoded for the clients
(`_fetch_decoding`: a decoder that follows the registry as the relay's does, the local store
without a registry), internal topics and the registry topic left out of listings. The
dictionary lifecycle (`routes.ProxyRoutes`): per topic a namespace (encoder, training sample,
metrics), the proxies of a topic in one consumer group (`proxy.group_id`) so that one trains
it, the registry followed and encoders switched as dictionaries are activated; one registry
reader serves the trainer and the Fetch decoder. Topics: those of `proxy.topics` are set up at
start; the allow-list (`proxy.allowed_topics`, by default `proxy.topics`) says what clients may
produce to, and an allowed topic is set up on first use; records go to the topic the client
names. Upstream is reached as `ZDICT_KAFKA__SECURITY_PROTOCOL` says (`security`: TLS, the
proxy's own SASL), checked at start with one connection of the proxy's own
(`upstream.check_upstream`). Readiness: once the bootstrap listener is up.

Exit codes: 0 after SIGTERM/SIGINT, 1 when upstream cannot be reached at start or refuses the
proxy's credentials, 2 for configuration errors (among them a listen address that is taken, or
a security setting the proxy cannot honour).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import signal
from collections.abc import Callable
from contextlib import ExitStack
from typing import Final

import uvloop
from prometheus_client import CollectorRegistry

from sidecar.codec import Decoder, DictionaryResolver
from sidecar.config import Settings
from sidecar.dictionaries.registry import Registry, RegistryResolver
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import ConfigError
from sidecar.health import Health
from sidecar.logs import get_logger
from sidecar.observability import Observability
from sidecar.proxy.addresses import Address
from sidecar.proxy.allowlist import TopicAllowList
from sidecar.proxy.batches import BatchLimits, BatchRewriter
from sidecar.proxy.fetch import FetchDecoding, RecentMisses
from sidecar.proxy.fetch_metrics import FetchMetrics
from sidecar.proxy.filters import proxy_filters
from sidecar.proxy.known_topics import learn_topics
from sidecar.proxy.listeners import Listeners
from sidecar.proxy.lookups import ThrottledLookups
from sidecar.proxy.metrics import ForwardMetrics
from sidecar.proxy.produce import ProduceRewriter
from sidecar.proxy.routes import ProxyRoutes
from sidecar.proxy.security import UpstreamSecurity, upstream_security
from sidecar.proxy.topics import TopicView
from sidecar.proxy.upstream import check_upstream
from sidecar.runtime import exit_code, interrupt_start

log = get_logger("sidecar.proxy")

#: Seconds between two heartbeats of the event loop (/healthz).
BEAT_INTERVAL: Final = 1.0


def bootstrap_addresses(servers: str) -> list[Address]:
    """`host:port,host:port` (each optionally `PROTOCOL://`-prefixed, IPv6 hosts in brackets)
    as addresses.

    Raises:
        ConfigError: an entry without a port.
    """
    addresses = []
    for entry in servers.split(","):
        server = entry.strip().rpartition("://")[2]
        host, sep, port = server.rpartition(":")
        if not server:
            continue
        if not sep or not port.isdigit():
            raise ConfigError(f"bootstrap server {entry.strip()!r} is not HOST:PORT")
        addresses.append(Address(host.strip("[]"), int(port)))
    if not addresses:
        raise ConfigError("no bootstrap server (KAFKA_BOOTSTRAP_SERVERS, ZDICT_KAFKA__*)")
    return addresses


def produce_rewriter(
    settings: Settings, routes: ProxyRoutes, metrics: ForwardMetrics
) -> ProduceRewriter:
    """The Produce rewriting of `settings`, encoding with the namespaces of `routes`."""
    proxy = settings.proxy
    limits = BatchLimits(
        max_batch_bytes=proxy.max_request_bytes,
        max_value_bytes=settings.codec.max_output_size,
        header_key=settings.codec.header_key,
        output_codec=proxy.output_compression,
    )
    return ProduceRewriter(
        batches=BatchRewriter(limits),
        allowed=TopicAllowList(proxy.allowed_topics or proxy.topics, [settings.registry.topic]),
        namespace=lambda topic: routes.route(topic).namespace,
        metrics=metrics,
        max_records=proxy.max_records_per_request,
        max_decompressed_bytes=proxy.max_decompressed_request_bytes,
        raw_batches=settings.codec.output_mode == "auto",
        compare_batches=proxy.compare_batches,
    )


async def _serve(
    settings: Settings,
    bootstrap: list[Address],
    metrics: ForwardMetrics,
    security: UpstreamSecurity,
    routes: ProxyRoutes,
    fetch: FetchDecoding,
    health: Health,
    ready: Callable[[str, int], None] | None,
) -> int:
    produce = produce_rewriter(settings, routes, metrics)
    # The protected topics' ids before the first client: refused by id from its first request.
    known = await learn_topics(bootstrap, security, fetch.topics)
    filters = functools.partial(
        proxy_filters, settings.proxy, metrics, produce=produce, fetch=fetch, topics=fetch.topics
    )
    listeners = Listeners(settings.proxy, bootstrap, metrics, filters, security)
    try:
        address = await listeners.start()
    except OSError as exc:
        raise ConfigError(
            f"cannot listen on {settings.proxy.listen} (ZDICT_PROXY__LISTEN, --listen): "
            f"{exc.strerror or exc}"
        ) from None
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    health.set_encoder_ready(True)
    log.info(
        "proxy_listening",
        mode="forward",
        listen=f"{address.host}:{address.port}",
        broker_port_base=settings.proxy.broker_port_base,
        upstream=",".join(f"{a.host}:{a.port}" for a in bootstrap),
        allowed_topics=list(produce.allowed.patterns),
        output_compression=settings.proxy.output_compression,
        training=settings.training.enabled,
        admin_apis=settings.proxy.admin_apis,
        topics_known=known,
    )
    if not produce.allowed.patterns:
        log.warning(
            "no_topics_allowed",
            detail="every Produce request is refused (TOPIC_AUTHORIZATION_FAILED): name the "
            "topics with --topic or ZDICT_PROXY__ALLOWED_TOPICS",
        )
    if ready is not None:
        ready(address.host, address.port)
    while not stopping.is_set():
        health.beat()
        routes.tick()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), BEAT_INTERVAL)
    health.set_stopping()
    log.info("shutting_down", produce_requests=produce.requests, refused=produce.refused)
    await listeners.stop()
    log.info("proxy_stopped")
    return 0


def _fetch_decoding(
    settings: Settings, prometheus: CollectorRegistry, registry: Registry | None
) -> FetchDecoding:
    """Fetch responses' rewriting: a decoder over `registry` (read on an id it does not know, at
    most once per `registry.follow_interval` for all ids, and every `registry.follow_interval`
    seconds), or over the local store without one; ids the registry did not have are not looked
    up again for that long. Closing it closes `registry`."""
    proxy = settings.proxy
    resolver: DictionaryResolver = DictionaryStore(settings.dictionaries)
    if registry is not None:
        resolver = ThrottledLookups(
            RegistryResolver(registry, settings.registry.follow_interval),
            settings.registry.follow_interval,
        )
    decoder = Decoder(
        RecentMisses(resolver, settings.registry.follow_interval),
        max_output_size=settings.codec.max_output_size,
        header_key=settings.codec.header_key,
    )
    return FetchDecoding(
        decoder,
        topics=TopicView(settings.registry.topic, show_internal=proxy.show_internal_topics),
        metrics=FetchMetrics(prometheus),
        decode=proxy.fetch_decode,
        raw_client_ids=proxy.raw_fetch_client_ids,
        compression=proxy.fetch_compression,
        # A response is read within the budget: one larger than all of it could never be.
        max_bytes=min(proxy.max_fetch_bytes, proxy.max_buffered_bytes),
        max_unread_bytes=proxy.max_unread_bytes,
        decode_budget=proxy.fetch_decode_budget_bytes,
    )


def run_proxy(settings: Settings, ready: Callable[[str, int], None] | None = None) -> int:
    """Run the proxy until SIGTERM/SIGINT (exit 0) or a failure (exit 1); `ready`
    is called with the address it listens on."""
    client = settings.kafka.client_config()
    security = upstream_security(client)
    bootstrap = bootstrap_addresses(client["bootstrap.servers"])
    interrupt_start()
    with Observability(settings.metrics, settings.proxy.group_id) as observed:

        def serve() -> int:
            # Reachable, with the proxy's own TLS and SASL? A refusal names the broker's
            # message; ZDICT_PROXY__START_TIMEOUT bounds the wait.
            asyncio.run(check_upstream(bootstrap, security, settings.proxy.start_timeout))
            metrics = ForwardMetrics(observed.prometheus, observed.metrics.stored)
            with ExitStack() as stack:
                # A start reading a large registry is alive (/healthz), not a hung loop.
                with observed.health.starting():
                    registry: Registry | None = None
                    if settings.registry.enabled:
                        registry = Registry.open(settings, "proxy", observed.metrics)
                        stack.callback(registry.close)
                    # One registry reader for the trainer (Produce) and the decoder (Fetch, on its
                    # own thread), as the relay shares one: `Registry` reads under a lock, and
                    # both read its state rather than the entries a read returns, so neither
                    # misses what the other's read applied. Closed in reverse: the trainer
                    # stops before the decoder closes the registry (closing it again is a no-op).
                    fetch = _fetch_decoding(settings, observed.prometheus, registry)
                    stack.callback(fetch.close)
                    store = DictionaryStore(settings.dictionaries)
                    routes = ProxyRoutes(settings, store, registry, observed.metrics)
                    stack.callback(routes.close)
                    routes.set_up(settings.proxy.topics)
                    routes.elect()
                # What start made (kio's message classes, dictionaries, lookup tables) lives
                # as long as the process: kept out of the collector's generations, a full
                # collection no longer walks it.
                gc.freeze()
                loop_factory = (
                    uvloop.new_event_loop
                    if settings.proxy.event_loop == "uvloop"
                    else asyncio.new_event_loop
                )
                with asyncio.Runner(loop_factory=loop_factory) as runner:
                    return runner.run(
                        _serve(
                            settings,
                            bootstrap,
                            metrics,
                            security,
                            routes,
                            fetch,
                            observed.health,
                            ready,
                        )
                    )

        return exit_code(serve, log, failed="proxy_failed", stopped="proxy_stopped")
