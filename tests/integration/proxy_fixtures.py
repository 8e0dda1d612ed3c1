"""What the proxy's issue-37 modules set up alike: a registry of the module's own (its topic
created before a proxy starts, as a deployment has it) and the sidecar starter, whose processes
are killed when the module's fixture ends."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from .launch import SidecarEnv, StartSidecar, environment_for, start_sidecars


def registry_env(kafka_bootstrap: str, kafka_admin: AdminClient) -> SidecarEnv:
    """The sidecars' environment, with a registry topic of its own, created."""
    env = environment_for(kafka_bootstrap, f"_zdict_dictionaries-{uuid.uuid4().hex}")
    registry = env()["ZDICT_REGISTRY__TOPIC"]
    futures = kafka_admin.create_topics([NewTopic(registry, 1, 1)], operation_timeout=30)
    futures[registry].result(timeout=35)
    return env


@contextlib.contextmanager
def sidecars(env: SidecarEnv, directory: Path) -> Iterator[StartSidecar]:
    """The sidecar starter (processes in `directory`); every process it started still running
    is killed on leaving."""
    starter = start_sidecars(env, directory)
    try:
        yield next(starter)
    finally:
        next(starter, None)
