"""The proxy's listener: one asyncio task per client connection.

Per connection, requests are read and dispatched one after the other, in order (a produce
request's records are handed to the upstream producer before the next request is read, which
keeps each partition's order); their answers are awaited concurrently, up to
`proxy.max_in_flight` at once, and written back in request order, as Kafka clients require.
A frame larger than `proxy.max_request_bytes`, one that does not parse, or an API the proxy
does not serve closes that connection with one log line; other connections go on. At most
`proxy.max_connections` are served; more are closed at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable
from typing import Any, Final

from kio.schema.errors import ErrorCode

from sidecar.config import ProxySettings
from sidecar.errors import ProtocolError
from sidecar.logs import get_logger
from sidecar.proxy.metadata import Address, UpstreamTopics, metadata_response
from sidecar.proxy.produce import Forwarded, ProduceHandler
from sidecar.proxy.protocol import (
    API_VERSIONS,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    METADATA,
    NO_THROTTLE,
    PRODUCE,
    Request,
    UnsupportedApiVersions,
    api_name,
    api_versions_response,
    build,
    encode_response,
    frame_size,
    parse_request,
    response_class,
)
from sidecar.proxy.sequences import ProducerIds

log = get_logger(__name__)

#: Seconds a stopping proxy waits for the answers of requests under way.
DRAIN_TIMEOUT: Final = 30.0

Answer = asyncio.Future[bytes | None]


class Dispatcher:
    """Turns one request into its answer (bytes of a response frame, or None: no answer)."""

    def __init__(
        self,
        *,
        produce: ProduceHandler,
        topics: UpstreamTopics,
        producer_ids: ProducerIds,
        upstream_for: Callable[[str], str],
        cluster_id: Callable[[], str | None],
    ) -> None:
        self.produce = produce
        self.topics = topics
        self.producer_ids = producer_ids
        self.upstream_for = upstream_for
        self.cluster_id = cluster_id

    async def dispatch(self, request: Request | UnsupportedApiVersions, address: Address) -> Answer:
        """Serve the part of `request` that must happen in order; return the rest to await."""
        if isinstance(request, UnsupportedApiVersions):
            body = api_versions_response(0, ErrorCode.unsupported_version)
            return _ready(encode_response(request.correlation_id, body))
        if request.api_key == PRODUCE:
            forwarded = await self.produce.forward(request)
            if request.body.acks == 0:
                return _ready(None)  # a broker does not answer acks=0 either
            return asyncio.ensure_future(self._produce_answer(request, forwarded))
        if request.api_key == METADATA:
            body = await self._metadata(request, address)
        elif request.api_key == API_VERSIONS:
            body = api_versions_response(request.version)
        elif request.api_key == INIT_PRODUCER_ID:
            body = self._init_producer_id(request)
        elif request.api_key == FIND_COORDINATOR:
            body = self._find_coordinator(request)
        else:  # parse_request lets through only what SUPPORTED lists
            raise ProtocolError(f"{api_name(request.api_key)} has no handler")
        return _ready(encode_response(request.correlation_id, body))

    async def _produce_answer(self, request: Request, forwarded: Forwarded) -> bytes:
        body = await self.produce.answer(request, forwarded)
        return encode_response(request.correlation_id, body)

    async def _metadata(self, request: Request, address: Address) -> Any:
        topics = request.body.topics
        names = None if topics is None else [t.name for t in topics if t.name is not None]
        await self.topics.refresh(
            None if names is None else [self.upstream_for(name) for name in names]
        )
        return metadata_response(
            request.version, names, self.topics, self.upstream_for, address, self.cluster_id()
        )

    def _find_coordinator(self, request: Request) -> Any:
        """Refused: a transactional producer or a consumer group pointed at the proxy. The
        authorization errors make clients fail at once instead of retrying for minutes."""
        transactional = getattr(request.body, "key_type", 0) == 1
        error = (
            ErrorCode.transactional_id_authorization_failed
            if transactional
            else ErrorCode.group_authorization_failed
        )
        what = "transactions" if transactional else "consumer groups"
        message = (
            f"the zdict-sidecar produce proxy does not serve {what}: use the Kafka cluster "
            "directly for them"
        )
        log.warning("coordinator_refused", client_id=request.client_id, error=message)
        return build(
            response_class(FIND_COORDINATOR, request.version),
            throttle_time=NO_THROTTLE,
            error_code=error,
            error_message=message,
            node_id=-1,
            host="",
            port=-1,
        )

    def _init_producer_id(self, request: Request) -> Any:
        body = request.body
        cls = response_class(INIT_PRODUCER_ID, request.version)
        if body.transactional_id is not None:
            log.warning(
                "transactions_refused",
                client_id=request.client_id,
                transactional_id=body.transactional_id,
                error="the proxy does not support transactions: produce transactionally to "
                "the cluster directly",
            )
            return build(
                cls,
                throttle_time=NO_THROTTLE,
                error_code=ErrorCode.invalid_request,
                producer_id=-1,
                producer_epoch=-1,
            )
        producer_id, epoch = self.producer_ids.new(
            getattr(body, "producer_id", -1), getattr(body, "producer_epoch", -1)
        )
        return build(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            producer_id=producer_id,
            producer_epoch=epoch,
        )


def _ready(data: bytes | None) -> Answer:
    future: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
    future.set_result(data)
    return future


class Budget:
    """Bytes of requests being served across connections, bounded: the proxy's memory."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._freed = asyncio.Condition()

    async def take(self, size: int) -> None:
        async with self._freed:
            await self._freed.wait_for(lambda: self.used + size <= self.limit)
            self.used += size

    async def give(self, size: int) -> None:
        async with self._freed:
            self.used -= size
            self._freed.notify_all()


