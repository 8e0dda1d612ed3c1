"""Brokers of the tests' own (``deploy/kafka/kafka-local --home``), apart from the session's
shared broker: to stop, restart, pause and resume."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient

from .broker import BOOTSTRAP_ENV

KAFKA_LOCAL = Path(__file__).resolve().parents[2] / "deploy" / "kafka" / "kafka-local"
#: A broker start or restart on the shared two cores takes 3-10 s; allow for a loaded machine.
KAFKA_LOCAL_TIMEOUT_S = 180.0


@dataclass
class PrivateBroker:
    """A broker of the tests' own (``kafka-local --home``): to stop, restart, pause and resume
    without disturbing the session's shared broker.

    `bootstrap` is the PLAINTEXT listener; `listeners` the extra ones by name (e.g.
    ``listeners["SECURE"]``). A restart (`start`) keeps the data and the ports, so clients
    configured with these addresses reconnect to the same broker.
    """

    name: str
    home: Path
    bootstrap: str
    listeners: dict[str, str]
    #: (what, seconds) of every start, restart and stop, as kafka-local timed them.
    timings: list[tuple[str, float]] = field(default_factory=list)

    @property
    def pid(self) -> int:
        """The broker's JVM process id (a new one after each restart)."""
        return int((self.home / "kafka.pid").read_text().strip())

    def _kafka_local(self, *args: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, str(KAFKA_LOCAL), "--home", str(self.home), *args],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=KAFKA_LOCAL_TIMEOUT_S,
            check=False,
        )
        assert result.returncode == 0, (
            f"kafka-local {' '.join(args)} for broker {self.name} failed:\n{result.stderr}\n"
            f"--- broker log ---\n{self.log_tail()}"
        )
        for what, seconds in re.findall(
            r"kafka-local: (start|restart|stop)\b[^:]*: ([0-9.]+)s", result.stderr
        ):
            self.timings.append((what, float(seconds)))
        return result

    def stop(self) -> float:
        """SIGTERM (the broker's graceful shutdown); its data and ports stay. Seconds taken."""
        started = time.monotonic()
        self._kafka_local("stop")
        return time.monotonic() - started

    def start(self) -> float:
        """Start it again on its data and ports (a restart, not a fresh broker). Seconds taken,
        until it serves."""
        started = time.monotonic()
        out = self._kafka_local("start", "--keep-data").stdout
        assert f"{BOOTSTRAP_ENV}={self.bootstrap}" in out, out
        return time.monotonic() - started

    def pause(self) -> None:
        """SIGSTOP: the process stays, its sockets stay open, nothing answers."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after `pause`."""
        os.kill(self.pid, signal.SIGCONT)

    def serving(self) -> bool:
        return (
            subprocess.run(
                [sys.executable, str(KAFKA_LOCAL), "--home", str(self.home), "status"],
                capture_output=True,
                stdin=subprocess.DEVNULL,
                timeout=60,
                check=False,
            ).returncode
            == 0
        )

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = (self.home / "broker.log").read_text(errors="replace")
        except FileNotFoundError:
            return "(no broker log)"
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        """Stop it for good (resumed first if paused); the data stays for post-mortems."""
        with_pid = (self.home / "kafka.pid").exists()
        if with_pid:
            with contextlib.suppress(ProcessLookupError, ValueError):
                self.resume()
        subprocess.run(
            [sys.executable, str(KAFKA_LOCAL), "--home", str(self.home), "stop"],
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=KAFKA_LOCAL_TIMEOUT_S,
            check=False,
        )


StartPrivateBroker = Callable[..., PrivateBroker]
"""``private_broker(name, listeners=(), properties=None) -> PrivateBroker``"""
