"""Liveness and readiness, and the HTTP server for /metrics, /healthz and /readyz."""

from __future__ import annotations

import contextlib
import errno
import gzip
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted

from sidecar.errors import ConfigError
from sidecar.logs import get_logger

if TYPE_CHECKING:
    from sidecar.config import MetricsSettings

_log = get_logger(__name__)


class Health:
    """Liveness (a heartbeat the process loop touches) and readiness, shared with the server.

    Alive while the last `beat()` is at most `staleness_seconds` old (the constructor counts as
    a beat), or while the process is `starting()`: a start reading a large registry is not a
    hung loop, and its own deadlines (`registry.timeout`) bound it. Ready when alive, not
    stopping and an encoder is ready. Thread-safe.

    Readiness does not depend on the consumer group's assignment: a relay that holds no
    partition (more members than partitions, a surge pod during a rollout) is healthy and waits
    for a rebalance, and an unready sidecar would keep its whole pod, the producer with it, out
    of service and stall a rollout. Assignment is a metric (`zdict_assigned_partitions`) and an
    alert (no partition assigned anywhere).
    """

    def __init__(
        self, staleness_seconds: float = 30.0, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not staleness_seconds > 0:
            raise ValueError(f"staleness_seconds must be > 0, got {staleness_seconds}")
        self.staleness_seconds = staleness_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._last_beat = clock()
        self._encoder_ready = False
        self._stopping = False
        self._starting = 0

    def beat(self) -> None:
        """The process loop is alive; call once per poll iteration."""
        now = self._clock()
        with self._lock:
            self._last_beat = now

    @contextlib.contextmanager
    def starting(self) -> Iterator[None]:
        """The process is starting (reading the registry, loading dictionaries): alive
        meanwhile; the end of the start counts as a beat."""
        with self._lock:
            self._starting += 1
        try:
            yield
        finally:
            with self._lock:
                self._starting -= 1
            self.beat()

    def set_encoder_ready(self, ready: bool = True) -> None:
        """An encoder (with the active dictionary, or the no-dictionary path) is ready."""
        with self._lock:
            self._encoder_ready = ready

    def set_stopping(self) -> None:
        """Shutting down: not ready any more, whatever else holds."""
        with self._lock:
            self._stopping = True

    def liveness(self) -> tuple[bool, str]:
        """(alive, one-line reason)."""
        now = self._clock()
        with self._lock:
            age, starting = now - self._last_beat, self._starting > 0
        if starting:
            return True, "starting"
        if age > self.staleness_seconds:
            return False, (
                f"process loop heartbeat is {age:.1f}s old (limit {self.staleness_seconds:g}s)"
            )
        return True, "ok"

    def readiness(self) -> tuple[bool, str]:
        """(ready, one-line reason)."""
        alive, why = self.liveness()
        with self._lock:
            stopping, encoder_ready = self._stopping, self._encoder_ready
        if stopping:
            return False, "shutting down"
        if not alive:
            return False, why
        if not encoder_ready:
            return False, "no encoder ready yet"
        return True, "ready"

    @property
    def alive(self) -> bool:
        return self.liveness()[0]

    @property
    def ready(self) -> bool:
        return self.readiness()[0]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    #: handle_request() waits no more: `serve` calls it once the listening socket is readable.
    timeout = 0

    def __init__(
        self, address: tuple[str, int], registry: CollectorRegistry, health: Health
    ) -> None:
        self.registry = registry
        self.health = health
        # `serve` waits on the reading end; `wake` writes to the other to make it return. Made
        # first: a failed bind closes the server (`server_close`, which closes them too), and
        # the OSError must come out as it is, not masked by one about the missing pair.
        self._wake_reader, self._waker = socket.socketpair()
        super().__init__(address, _Handler)

    def serve(self) -> None:
        """Serve connections until `wake()`.

        Blocks in the selector with no timeout: an idle server never wakes (serve_forever polls
        for its shutdown flag, `poll_interval` times a second, taking the GIL from the process
        loop each time).
        """
        with selectors.DefaultSelector() as selector:
            selector.register(self.socket, selectors.EVENT_READ)
            selector.register(self._wake_reader, selectors.EVENT_READ)
            while True:
                ready = selector.select()
                if any(key.fileobj is self._wake_reader for key, _ in ready):
                    return
                # The public path serve_forever takes: accept, verify, then process_request,
                # a daemon thread per connection (ThreadingMixIn); with `timeout` 0 a connection
                # gone between the two selects costs a no-op handle_timeout(), not a wait.
                self.handle_request()

    def wake(self) -> None:
        """Make `serve` return (at once if it is waiting, else on its next wait)."""
        self._waker.send(b"\0")

    def server_close(self) -> None:
        super().server_close()
        self._wake_reader.close()
        self._waker.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # socketserver would print the traceback to stderr, outside the log format.
        _log.exception("http_handler_failed", client=str(client_address[0]))


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    #: A client that stops sending mid-request does not hold a thread for long.
    timeout = 10
    server_version = "zdict-sidecar"

    def version_string(self) -> str:
        return self.server_version  # no Python version in the Server header

    def do_GET(self) -> None:
        self._respond(head=False)

    def do_HEAD(self) -> None:
        self._respond(head=True)

    def _respond(self, *, head: bool) -> None:
        path = urlsplit(self.path).path
        headers: list[tuple[str, str]] = []
        if path == "/metrics":
            try:
                encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                body = encoder(self.server.registry)
            except Exception:
                _log.exception("metrics_exposition_failed")
                self._send(500, b"metrics exposition failed\n", head=head)
                return
            if gzip_accepted(self.headers.get("Accept-Encoding", "")):
                body = gzip.compress(body)
                headers.append(("Content-Encoding", "gzip"))
            self._send(200, body, content_type, headers, head=head)
        elif path == "/healthz":
            alive, why = self.server.health.liveness()
            self._send(200 if alive else 503, why.encode() + b"\n", head=head)
        elif path == "/readyz":
            ready, why = self.server.health.readiness()
            self._send(200 if ready else 503, why.encode() + b"\n", head=head)
        else:
            self._send(404, b"not found: try /metrics, /healthz or /readyz\n", head=head)

    def _send(
        self,
        status: int,
        body: bytes,
        content_type: str = "text/plain; charset=utf-8",
        headers: Sequence[tuple[str, str]] = (),
        *,
        head: bool,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        # A request that failed to parse has no command or path yet.
        _log.debug(
            "http_request",
            method=getattr(self, "command", None),
            path=getattr(self, "path", None),
            status=code,
        )

    def log_message(self, format: str, *args: Any) -> None:
        _log.warning("http_error", client=self.client_address[0], detail=format % args)


def _bind_failure(settings: MetricsSettings, exc: OSError) -> str:
    """Why the metrics endpoint cannot listen at `settings`' address, naming the setting."""
    where = f"{settings.host}:{settings.port}"
    if exc.errno == errno.EADDRINUSE:
        return (
            f"the metrics port {settings.port} is in use ({where}): set ZDICT_METRICS__PORT "
            "(or --metrics-port) to a free port, 0 for any, or ZDICT_METRICS__ENABLED=false"
        )
    return (
        f"the metrics endpoint cannot listen on {where}: {exc.strerror or exc}; check "
        "ZDICT_METRICS__HOST and ZDICT_METRICS__PORT (or --metrics-port)"
    )


class ObservabilityServer:
    """`/metrics` (Prometheus text or OpenMetrics, gzip if asked), `/healthz`, `/readyz`; else 404.

    Serves from a daemon thread; nothing it exposes comes from the configuration, so no secret
    can leak through it.
    """

    def __init__(self, registry: CollectorRegistry, health: Health) -> None:
        self.registry = registry
        self.health = health
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self, host: str = "0.0.0.0", port: int = 9400) -> tuple[ThreadingHTTPServer, int]:
        """Listen on (host, port) and serve in a daemon thread; port 0 picks a free port.

        Returns the server and the port actually bound.
        """
        if self._server is not None:
            raise RuntimeError("the observability server is already running")
        server = _Server((host, port), self.registry, self.health)
        actual_port: int = server.server_address[1]
        thread = threading.Thread(
            target=server.serve,
            name=f"zdict-http-{actual_port}",
            daemon=True,
        )
        thread.start()
        self._server, self._thread = server, thread
        _log.info("http_server_started", host=host, port=actual_port)
        return server, actual_port

    def start_if_enabled(self, settings: MetricsSettings) -> None:
        """Listen where `settings` say, if they enable metrics (`run` and `proxy` alike).

        Raises:
            ConfigError: the address cannot be bound (the port is taken, the host is not one of
                this machine's), naming the setting.
        """
        if settings.enabled:
            try:
                _, port = self.start(settings.host, settings.port)
            except OSError as exc:
                raise ConfigError(_bind_failure(settings, exc)) from None
            _log.info("metrics_listening", url=f"http://{settings.host}:{port}/metrics")

    @property
    def port(self) -> int | None:
        """The bound port while running, else None."""
        return None if self._server is None else int(self._server.server_address[1])

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and close the socket; a no-op when not running."""
        server, thread = self._server, self._thread
        if server is None:
            return
        self._server = self._thread = None
        server.wake()
        if thread is not None:
            thread.join(timeout)
        server.server_close()  # after the loop is out of the selector that watches its sockets
        _log.info("http_server_stopped")

    def __enter__(self) -> ObservabilityServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
