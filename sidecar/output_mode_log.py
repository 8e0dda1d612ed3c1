"""The `output_mode_changed` log line of a partition switching between frames and raw, as the
relay (`relay.output_modes`) and the in-process producer (`serde.output_modes`) write it.

Beside the pure decision (`codec.output_mode`, no logging there): both feed a `ModeTable` and
log each `Switch` it returns here, so the line's keys are written once.
"""

from __future__ import annotations

import structlog

from sidecar.codec.output_mode import Switch

__all__ = ["log_switch"]


def log_switch(
    log: structlog.stdlib.BoundLogger, switch: Switch[tuple[str, int]], codec: str
) -> None:
    """Log `switch` (key: topic and partition, -1 for a whole topic) on the caller's `log`, with
    the producer's batch `codec` whose crossover applied."""
    topic, partition = switch.key
    log.info(
        "output_mode_changed",
        topic=topic,
        partition=partition,
        mode=switch.mode,
        previous=switch.previous,
        fill=None if switch.fill is None else round(switch.fill, 1),
        crossover=switch.crossover,
        codec=codec,
    )
