"""Starting sidecar processes: their environment, the CLI run to completion, the factory."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from .broker import BOOTSTRAP_ENV
from .process import Sidecar, free_port

StartSidecar = Callable[..., Sidecar]
"""``sidecar(*cli_args, env=None, bootstrap=None, metrics_port=None, name=None) -> Sidecar``"""
SidecarEnv = Callable[..., dict[str, str]]
"""``sidecar_env(env=None, bootstrap=None) -> dict[str, str]``"""
RunCli = Callable[..., subprocess.CompletedProcess[bytes]]
"""``cli(*args, env=None, timeout=120) -> CompletedProcess`` (stdout and stderr captured)"""


def environment_for(kafka_bootstrap: str, registry_topic: str) -> SidecarEnv:
    """Factory: the environment of a sidecar process.

    This process's environment without any ``ZDICT_*`` variable, plus KAFKA_BOOTSTRAP_SERVERS
    (`bootstrap`, default the test broker), ``ZDICT_LOG_FORMAT=json``, the metrics endpoint on
    127.0.0.1, ``ZDICT_REGISTRY__TOPIC`` = `registry_topic`, ``ZDICT_CODEC__OUTPUT_MODE=frames``,
    and `env` on top (a None value removes a variable).

    Output mode `frames`: the tests check what the codec writes record by record, and a relay
    reading a backlog at full speed fills its batches, which `auto` (the default) writes raw;
    the tests of `auto` set it (test_output_mode, test_monitoring).
    """

    def build(
        env: Mapping[str, str | None] | None = None, bootstrap: str | None = None
    ) -> dict[str, str]:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("ZDICT_")}
        full_env.update(
            {
                BOOTSTRAP_ENV: bootstrap or kafka_bootstrap,
                "ZDICT_LOG_FORMAT": "json",
                "ZDICT_METRICS__HOST": "127.0.0.1",
                "ZDICT_REGISTRY__TOPIC": registry_topic,
                "ZDICT_CODEC__OUTPUT_MODE": "frames",
            }
        )
        for key, value in (env or {}).items():
            if value is None:
                full_env.pop(key, None)
            else:
                full_env[key] = value
        return full_env

    return build


def start_sidecars(sidecar_env: SidecarEnv, tmp_path: Path) -> Iterator[StartSidecar]:
    """The `sidecar` factory (processes in `tmp_path`, environment from `sidecar_env`), as the
    fixtures yield it; resumed after the test, it kills every process it started still running."""
    started: list[Sidecar] = []

    def start(
        *cli_args: str,
        env: Mapping[str, str | None] | None = None,
        bootstrap: str | None = None,
        metrics_port: int | None = None,
        name: str | None = None,
    ) -> Sidecar:
        args = list(cli_args)
        port = metrics_port
        if args and args[0] == "run" and "--metrics-port" not in args:
            port = free_port() if port is None else port
            args += ["--metrics-port", str(port)]
        label = name or f"sidecar-{len(started) + 1}"
        log_path = tmp_path / f"{label}.log"
        log_file = log_path.open("wb")
        command = [sys.executable, "-m", "sidecar", *args]
        proc = subprocess.Popen(
            command,
            env=sidecar_env(env, bootstrap),
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        process = Sidecar(label, command, log_path, port, proc, time.monotonic(), log_file)
        started.append(process)
        return process

    yield start

    for process in started:
        process.close()