class ProxyServer:
    """Accepts producers and serves their connections (see module)."""

    def __init__(self, settings: ProxySettings, dispatcher: Dispatcher) -> None:
        self.settings = settings
        self.dispatcher = dispatcher
        self.budget = Budget(settings.max_buffered_bytes)
        self._server: asyncio.Server | None = None
        self._connections: dict[int, asyncio.Task[None]] = {}
        self._ids = itertools.count(1)
        self.refused_connections = 0

    async def start(self) -> tuple[str, int]:
        """Listen on `settings.listen`; returns the address bound (port 0 picks one)."""
        self._server = await asyncio.start_server(
            self._accept, self.settings.host, self.settings.port
        )
        host, port = self._server.sockets[0].getsockname()[:2]
        return str(host), int(port)

    async def stop(self) -> None:
        """Stop accepting, let every connection's requests under way be answered (at most
        `DRAIN_TIMEOUT` seconds), then close them."""
        if self._server is not None:
            self._server.close()
        tasks = list(self._connections.values())
        for task in tasks:
            task.cancel()  # cancels the read of the next request; answers under way go on
        if tasks:
            await asyncio.wait(tasks, timeout=DRAIN_TIMEOUT)
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        if len(self._connections) >= self.settings.max_connections:
            self.refused_connections += 1
            log.warning(
                "connection_refused",
                peer=str(peer),
                reason=f"{self.settings.max_connections} connections already "
                "(ZDICT_PROXY__MAX_CONNECTIONS)",
            )
            writer.close()
            return
        key = next(self._ids)
        task = asyncio.current_task()
        assert task is not None
        self._connections[key] = task
        try:
            await Connection(self.settings, self.dispatcher, self.budget, reader, writer).serve()
        finally:
            del self._connections[key]


class Connection:
    """One client connection (see module)."""

    def __init__(
        self,
        settings: ProxySettings,
        dispatcher: Dispatcher,
        budget: Budget,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.settings = settings
        self.dispatcher = dispatcher
        self.budget = budget
        self.reader = reader
        self.writer = writer
        sockname = writer.get_extra_info("sockname")
        # Clients are told to come back to the address they connected to.
        self.address = Address(str(sockname[0]), int(sockname[1]))
        self.peer = str(writer.get_extra_info("peername"))
        self.client_id: str | None = None
        #: Answers under way, in request order, with the bytes their requests hold.
        self._answers: asyncio.Queue[tuple[Answer, int] | None] = asyncio.Queue(
            settings.max_in_flight
        )

    async def serve(self) -> None:
        writing = asyncio.create_task(self._write_answers())
        try:
            await self._read_requests()
        except asyncio.CancelledError:
            pass  # the proxy is stopping: answer what is under way, read nothing more
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client closed the connection (possibly mid-frame)
        except ProtocolError as exc:
            log.warning("request_refused", peer=self.peer, client_id=self.client_id, error=str(exc))
            writing.cancel()  # the connection is closed without the answers still under way
            await asyncio.gather(writing, return_exceptions=True)
        finally:
            if not writing.done():
                try:  # the writer ends after the answers queued before this
                    await asyncio.wait_for(self._answers.put(None), DRAIN_TIMEOUT)
                except TimeoutError:
                    writing.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError, TimeoutError):
                await asyncio.wait_for(writing, DRAIN_TIMEOUT)
            while not self._answers.empty():  # answers never written: their bytes are free
                item = self._answers.get_nowait()
                if item is not None:
                    await self.budget.give(item[1])
            self.writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await self.writer.wait_closed()

    async def _read_requests(self) -> None:
        limit = self.settings.max_request_bytes
        while True:
            prefix = await self.reader.readexactly(4)
            size = frame_size(prefix, limit)
            await self.budget.take(size)
            try:
                frame = await self.reader.readexactly(size)
                request = parse_request(frame)
                del frame
                if isinstance(request, Request):
                    self.client_id = request.client_id
                answer = await self.dispatcher.dispatch(request, self.address)
            except BaseException:
                await self.budget.give(size)
                raise
            await self._answers.put((answer, size))

    async def _write_answers(self) -> None:
        while True:
            item = await self._answers.get()
            if item is None:
                return
            answer, size = item
            try:
                data = await answer
            finally:
                await self.budget.give(size)
            if data is not None:
                self.writer.write(data)
                await self.writer.drain()
