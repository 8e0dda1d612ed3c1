"""The local broker's data directories, where the tests read what it stores (its log segments,
as `bench storage` reads them)."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import (  # type: ignore[attr-defined]  # public, but not in __all__
    AdminClient,
    ConfigResource,
)


def log_dirs(admin: AdminClient) -> list[Path]:
    """The broker's data directories, as it reports them (`log.dirs`, else `log.dir`)."""
    broker = next(iter(admin.list_topics(timeout=10).brokers))
    resource = ConfigResource(ConfigResource.Type.BROKER, str(broker))
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    entry = configs.get("log.dirs") or configs["log.dir"]
    assert entry.value, "the broker reports no log.dirs"
    dirs = [Path(d) for d in str(entry.value).split(",")]
    assert all(d.is_dir() for d in dirs), f"{dirs}: the broker is not on this machine"
    return dirs
