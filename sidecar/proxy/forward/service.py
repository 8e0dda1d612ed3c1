"""`zdict-sidecar proxy --forward`: the forwarding proxy wired from the settings.

The first step of the forwarding proxy (issue 26): every request is forwarded to the upstream
broker the client addressed, broker addresses are rewritten to the proxy's listeners, records
pass as they are on Produce (no compression yet, so no dictionary lifecycle); on Fetch they are
decoded for the clients (`_fetch_decoding`: a decoder that follows the registry as the relay's
does, the local store without a registry), internal topics and the registry topic left out of
listings. Upstream is reached in PLAINTEXT. Readiness: once the bootstrap listener is up.

Exit codes: 0 after SIGTERM/SIGINT, 1 when upstream cannot be reached at start, 2 for
configuration errors (among them a listen address that is taken).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable
from typing import Final

from prometheus_client import CollectorRegistry

from sidecar.codec import Decoder, DictionaryResolver
from sidecar.config import Settings
from sidecar.dictionaries.registry import Registry, RegistryResolver, default_actor
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import ConfigError
from sidecar.health import Health
from sidecar.kafka import make_admin, partition_counts
from sidecar.logs import get_logger
from sidecar.observability import Observability
from sidecar.proxy.forward.addresses import Address
from sidecar.proxy.forward.fetch import FetchDecoding, RecentMisses
from sidecar.proxy.forward.fetch_metrics import FetchMetrics
from sidecar.proxy.forward.listeners import Listeners
from sidecar.proxy.forward.metrics import ForwardMetrics
from sidecar.proxy.forward.topics import TopicView
from sidecar.runtime import exit_code, interrupt_start

log = get_logger("sidecar.proxy.forward")

#: Seconds between two heartbeats of the event loop (/healthz).
BEAT_INTERVAL: Final = 1.0
#: Upstream security protocols this step speaks.
_PLAINTEXT: Final = "plaintext"


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


async def _serve(
    settings: Settings,
    bootstrap: list[Address],
    metrics: ForwardMetrics,
    fetch: FetchDecoding,
    health: Health,
    ready: Callable[[str, int], None] | None,
) -> int:
    listeners = Listeners(settings.proxy, bootstrap, metrics, fetch=fetch, topics=fetch.topics)
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
    )
    if ready is not None:
        ready(address.host, address.port)
    while not stopping.is_set():
        health.beat()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), BEAT_INTERVAL)
    health.set_stopping()
    log.info("shutting_down")
    await listeners.stop()
    log.info("proxy_stopped")
    return 0


def _fetch_decoding(settings: Settings, prometheus: CollectorRegistry) -> FetchDecoding:
    """Fetch responses' rewriting: a decoder over the registry (read on the first id it does
    not know, then every `registry.follow_interval` seconds), or over the local store when the
    registry is disabled; ids the registry did not have are not looked up again for that long."""
    proxy = settings.proxy
    resolver: DictionaryResolver = DictionaryStore(settings.dictionaries)
    if settings.registry.enabled:
        registry = Registry(settings, actor=default_actor("proxy"))
        resolver = RegistryResolver(registry, settings.registry.follow_interval)
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
    )


def run_forward_proxy(settings: Settings, ready: Callable[[str, int], None] | None = None) -> int:
    """Run the forwarding proxy until SIGTERM/SIGINT (exit 0) or a failure (exit 1); `ready`
    is called with the address it listens on."""
    client = settings.kafka.client_config()
    protocol = client.get("security.protocol", _PLAINTEXT).lower()
    if protocol != _PLAINTEXT:
        raise ConfigError(
            f"proxy --forward reaches upstream in PLAINTEXT only for now, not {protocol} "
            "(ZDICT_KAFKA__SECURITY_PROTOCOL): use the produce proxy (without --forward)"
        )
    bootstrap = bootstrap_addresses(client["bootstrap.servers"])
    interrupt_start()
    with Observability(settings.metrics, settings.proxy.group_id) as observed:

        def serve() -> int:
            # Reachable at all? ZDICT_PROXY__START_TIMEOUT bounds the wait.
            partition_counts(
                make_admin(settings), [], settings.proxy.start_timeout, client["bootstrap.servers"]
            )
            metrics = ForwardMetrics(observed.prometheus)
            fetch = _fetch_decoding(settings, observed.prometheus)
            try:
                return asyncio.run(
                    _serve(settings, bootstrap, metrics, fetch, observed.health, ready)
                )
            finally:
                fetch.close()

        return exit_code(serve, log, failed="proxy_failed", stopped="proxy_stopped")
