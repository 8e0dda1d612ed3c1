"""`zdict-sidecar proxy --forward`: the forwarding proxy wired from the settings.

The first step of the forwarding proxy (issue 26): every request is forwarded to the upstream
broker the client addressed, broker addresses are rewritten to the proxy's listeners, records
pass as they are (no compression yet, so no dictionary lifecycle). Upstream is reached as
`ZDICT_KAFKA__SECURITY_PROTOCOL` says (`security`: TLS, the proxy's own SASL), checked at start
with one connection of the proxy's own (`upstream.check_upstream`). Readiness: once the
bootstrap listener is up.

Exit codes: 0 after SIGTERM/SIGINT, 1 when upstream cannot be reached at start or refuses the
proxy's credentials, 2 for configuration errors (among them a listen address that is taken, or
a security setting the proxy cannot honour).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable
from typing import Final

from sidecar.config import Settings
from sidecar.errors import ConfigError
from sidecar.health import Health
from sidecar.kafka import make_admin, partition_counts
from sidecar.logs import get_logger
from sidecar.observability import Observability
from sidecar.proxy.forward.addresses import Address
from sidecar.proxy.forward.listeners import Listeners
from sidecar.proxy.forward.metrics import ForwardMetrics
from sidecar.proxy.forward.security import UpstreamSecurity, upstream_security
from sidecar.proxy.forward.upstream import check_upstream
from sidecar.runtime import exit_code, interrupt_start

log = get_logger("sidecar.proxy.forward")

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


async def _serve(
    settings: Settings,
    bootstrap: list[Address],
    metrics: ForwardMetrics,
    security: UpstreamSecurity,
    health: Health,
    ready: Callable[[str, int], None] | None,
) -> int:
    listeners = Listeners(settings.proxy, bootstrap, metrics, security)
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


def run_forward_proxy(settings: Settings, ready: Callable[[str, int], None] | None = None) -> int:
    """Run the forwarding proxy until SIGTERM/SIGINT (exit 0) or a failure (exit 1); `ready`
    is called with the address it listens on."""
    client = settings.kafka.client_config()
    security = upstream_security(client)
    bootstrap = bootstrap_addresses(client["bootstrap.servers"])
    interrupt_start()
    with Observability(settings.metrics, settings.proxy.group_id) as observed:

        def serve() -> int:
            # The proxy's own TLS and SASL first: a refusal names the broker's message.
            asyncio.run(check_upstream(bootstrap, security, settings.proxy.start_timeout))
            # Reachable at all? ZDICT_PROXY__START_TIMEOUT bounds the wait.
            partition_counts(
                make_admin(settings), [], settings.proxy.start_timeout, client["bootstrap.servers"]
            )
            metrics = ForwardMetrics(observed.prometheus)
            return asyncio.run(
                _serve(settings, bootstrap, metrics, security, observed.health, ready)
            )

        return exit_code(serve, log, failed="proxy_failed", stopped="proxy_stopped")
