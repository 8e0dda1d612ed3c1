"""Where clients reach the proxy: the bootstrap listener at `proxy.listen`, and one
local listener per upstream broker, started when a response first names the broker.

A connection to the bootstrap listener is forwarded to the first upstream bootstrap server that
accepts a connection (in the order configured); a connection to broker N's listener to broker
N's address as upstream last named it. Upstream connections are opened by `upstream`: TLS and
the proxy's own SASL authentication first; a broker refusing the proxy's credentials closes the
client's connection (`upstream_auth_failed`). Both kinds count against `proxy.max_connections`
(and `proxy.max_connections_per_client` per client address); past it an idle connection gives
way to the new one, or with none idle the new one is closed at once (`slots`; one
`connection_refused` line per `REFUSAL_LOG_INTERVAL` with how many were held back). Broker
listeners bind the host of `proxy.listen` (loopback by default), at the port
`addresses.PortMap` gives, and stay up for the process. Every `SWEEP_INTERVAL` seconds (at most
half of `proxy.read_timeout`) one sweep over the connections ends those whose frame in progress
is late or that stayed idle (`Connection.sweep`).

A client's upstream connection opens once the client has sent its first bytes (`Waiting`): a
client that connects and sends nothing costs no broker connection, and is closed after
`proxy.first_request_timeout` seconds, or first when slots run short.

While a listener's upstream cannot be reached (a connection to it failed, or upstream closed one
and then refused a TCP connection: the broker is down), the listener stops, so that clients see
the broker down as they would without the proxy: their connections refused, not accepted and
closed at once. It listens again at the same port once upstream accepts a TCP connection
(checked every `RECHECK_INTERVAL` seconds). A client already accepted when its upstream
connection fails (the first to come after the broker stopped while no connection was open) is
kept, its request unanswered, while the connection is tried again every `RECHECK_INTERVAL`
seconds for `UPSTREAM_WAIT` seconds: served if the broker is back by then (a restart), else
closed (`upstream_unreachable`, then `upstream_wait_ended`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from sidecar.config import ProxySettings
from sidecar.errors import AuthenticationFailed
from sidecar.logs import get_logger
from sidecar.proxy.addresses import Address, PortMap
from sidecar.proxy.budget import Budget
from sidecar.proxy.chain import Filters
from sidecar.proxy.connection import Connection, Limits, Streams
from sidecar.proxy.filters.broker_addresses import Locate
from sidecar.proxy.metrics import BOOTSTRAP, BROKER, ForwardMetrics
from sidecar.proxy.security import PLAINTEXT_UPSTREAM, UpstreamSecurity
from sidecar.proxy.sides import Accepted
from sidecar.proxy.slots import Slots
from sidecar.proxy.throttle import Throttle
from sidecar.proxy.upstream import CONNECT_TIMEOUT, describe, open_upstream, reachable

log = get_logger(__name__)

#: Seconds a stopping proxy gives its connections to end.
STOP_TIMEOUT: Final = 10.0
#: Seconds between two sweeps over the connections (see module).
SWEEP_INTERVAL: Final = 1.0
#: Seconds between two log lines about connections refused, or closed to admit others.
REFUSAL_LOG_INTERVAL: Final = 10.0
#: Seconds between two checks whether upstream is back, while a listener is paused.
RECHECK_INTERVAL: Final = 1.0
#: Checks whether upstream is down after it closed a connection, and the seconds between them.
CLOSED_CHECKS: Final = 5
CLOSED_CHECK_INTERVAL: Final = 0.1
#: The reason a connection ends when upstream closed it (`Connection`).
UPSTREAM_CLOSED: Final = "upstream_closed"
#: Seconds a client accepted waits for its upstream connection while upstream cannot be reached
#: (see module): what one connection may take to open (`upstream.CONNECT_TIMEOUT`), well within
#: the 30 s Kafka clients give a request.
UPSTREAM_WAIT: Final = CONNECT_TIMEOUT


class Waiting:
    """A client connection accepted, before its upstream connection is open: it holds a slot,
    gives way first while its client has sent nothing (`slots`), and is closed once silent for
    `timeout` seconds."""

    def __init__(self, accepted: Accepted, since: float, timeout: float) -> None:
        self.accepted = accepted
        self.since = since
        self.timeout = timeout
        #: Why the proxy closed it (None: it did not).
        self.reason: str | None = None

    def idle_since(self) -> float | None:
        return None if self.accepted.spoke.is_set() else self.since

    def sent_a_byte(self) -> bool:
        return bool(self.accepted.data)

    def sweep(self, now: float) -> None:
        if not self.accepted.spoke.is_set() and now - self.since > self.timeout:
            self.close("idle")

    def close(self, reason: str | None) -> None:
        if self.reason is None:
            self.reason = reason
        if self.accepted.transport is not None:
            self.accepted.transport.close()
        self.accepted.spoke.set()


class Listeners:
    """The bootstrap listener and the broker listeners (see module)."""

    def __init__(
        self,
        settings: ProxySettings,
        bootstrap: Sequence[Address],
        metrics: ForwardMetrics,
        filters: Callable[[Locate], Filters],
        security: UpstreamSecurity = PLAINTEXT_UPSTREAM,
    ) -> None:
        """`filters`: the assembly's filter chain (`filters.proxy_filters`), made once here
        with the local listener of each upstream node (`locate`)."""
        self.settings = settings
        self.security = security
        self.bootstrap = tuple(bootstrap)
        self.metrics = metrics
        self.filters = filters(self.locate)
        self.ports = PortMap(settings.broker_port_base)
        self.budget = Budget(settings.max_buffered_bytes)
        self.limits = Limits(
            max_frame_bytes=settings.max_request_bytes,
            max_in_flight=settings.max_in_flight,
            read_timeout=settings.read_timeout,
            write_timeout=settings.write_timeout,
            max_unread_bytes=settings.max_unread_bytes,
            first_request_timeout=settings.first_request_timeout,
        )
        self.slots: Slots[Accepted, Connection | Waiting] = Slots(
            settings.max_connections, settings.max_connections_per_client
        )
        self.refusals = Throttle(REFUSAL_LOG_INTERVAL)
        self.evictions = Throttle(REFUSAL_LOG_INTERVAL)
        #: Node id -> its upstream address, as the latest response naming it said.
        self.upstream: dict[int, Address] = {}
        self._servers: dict[int | None, asyncio.Server] = {}
        #: Listeners stopped while their upstream cannot be reached: the task reopening each.
        self._paused: dict[int | None, asyncio.Task[None]] = {}
        #: Seconds between two checks whether a paused listener's upstream is back.
        self.recheck_interval = RECHECK_INTERVAL
        #: Seconds a client accepted waits for an upstream that cannot be reached.
        self.upstream_wait = UPSTREAM_WAIT
        #: Listeners whose upstream closed a connection: the task checking whether it is down.
        self._checking: dict[int | None, asyncio.Task[None]] = {}
        self._unavailable: set[int] = set()
        self._connections: set[asyncio.Task[None]] = set()
        self._sweeping: asyncio.Task[None] | None = None
        self._starting = asyncio.Lock()

    async def start(self) -> Address:
        """Listen at `proxy.listen`; the address bound (port 0 picks one).

        Raises:
            OSError: the address is taken or not this host's.
        """
        server = await self._server(None, self.settings.port)
        self._servers[None] = server
        self._sweeping = asyncio.create_task(self._sweep())
        host, port = server.sockets[0].getsockname()[:2]
        return Address(str(host), int(port))

    async def locate(
        self, nodes: Mapping[int, Address], client_host: str
    ) -> dict[int, Address | None]:
        """The local address of each upstream node (None: it has no listener), its listener
        started if it has none yet; `nodes`' upstream addresses are remembered."""
        local: dict[int, Address | None] = {}
        for node_id, address in nodes.items():
            if self.upstream.get(node_id) != address:
                log.info(
                    "upstream_broker", node_id=node_id, upstream=f"{address.host}:{address.port}"
                )
                self.upstream[node_id] = address
            port = await self._listen(node_id)
            local[node_id] = None if port is None else Address(client_host, port)
        return local

    async def stop(self) -> None:
        """Stop listening; end every connection (at most `STOP_TIMEOUT` seconds)."""
        for server in self._servers.values():
            server.close()
        for reopening in [*self._paused.values(), *self._checking.values()]:
            reopening.cancel()
        if self._sweeping is not None:
            self._sweeping.cancel()
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_TIMEOUT)
        for server in self._servers.values():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(server.wait_closed(), STOP_TIMEOUT)

    async def _listen(self, node_id: int) -> int | None:
        if node_id in self._servers:
            return self.ports.port(node_id)
        if node_id in self._unavailable:
            return None
        async with self._starting:  # two responses naming a new broker start one listener
            if node_id in self._servers:
                return self.ports.port(node_id)
            port = self.ports.port(node_id)
            try:
                if port is None:
                    raise OSError(
                        f"port {self.ports.base} + {node_id} is outside 1-65535 "
                        "(ZDICT_PROXY__BROKER_PORT_BASE)"
                    )
                self._servers[node_id] = await self._server(node_id, port)
            except OSError as exc:
                self._unavailable.add(node_id)
                log.error(
                    "broker_listener_failed",
                    node_id=node_id,
                    port=port,
                    error=f"{exc.strerror or exc}: clients are not told of this broker",
                )
                return None
        self.metrics.set_broker_listeners(len(self._servers) - 1)
        log.info(
            "broker_listener_started",
            node_id=node_id,
            listen=f"{self.settings.host}:{port}",
            upstream=f"{self.upstream[node_id].host}:{self.upstream[node_id].port}",
        )
        return port

    async def _server(self, node_id: int | None, port: int) -> asyncio.Server:
        """A listener at `port` for `node_id` (None: bootstrap).

        Raises:
            OSError: the port is taken.
        """
        return await asyncio.get_running_loop().create_server(
            functools.partial(Accepted, functools.partial(self._accept, node_id)),
            self.settings.host,
            port,
        )

    def _unreachable(self, node_id: int | None) -> None:
        """Upstream of `node_id`'s listener (None: bootstrap) cannot be reached: the listener
        stops, so that clients' connections are refused as the broker's own would be (a client
        retries a refused connection as it should; one accepted and closed at once looks like
        a broker failing a request), until upstream accepts connections again (see module)."""
        server = self._servers.get(node_id)
        if server is None or node_id in self._paused or not server.sockets:
            return
        port = int(server.sockets[0].getsockname()[1])
        server.close()
        self._paused[node_id] = asyncio.get_running_loop().create_task(self._reopen(node_id, port))
        log.warning(
            "listener_paused",
            node_id=node_id,
            port=port,
            reason="upstream cannot be reached: connections to this port are refused until it can",
        )

    def _check_upstream(self, node_id: int | None) -> None:
        """Upstream of `node_id`'s listener (None: bootstrap) closed a connection: a broker
        stopping closes them all. Whether it still accepts connections is checked at once
        (and `CLOSED_CHECKS` times in a row, a broker shutting down closing its port last), so
        that the listener stops before the clients connect again (see module)."""
        if node_id in self._paused or node_id in self._checking:
            return
        task = asyncio.get_running_loop().create_task(self._check(node_id))
        self._checking[node_id] = task

    async def _check(self, node_id: int | None) -> None:
        try:
            for _ in range(CLOSED_CHECKS):
                if not await self._reachable(node_id):
                    self._unreachable(node_id)
                    return
                await asyncio.sleep(CLOSED_CHECK_INTERVAL)
        finally:
            self._checking.pop(node_id, None)

    async def _reachable(self, node_id: int | None) -> bool:
        """Whether one of the upstream addresses of `node_id`'s listener accepts a connection."""
        targets = self.bootstrap if node_id is None else (self.upstream[node_id],)
        for target in targets:
            if await reachable(target, self.recheck_interval):
                return True
        return False

    async def _reopen(self, node_id: int | None, port: int) -> None:
        """Listen again at `port` for `node_id` once its upstream accepts a connection (checked
        every `recheck_interval` seconds)."""
        try:
            while True:
                await asyncio.sleep(self.recheck_interval)
                if not await self._reachable(node_id):
                    continue
                try:
                    self._servers[node_id] = await self._server(node_id, port)
                except OSError as exc:  # taken meanwhile: tried again
                    log.error("listener_resume_failed", node_id=node_id, port=port, error=str(exc))
                    continue
                log.info("listener_resumed", node_id=node_id, port=port)
                return
        finally:
            self._paused.pop(node_id, None)

    async def _sweep(self) -> None:
        interval = min(SWEEP_INTERVAL, self.limits.read_timeout / 2)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            now = loop.time()
            for connection in self.slots.connections():
                connection.sweep(now)

    def _accept(self, node_id: int | None, accepted: Accepted) -> None:
        """A client connected to `node_id`'s listener (None: bootstrap): served by a task of
        its own once it has a slot (an idle connection closed to make room, see module), or
        closed at once."""
        transport = accepted.transport
        assert transport is not None
        peer = transport.get_extra_info("peername")
        host = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        admitted, victim = self.slots.room(host, asyncio.get_running_loop().time())
        if not admitted:
            self._refuse(transport, host)
            return
        if victim is not None:
            self._evict(victim, host)
        self.slots.hold(accepted, host)
        task = asyncio.get_running_loop().create_task(self._serve(node_id, accepted))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    def _refuse(self, transport: asyncio.BaseTransport, host: str) -> None:
        """No slot for a new connection from `host`: closed at once, logged at most once per
        `REFUSAL_LOG_INTERVAL` (a client retries within milliseconds)."""
        self.metrics.refused()
        transport.close()
        held = self.refusals.admit()
        if held is None:
            return
        per_client = self.settings.max_connections_per_client
        if per_client and self.slots.held_by(host) >= per_client:
            reason = (
                f"{per_client} connections of this client address already, none idle "
                "(ZDICT_PROXY__MAX_CONNECTIONS_PER_CLIENT)"
            )
        else:
            reason = (
                f"{self.settings.max_connections} connections already, none idle "
                "(ZDICT_PROXY__MAX_CONNECTIONS)"
            )
        log.warning("connection_refused", peer=host, held_back=held, reason=reason)

    def _evict(self, victim: Accepted, host: str) -> None:
        """Close `victim`'s idle connection to admit one from `host`."""
        connection = self.slots.release(victim)
        if connection is not None:
            connection.close("evicted")
        held = self.evictions.admit()
        if held is not None:
            log.info(
                "connection_evicted",
                peer=host,
                held_back=held,
                reason="an idle connection was closed to admit a new one "
                "(ZDICT_PROXY__MAX_CONNECTIONS, ZDICT_PROXY__MAX_CONNECTIONS_PER_CLIENT)",
            )

    async def _serve(self, node_id: int | None, accepted: Accepted) -> None:
        client = accepted.transport
        assert client is not None
        listener = BOOTSTRAP if node_id is None else BROKER
        peer = str(client.get_extra_info("peername"))
        self.metrics.opened(listener)
        reason: str | None = "upstream_unreachable"
        connection: Connection | None = None
        try:
            waiting = Waiting(
                accepted, asyncio.get_running_loop().time(), self.limits.first_request_timeout
            )
            self.slots.serve(accepted, waiting)
            await accepted.spoke.wait()
            if waiting.reason is not None or accepted.lost or not accepted.data:
                reason = waiting.reason  # silent, given way, or gone: no upstream connection
                return
            try:
                upstream = await self._connect(node_id, peer, accepted)
            except AuthenticationFailed as exc:
                reason = "upstream_auth_failed"
                log.error("upstream_auth_failed", peer=peer, node_id=node_id, error=str(exc))
                upstream = None
            if upstream is None:
                return
            if accepted.lost:
                reason = None  # the client left meanwhile
                upstream[1].close()
                return
            connection = Connection(
                accepted,
                upstream,
                limits=self.limits,
                budget=self.budget,
                metrics=self.metrics,
                chain=self.filters.chain(),
            )
            self.slots.serve(accepted, connection)
            reason = await connection.serve()
            if reason == UPSTREAM_CLOSED:
                self._check_upstream(node_id)
        except asyncio.CancelledError:
            reason = None  # the proxy is stopping: this task is the connection's own
        finally:
            if connection is None:
                client.close()
            self.slots.release(accepted)
            self.metrics.ended(listener, reason)

    async def _connect(self, node_id: int | None, peer: str, accepted: Accepted) -> Streams | None:
        """A connection to upstream for the client `accepted` of `node_id`'s listener (None:
        bootstrap); while none can be opened, the listener stops and the client waits at most
        `upstream_wait` seconds (see module). None: no connection, the client gone or waited.

        Raises:
            AuthenticationFailed: upstream refused the proxy's credentials.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.upstream_wait
        targets = self.bootstrap if node_id is None else (self.upstream[node_id],)
        tries = 0
        while True:
            errors = []
            for target in targets:
                timeout = min(CONNECT_TIMEOUT, max(deadline - loop.time(), 0.1))
                try:
                    streams, _lifetime = await open_upstream(target, self.security, timeout)
                except (OSError, TimeoutError) as exc:
                    errors.append(f"{target.host}:{target.port}: {describe(exc)}")
                else:
                    if tries:
                        log.info("upstream_reached", peer=peer, node_id=node_id, tries=tries + 1)
                    return streams
            tries += 1
            if tries == 1:
                log.warning(
                    "upstream_unreachable",
                    peer=peer,
                    node_id=node_id,
                    errors=errors,
                    detail=f"the client waits at most {self.upstream_wait:g} s for upstream, "
                    "new connections are refused meanwhile",
                )
                self._unreachable(node_id)
            if accepted.lost:
                return None
            if loop.time() + self.recheck_interval > deadline:
                log.warning(
                    "upstream_wait_ended",
                    peer=peer,
                    node_id=node_id,
                    errors=errors,
                    error=f"upstream could not be reached within {self.upstream_wait:g} s: the "
                    "client's connection is closed",
                )
                return None
            await asyncio.sleep(self.recheck_interval)
