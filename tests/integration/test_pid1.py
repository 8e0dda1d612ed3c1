"""The sidecar as a container's PID 1 (no init in the image): the kernel ignores a signal that PID 1
has no handler for, so a process that installs its handlers late ignores SIGTERM while it starts.

Each command is run as PID 1 of a new PID namespace (`unshare --pid --fork`, root only) against a
Kafka address nobody answers on, so its start waits; SIGTERM, sent from the parent namespace as
the container runtime sends it, must end it at once, exit 0.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.process import free_port


@pytest.fixture(autouse=True)
def _pid_namespaces() -> None:
    """A new PID namespace needs root and util-linux's unshare: without them the test fails (as
    a test without its broker does), it is not skipped."""
    assert os.geteuid() == 0, "tests/integration/test_pid1.py needs root for a PID namespace"
    assert shutil.which("unshare"), "tests/integration/test_pid1.py needs util-linux's unshare"


#: Seconds the start is given to reach its wait for the brokers before SIGTERM is sent.
SETTLE: float = 3.0
#: Seconds the process may take to exit after SIGTERM (the start's waits are sliced by seconds).
PROMPT: float = 3.0


def _child_of(pid: int, timeout: float = 10.0) -> int:
    """The process `unshare --fork` started (PID 1 in its namespace), by its pid out here."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.05)
    raise AssertionError("unshare started no child")


@pytest.mark.parametrize(
    "command",
    [
        ["run", "--input-topic", "orders"],
        ["proxy", "--listen", "127.0.0.1:0", "--topic", "o"],
    ],
    ids=["run", "proxy"],
)
def test_sigterm_stops_pid_1_at_once_while_it_waits_for_unreachable_brokers(
    tmp_path: Path, command: list[str]
) -> None:
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",  # nobody listens there
        "ZDICT_METRICS__PORT": "0",
        "ZDICT_DICTIONARIES": str(tmp_path / "dictionaries"),
    }
    log = tmp_path / "sidecar.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--", sys.executable, "-m", "sidecar", *command],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            child = _child_of(proc.pid)
            time.sleep(SETTLE)
            assert proc.poll() is None, f"exited before SIGTERM: {log.read_text()[-2000:]}"
            sent = time.monotonic()
            os.kill(child, signal.SIGTERM)
            code = proc.wait(timeout=60)
            waited = time.monotonic() - sent
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = log.read_text()
    assert waited < PROMPT, f"SIGTERM took {waited:.1f} s to stop PID 1:\n{text[-2000:]}"
    assert code == 0, text[-2000:]
    assert '"signal_received"' in text or "signal_received" in text
