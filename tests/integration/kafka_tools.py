"""Kafka's own command-line tools (`kafka-local tools`: the Java clients of the jars the local
broker runs from), run to their end."""

from __future__ import annotations

import subprocess
import sys

from .private_broker import KAFKA_LOCAL

#: Seconds a tool may run, its JVM's start included.
TOOL_TIMEOUT_S = 120.0
#: Milliseconds the console consumer waits for a record before it gives up.
CONSUMER_TIMEOUT_MS = 60_000


def kafka_tool(*args: str, stdin: str | None = None) -> str:
    """Run a Kafka CLI tool (`kafka-local tools ARGS`) to its end; its stdout."""
    done = subprocess.run(
        [sys.executable, str(KAFKA_LOCAL), "tools", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TOOL_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def console_consumer(
    bootstrap: str, topic: str, count: int, group: str, partition: bool = False
) -> list[str]:
    """Kafka's Java console consumer in consumer group `group`, from the beginning of `topic`,
    until it has read `count` records: its lines, each `CreateTime:<ms>`, the partition
    (`Partition:<n>`, with `partition`), the headers (`k:v,k:v`), the key and the value, tab
    separated."""
    printed = ["print.timestamp=true", "print.headers=true", "print.key=true"]
    if partition:
        printed.append("print.partition=true")
    out = kafka_tool(
        "console-consumer",
        *("--bootstrap-server", bootstrap, "--topic", topic, "--group", group),
        *("--from-beginning", "--max-messages", str(count)),
        *("--timeout-ms", str(CONSUMER_TIMEOUT_MS)),
        *(arg for prop in printed for arg in ("--formatter-property", prop)),
    )
    return out.splitlines()
