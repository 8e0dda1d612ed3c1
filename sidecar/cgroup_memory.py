"""The container's memory for Prometheus: `CgroupMemory`, read from the process's memory cgroup.

`zdict_memory_limit_bytes` and `zdict_memory_working_set_bytes`, as the kubelet and the OOM
killer count them; `Metrics` registers the collector on the process's registry.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["CgroupMemory"]

#: A cgroup v1 memory limit at or above this is "no limit" (the kernel reports its maximum page
#: counter, about 2**63, rounded to pages).
_CGROUP_V1_UNLIMITED: Final = 2**62


class CgroupMemory(Collector):
    """`zdict_memory_limit_bytes` and `zdict_memory_working_set_bytes`, read from the process's
    memory cgroup at each scrape (v2, else v1); nothing where there is none.

    The working set is what the kubelet and the OOM killer judge: the cgroup's usage minus its
    inactive file pages (page cache the kernel reclaims first). It includes the training
    processes, which `process_resident_memory_bytes` does not. A container sees its own cgroup
    at the root of the mount (a private cgroup namespace) or at its path from /proc/self/cgroup.
    """

    def __init__(
        self,
        root: Path = Path("/sys/fs/cgroup"),
        proc_cgroup: Path = Path("/proc/self/cgroup"),
    ) -> None:
        self.root = root
        self.proc_cgroup = proc_cgroup

    def read(self) -> tuple[float, float] | None:
        """(limit in bytes, +Inf without one; working set in bytes), or None (no cgroup)."""
        try:
            lines = self.proc_cgroup.read_text().splitlines()
        except OSError:
            return None
        paths: dict[str, str] = {}
        for line in lines:
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else ["unified"]:
                paths[controller] = path.lstrip("/")
        try:
            if "unified" in paths and (
                found := self._directory("", paths["unified"], "memory.max")
            ):
                limit = found.joinpath("memory.max").read_text().strip()
                usage = int(found.joinpath("memory.current").read_text())
                inactive = _stat(found / "memory.stat", "inactive_file")
                return (math.inf if limit == "max" else float(limit)), max(0, usage - inactive)
            if "memory" in paths and (
                found := self._directory("memory", paths["memory"], "memory.limit_in_bytes")
            ):
                limit_bytes = int(found.joinpath("memory.limit_in_bytes").read_text())
                usage = int(found.joinpath("memory.usage_in_bytes").read_text())
                inactive = _stat(found / "memory.stat", "total_inactive_file")
                unlimited = limit_bytes >= _CGROUP_V1_UNLIMITED
                return (math.inf if unlimited else float(limit_bytes)), max(0, usage - inactive)
        except (OSError, ValueError):
            return None
        return None

    def _directory(self, mount: str, path: str, probe: str) -> Path | None:
        for candidate in (self.root / mount / path, self.root / mount):
            if (candidate / probe).is_file():
                return candidate
        return None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        read = self.read()
        if read is None:
            return
        limit, working_set = read
        yield GaugeMetricFamily(
            "zdict_memory_limit_bytes",
            "Memory limit of the process's cgroup (the container's), +Inf without one.",
            value=limit,
        )
        yield GaugeMetricFamily(
            "zdict_memory_working_set_bytes",
            "Memory in use in the process's cgroup minus inactive file pages (relay and "
            "training processes together), as the kubelet and the OOM killer count it.",
            value=float(working_set),
        )

    def describe(self) -> Iterator[GaugeMetricFamily]:
        # Without describe(), registering would call collect() to learn the names; the names do
        # not depend on the cgroup.
        return iter(())


def _stat(path: Path, key: str) -> int:
    """One field of a cgroup memory.stat file (0 when absent)."""
    for line in path.read_text().splitlines():
        name, _, number = line.partition(" ")
        if name == key:
            return int(number)
    return 0
