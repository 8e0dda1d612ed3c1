"""A Kafka cluster of the tests' own (``deploy/kafka/kafka-local --home DIR start --brokers N``),
apart from the session's single broker: to stop and start its brokers one at a time."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient

from .broker import BOOTSTRAP_ENV
from .private_broker import KAFKA_LOCAL, KAFKA_LOCAL_TIMEOUT_S


@dataclass
class LocalCluster:
    """N brokers (node ids 1..N) of one KRaft cluster, kept in `home`.

    `bootstrap` is every broker's PLAINTEXT address, comma-separated; `addresses` each node's.
    A broker stopped and started again keeps its data and its ports.
    """

    home: Path
    bootstrap: str = ""
    addresses: dict[int, str] = field(default_factory=dict)
    #: (what, seconds) of every kafka-local call, timed here (until it returned).
    timings: list[tuple[str, float]] = field(default_factory=list)

    def _kafka_local(self, *args: str) -> subprocess.CompletedProcess[str]:
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, str(KAFKA_LOCAL), "--home", str(self.home), *args],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=KAFKA_LOCAL_TIMEOUT_S,
            check=False,
        )
        self.timings.append((" ".join(args), time.monotonic() - started))
        return result

    def _checked(self, *args: str) -> subprocess.CompletedProcess[str]:
        result = self._kafka_local(*args)
        assert result.returncode == 0, (
            f"kafka-local {' '.join(args)} failed:\n{result.stderr}\n{self.log_tails()}"
        )
        return result

    def start(self, brokers: int) -> None:
        """Start a fresh cluster of `brokers` and wait until every broker serves."""
        out = self._checked("start", "--brokers", str(brokers)).stdout
        found = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        self.bootstrap = found[BOOTSTRAP_ENV]
        self.addresses = dict(enumerate(self.bootstrap.split(","), start=1))

    def stop_broker(self, node_id: int, kill: bool = False) -> None:
        """Stop one broker: SIGTERM (its controlled shutdown), or SIGKILL if `kill`."""
        self._checked("stop-broker", str(node_id), *(["--kill"] if kill else []))

    def start_broker(self, node_id: int) -> None:
        """Start one broker again on its data and ports; returns once it serves."""
        out = self._checked("start-broker", str(node_id)).stdout
        assert out.strip() == self.addresses[node_id], out

    def states(self) -> dict[int, str]:
        """Node id -> ``serving``, ``stopped`` or ``not`` (answering), from `kafka-local status`."""
        out = self._kafka_local("status").stdout
        states: dict[int, str] = {}
        for line in out.splitlines():
            match = re.match(r"node-(\d+) \S+ (\w+)", line)
            if match:
                states[int(match.group(1))] = match.group(2)
        return states

    def stop(self) -> None:
        """Stop every broker (a no-op for those already stopped); the data stays."""
        self._kafka_local("stop")

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def log_tails(self, lines: int = 15) -> str:
        tails = []
        for log in sorted(self.home.glob("node-*/broker.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            tails.append(f"--- {log} ---\n" + "\n".join(text))
        return "\n".join(tails) or "(no broker logs)"
