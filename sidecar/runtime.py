"""Process-level tuning shared by the relay and the benchmarks."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

#: Allocations between two young-generation collections while tuned (CPython's default is 700).
GC_GEN0_THRESHOLD: Final = 50_000


@contextmanager
def tune_gc(gen0: int = GC_GEN0_THRESHOLD) -> Iterator[None]:
    """Collect garbage less often inside a hot loop, and never re-scan long-lived objects.

    Encoding allocates a few short-lived containers per record (header lists, result tuples);
    with CPython's default threshold the cyclic collector runs every ~700 of them and was measured
    to take about a third of the per-record time on 100-byte messages (`zdict-sidecar bench
    codec`). Objects that exist before the loop are frozen out of collection (as Instagram does
    for its web workers); reference counting still frees everything that is not a cycle.
    """
    previous = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(gen0, previous[1], previous[2])
    try:
        yield
    finally:
        gc.set_threshold(*previous)
        gc.unfreeze()
