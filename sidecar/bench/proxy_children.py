"""The `zdict-sidecar proxy` processes `bench proxy` measures (sidecar/bench/proxy.py): each a
child process of the bench with its JSON log in a file, local ports for the brokers, its CPU
read from /proc and its Produce requests from its own /metrics; and the dictionary each is
given, trained beforehand by `zdict-sidecar train`."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from sidecar.bench.proxy_metrics import metrics_url, read_produce_requests
from sidecar.bench.storage import process_cpu
from sidecar.bench.workload import free_port
from sidecar.errors import InputError


def port_base(node_ids: Sequence[int]) -> int:
    """A `ZDICT_PROXY__BROKER_PORT_BASE` at which every node's port is free now."""
    for _ in range(100):
        base = free_port() - min(node_ids)
        if base < 1 or base + max(node_ids) > 65535:
            continue
        try:
            with contextlib.ExitStack() as stack:
                for node in node_ids:
                    sock = stack.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", base + node))
            return base
        except OSError:
            continue
    raise InputError(f"bench proxy: no free local ports for brokers {sorted(node_ids)}")


class ProxyChild:
    """`zdict-sidecar proxy` as a child process, its JSON log in a file."""

    def __init__(
        self,
        bootstrap: str,
        store: Path,
        topics: Sequence[str],
        log_path: Path,
        *,
        output_mode: str,
        node_ids: Sequence[int],
        variant: dict[str, str] | None = None,
        registry_topic: str | None = None,
    ) -> None:
        """`registry_topic`: the registry it reads (None: `--no-registry`, the store only)."""
        self.address = f"127.0.0.1:{free_port()}"
        self.log_path = log_path
        self._metrics_url: str | None = None
        env = {k: v for k, v in os.environ.items() if not k.startswith("ZDICT_")}
        env.update(
            {
                "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
                "ZDICT_LOG_FORMAT": "json",
                "ZDICT_CODEC__OUTPUT_MODE": output_mode,
                "ZDICT_PROXY__BROKER_PORT_BASE": str(port_base(node_ids)),
                # Its /metrics, read for the Produce requests: on this host only.
                "ZDICT_METRICS__HOST": "127.0.0.1",
                **(variant or {}),
            }
        )
        if registry_topic is not None:
            env["ZDICT_REGISTRY__TOPIC"] = registry_topic
        served = [arg for topic in topics for arg in ("--topic", topic)]
        registry = [] if registry_topic is not None else ["--no-registry"]
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sidecar", "proxy", "--listen", self.address,
                 *registry, "--no-training", "--dictionaries", str(store), *served,
                 "--metrics-port", "0"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            )  # fmt: skip

    def wait_for(self, text: str, timeout: float) -> str:
        """The first log line containing `text`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.log_path.read_text(errors="replace").splitlines():
                if text in line:
                    return line
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        tail = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-20:])
        raise InputError(f"bench proxy: the proxy logged no {text!r} in {timeout:.0f} s:\n{tail}")

    def cpu(self) -> float:
        """The proxy process's CPU seconds so far (its threads; a child is not counted)."""
        seconds = process_cpu(self.proc.pid)
        if seconds is None:
            raise InputError("bench proxy: cannot read the proxy's CPU time from /proc")
        return seconds

    def produce_requests(self) -> int:
        """Produce requests the proxy forwarded so far (its /metrics, at the URL it logged)."""
        if self._metrics_url is None:
            self._metrics_url = metrics_url(self.wait_for('"metrics_listening"', 10))
        return read_produce_requests(self._metrics_url)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def train(store: Path, sample: Path, namespace: str) -> None:
    trained = subprocess.run(
        [sys.executable, "-m", "sidecar", "train", "--input", str(sample),
         "--namespace", namespace, "--dictionaries", str(store)],
        capture_output=True, stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip
    if trained.returncode != 0:
        raise InputError(f"bench proxy: training failed: {trained.stderr.decode()[-2000:]}")


def variant_env(variant: str) -> dict[str, str]:
    """The environment variable of a variant, `NAME=VALUE`.

    Raises:
        InputError: not `NAME=VALUE`.
    """
    name, equals, value = variant.partition("=")
    if not equals or not name.isidentifier():
        raise InputError(f"bench proxy: variant {variant!r} is not NAME=VALUE (--variant)")
    return {name: value}


@contextlib.contextmanager
def proxies(
    bootstrap: str,
    tmp: Path,
    topics: dict[str, str],
    node_ids: Sequence[int],
    variants: Sequence[str] = (),
) -> Iterator[tuple[ProxyChild, ProxyChild, list[ProxyChild], str]]:
    """The measured proxy (output mode auto, on `topics["proxy"]`), the frames proxy (on
    `topics["frames"]`) and one proxy per variant (as the measured one, with the variant's
    environment variable: `NAME=VALUE`), started and ready; and the measured one's
    `dictionary_loaded` line."""
    started: list[ProxyChild] = []
    runs = [
        ("proxy", "proxy", "auto", {}),
        ("frames", "frames", "frames", {}),
        *((f"variant-{i}", "proxy", "auto", variant_env(v)) for i, v in enumerate(variants)),
    ]
    try:
        for name, topic, mode, env in runs:
            started.append(
                ProxyChild(
                    bootstrap,
                    tmp / "dictionaries",
                    [topics[topic]],
                    tmp / f"{name}.log",
                    output_mode=mode,
                    node_ids=node_ids,
                    variant=env,
                )
            )
        for proxy in started:
            proxy.wait_for('"proxy_listening"', 60)
        loaded = started[0].wait_for('"dictionary_loaded"', 10)
        for proxy in started[1:]:
            proxy.wait_for('"dictionary_loaded"', 10)
        yield started[0], started[1], started[2:], loaded
    finally:
        for proxy in started:
            proxy.stop()
