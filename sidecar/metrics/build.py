"""What the process runs on: the build's versions (`zdict_build_info`), the standard process
metrics and the container's memory (`register_build_and_process`)."""

from __future__ import annotations

import platform

from prometheus_client import CollectorRegistry, Info, ProcessCollector

from sidecar import __version__
from sidecar.cgroup_memory import CgroupMemory

__all__ = ["build_info", "register_build_and_process"]


def build_info() -> dict[str, str]:
    """Versions of this process and of the native libraries it runs on (zdict_build labels)."""
    info = {
        "version": __version__,
        "python": platform.python_version(),
        "zstandard": "unknown",
        "libzstd": "unknown",
        "confluent_kafka": "unknown",
        "librdkafka": "unknown",
    }
    try:
        import zstandard

        info["zstandard"] = str(zstandard.__version__)
        info["libzstd"] = ".".join(str(part) for part in zstandard.ZSTD_VERSION)
    except ImportError:  # pragma: no cover - a dependency
        pass
    try:
        import confluent_kafka

        info["confluent_kafka"] = str(confluent_kafka.version()[0])
        info["librdkafka"] = str(confluent_kafka.libversion()[0])
    except ImportError:  # pragma: no cover - a dependency
        pass
    return info


def register_build_and_process(registry: CollectorRegistry, memory: CgroupMemory) -> Info:
    """Register `zdict_build_info` (set from `build_info`), the process collector and `memory`
    in `registry`; returns the build's Info."""
    build = Info("zdict_build", "Versions of zdict-sidecar and its libraries.", registry=registry)
    build.info(build_info())
    # The process's own registry has no default collectors; restarts (a failed delivery exits
    # the relay) are only visible through process_start_time_seconds.
    ProcessCollector(registry=registry)
    registry.register(memory)
    return build
