"""The proxy (`zdict-sidecar proxy`) as a real process, as every integration test starts it
(`start_proxy`, stopped and checked by `stop_proxy`), with tight bounds for the hostile-client
and fuzz tests (`start_forward_proxy`), and a TCP relay in front of the broker that can stop
reading (an upstream that is slow or stopped)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Mapping, Sequence

from .launch import StartSidecar
from .process import Sidecar, free_port

MIB = 1024 * 1024
#: The bounds the hostile tests run the proxy with: small, so that a leak or an unbounded
#: allocation shows within seconds.
MAX_REQUEST_BYTES = 4 * MIB
MAX_BUFFERED_BYTES = 16 * MIB
MAX_DECOMPRESSED_REQUEST_BYTES = 16 * MIB
MAX_VALUE_BYTES = 256 * 1024
READ_TIMEOUT_S = 2.0
#: Training within seconds: a small dictionary after 500 records, the registry followed every
#: second, the trainers' group settling fast.
FAST_TRAINING: Mapping[str, str] = {
    "ZDICT_SAMPLING__MIN_MESSAGES": "500",
    "ZDICT_TRAINING__DICT_SIZES": "[8192]",
    "ZDICT_TRAINING__LEVELS": "[3]",
    "ZDICT_TRAINING__MIN_INTERVAL": "1",
    "ZDICT_REGISTRY__FOLLOW_INTERVAL": "1",
    "ZDICT_CONSUMER__SESSION_TIMEOUT_MS": "6000",
    "ZDICT_CONSUMER__HEARTBEAT_INTERVAL_MS": "1000",
}
#: Log events of a request, a response or a record the proxy could not serve as it came, and
#: of a fault of its own while serving.
TROUBLES = (
    "connection_failed",
    "request_refused",
    "upstream_response_refused",
    "produce_refused",
    "fetch_records_not_decoded",
)


def start_proxy(
    start: StartSidecar,
    name: str,
    *args: str,
    env: Mapping[str, str | None] | None = None,
    bootstrap: str | None = None,
    address: str | None = None,
    port_base: int | None = None,
    listening: bool = True,
) -> tuple[str, Sidecar]:
    """`zdict-sidecar proxy` `args` as process `name`: its bootstrap listener at `address` (a
    free port by default), upstream broker N at `port_base` + N (by default the port after it
    free: the session broker is node 1), /metrics on a free port; once it logs
    `proxy_listening` unless `listening` is false (a start meant to fail).
    (its bootstrap address, the process)."""
    address = address or f"127.0.0.1:{free_port()}"
    base = free_port() - 1 if port_base is None else port_base
    metrics_port = free_port()
    process = start(
        "proxy",
        *("--listen", address, "--metrics-port", str(metrics_port), *args),
        env={"ZDICT_PROXY__BROKER_PORT_BASE": str(base), **(env or {})},
        bootstrap=bootstrap,
        metrics_port=metrics_port,
        name=name,
    )
    if listening:
        process.wait_for_event("proxy_listening", timeout=60)
    return address, process


def stop_proxy(process: Sidecar, troubles: Sequence[str] = TROUBLES) -> None:
    """SIGTERM: the proxy exits 0, having logged none of `troubles` in its life."""
    process.terminate()
    assert process.wait() == 0, process.tail()
    found = [e for e in process.log_lines() if e.get("event") in troubles]
    assert found == [], "every request forwarded, every answer read, every record decoded"


def allowed(*topics: str) -> dict[str, str]:
    """The environment allowing clients to produce to `topics` (names or patterns)."""
    return {"ZDICT_PROXY__ALLOWED_TOPICS": "[" + ",".join(f'"{t}"' for t in topics) + "]"}


def start_forward_proxy(
    start: StartSidecar,
    name: str,
    allowed_topics: list[str],
    env: Mapping[str, str] | None = None,
    bootstrap: str | None = None,
) -> tuple[str, Sidecar]:
    """A proxy with the bounds above, clients allowed to produce to `allowed_topics`, not
    training; (its bootstrap address, the process)."""
    return start_proxy(
        start,
        name,
        "--no-training",
        env={
            **allowed(*allowed_topics),
            "ZDICT_PROXY__MAX_REQUEST_BYTES": str(MAX_REQUEST_BYTES),
            "ZDICT_PROXY__MAX_BUFFERED_BYTES": str(MAX_BUFFERED_BYTES),
            "ZDICT_PROXY__MAX_DECOMPRESSED_REQUEST_BYTES": str(MAX_DECOMPRESSED_REQUEST_BYTES),
            "ZDICT_PROXY__READ_TIMEOUT": str(READ_TIMEOUT_S),
            "ZDICT_CODEC__MAX_OUTPUT_SIZE": str(MAX_VALUE_BYTES),
            **(env or {}),
        },
        bootstrap=bootstrap,
    )


class PausableRelay:
    """A TCP relay to `target`; `pause()` stops reading what its clients send (their writes
    then back up), `resume()` carries on."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.flowing = threading.Event()
        self.flowing.set()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self._sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def pause(self) -> None:
        self.flowing.clear()

    def resume(self) -> None:
        self.flowing.set()

    def close(self) -> None:
        self.flowing.set()
        for sock in self._sockets:
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, pausable: bool) -> None:
        try:
            while True:
                if pausable:
                    self.flowing.wait()
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
