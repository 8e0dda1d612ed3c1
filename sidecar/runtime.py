"""Process-level settings shared by the relay, the proxy and the benchmarks: signals during the
start, the garbage collector in the hot loop."""

from __future__ import annotations

import gc
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, Final

from sidecar.errors import ConfigError, Interrupted, ZdictError
from sidecar.logs import get_logger

log = get_logger(__name__)

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


def interrupt_start() -> None:
    """Until the process replaces them with its graceful stop, SIGTERM and SIGINT end its start
    at once (`Interrupted`, exit 0).

    As a container's PID 1 (no init in the image) the kernel ignores a signal the process has no
    handler for, so handlers installed only once the start is over left SIGTERM unheard for as
    long as the start waited for unreachable brokers. The start's waits are sliced into calls of
    a second or less, between which the handler runs.
    """

    def interrupt(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        log.info("signal_received", signal=name, phase="start")
        raise Interrupted(f"{name} during the start")

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)


def exit_code(work: Callable[[], int], logger: Any, *, failed: str, stopped: str) -> int:
    """The exit code of a long-running process's `work`: its own; 0 when a signal ended the start
    (`interrupt_start`), logged as event `stopped`; 1 for an expected failure, logged as event
    `failed` with its message. A configuration error propagates (the CLI exits 2); anything
    else is a bug and propagates too."""
    try:
        return work()
    except Interrupted:
        logger.info(stopped, before="start")
        return 0
    except ConfigError:
        raise
    except ZdictError as exc:
        logger.error(failed, error=str(exc))
        return 1
