"""The sidecar as a real process: `python -m sidecar ...`, its log and its HTTP endpoint."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any


def free_port() -> int:
    """A loopback TCP port nobody listens on (just released by the kernel)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@dataclass
class Sidecar:
    """One `python -m sidecar ...` process; stdout and stderr go to `log_path`."""

    name: str
    command: list[str]
    log_path: Path
    metrics_port: int | None
    proc: subprocess.Popen[bytes]
    started: float
    _log_file: IO[bytes] = field(repr=False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        return self.proc.poll() is None

    def terminate(self) -> None:
        """SIGTERM: the graceful stop."""
        self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL (kill -9): no cleanup at all."""
        self.proc.send_signal(signal.SIGKILL)

    def wait(self, timeout: float = 60.0) -> int:
        """The exit code (negative: killed by that signal); fails if still running after timeout."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(
                f"{self.name} still running {timeout:.0f} s later; killed. Log tail:\n{self.tail()}"
            ) from None

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, then wait for the exit code."""
        self.terminate()
        return self.wait(timeout)

    def close(self) -> None:
        if self.running():
            self.proc.kill()
            self.proc.wait(10)
        self._log_file.close()

    # -- the log -------------------------------------------------------------------------------

    def log_text(self) -> str:
        self._log_file.flush()
        return self.log_path.read_bytes().decode("utf-8", errors="replace")

    def log_lines(self) -> list[dict[str, Any]]:
        """Every line, parsed as JSON; a line that is not JSON becomes ``{"raw": line}``."""
        out: list[dict[str, Any]] = []
        for line in self.log_text().splitlines():
            if not line.strip():
                continue
            try:
                parsed = json.loads(line)
            except ValueError:
                parsed = None
            out.append(parsed if isinstance(parsed, dict) else {"raw": line})
        return out

    def events(self, name: str) -> list[dict[str, Any]]:
        return [line for line in self.log_lines() if line.get("event") == name]

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def wait_for_event(
        self,
        name: str,
        timeout: float = 30.0,
        where: Callable[[dict[str, Any]], bool] = lambda _e: True,
    ) -> dict[str, Any]:
        """The first logged `name` event matching `where`; fails on timeout or early exit."""
        deadline = time.monotonic() + timeout
        while True:
            found = [e for e in self.events(name) if where(e)]
            if found:
                return found[0]
            if not self.running():
                raise AssertionError(
                    f"{self.name} exited ({self.proc.returncode}) before logging {name}:\n"
                    f"{self.tail()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} logged no {name} in {timeout:.0f} s")
            time.sleep(0.05)

    def assignment(self) -> set[str]:
        """Input partitions held now, replayed from partitions_assigned/revoked/lost lines."""
        held: set[str] = set()
        for line in self.log_lines():
            event = line.get("event")
            if event == "partitions_assigned":
                held |= set(line["partitions"])
            elif event in ("partitions_revoked", "partitions_lost"):
                held -= set(line["partitions"])
        return held

    # -- the observability endpoint ------------------------------------------------------------

    def http_get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        assert self.metrics_port is not None, "started without a metrics port"
        url = f"http://127.0.0.1:{self.metrics_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return int(response.status), bytes(response.read())
        except urllib.error.HTTPError as exc:
            return int(exc.code), bytes(exc.read())

    def metrics(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        """One scrape of /metrics: sample (name, labels) → value."""
        from prometheus_client.parser import text_string_to_metric_families

        status, body = self.http_get("/metrics")
        assert status == 200, f"/metrics answered {status}"
        return {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(body.decode())
            for sample in family.samples
        }
