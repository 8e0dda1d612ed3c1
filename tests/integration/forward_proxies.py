"""A forwarding proxy (`zdict-sidecar proxy --forward`) as a real process with tight bounds,
for the hostile-client and fuzz tests, and a TCP relay in front of the broker that can stop
reading (an upstream that is slow or stopped)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Mapping

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


def start_forward_proxy(
    start: StartSidecar,
    name: str,
    allowed: list[str],
    env: Mapping[str, str] | None = None,
    bootstrap: str | None = None,
) -> tuple[str, Sidecar]:
    """A forwarding proxy with the bounds above, clients allowed to produce to `allowed`
    (names or patterns), not training; (its bootstrap address, the process)."""
    address = f"127.0.0.1:{free_port()}"
    allowed_json = "[" + ",".join(f'"{topic}"' for topic in allowed) + "]"
    process = start(
        "proxy",
        "--forward",
        "--no-training",
        "--listen",
        address,
        "--metrics-port",
        "0",
        env={
            "ZDICT_PROXY__BROKER_PORT_BASE": str(free_port() - 1),  # the broker is node 1
            "ZDICT_PROXY__ALLOWED_TOPICS": allowed_json,
            "ZDICT_PROXY__MAX_REQUEST_BYTES": str(MAX_REQUEST_BYTES),
            "ZDICT_PROXY__MAX_BUFFERED_BYTES": str(MAX_BUFFERED_BYTES),
            "ZDICT_PROXY__MAX_DECOMPRESSED_REQUEST_BYTES": str(MAX_DECOMPRESSED_REQUEST_BYTES),
            "ZDICT_PROXY__READ_TIMEOUT": str(READ_TIMEOUT_S),
            "ZDICT_CODEC__MAX_OUTPUT_SIZE": str(MAX_VALUE_BYTES),
            **(env or {}),
        },
        bootstrap=bootstrap,
        name=name,
    )
    process.wait_for_event("proxy_listening", timeout=60)
    return address, process


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
