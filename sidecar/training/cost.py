"""The encode cost model: the CPU time one message takes to encode, from its level and size.

The CPU budget of a training run (`TrainingParams.budget_ns`) is judged on this estimate, not on
timings taken while training. A timing moves with the machine's load (the relay beside it,
another tenant, the hypervisor), and on a shared machine levels 6 to 12 on ~70-byte messages
time within a few per cent of the default budget: timed, the pick would change from one run to
the next. Estimated, the same sample gives the same pick on every run, every load and every
host the trainer role moves to.

How it was measured: the relay's encoder path (`Encoder.encode_batch`, one thread, CPU time,
the fastest of 5 runs after a warm-up) on 11 corpora of `bench choice` (29 B to 8 KB a message),
with 16 and 112 KiB dictionaries, the slower of the two; one Xeon core of the development VM.
A fixed cost per message (1.15 µs up to level 5, 2 µs above: the costlier match finders' setup)
plus a cost per byte fitted by relative least squares, kept non-decreasing with the level. The
estimate is within 0.7-1.3x of the measurement for levels up to 12 on those corpora, 0.4-1.5x
above; it is an estimate of the reference machine, not of the host.

Pure: numbers in, numbers out.
"""

from __future__ import annotations

from typing import Final

#: Per measured level: (ns per message, ns per byte).
_MEASURED: Final[dict[int, tuple[float, float]]] = {
    -7: (1150.0, 2.4),
    -3: (1150.0, 2.8),
    -1: (1150.0, 3.2),
    1: (1150.0, 3.4),
    2: (1150.0, 3.8),
    3: (1150.0, 4.4),
    4: (1150.0, 5.0),
    5: (1150.0, 9.6),
    6: (2000.0, 15.2),
    7: (2000.0, 18.5),
    8: (2000.0, 21.5),
    9: (2000.0, 26.1),
    10: (2000.0, 32.6),
    11: (2000.0, 35.3),
    12: (2000.0, 37.5),
    13: (2000.0, 54.7),
    15: (2000.0, 93.8),
    17: (2000.0, 154.7),
    19: (2000.0, 154.7),
    22: (2000.0, 155.1),
}
_LEVELS: Final = sorted(_MEASURED)
#: zstd's level 0 is its default level.
_DEFAULT_LEVEL: Final = 3


def encode_cost_ns(level: int, mean_bytes: float) -> float:
    """Estimated CPU ns to encode one message of `mean_bytes` at `level` with a dictionary.

    A level between two measured ones costs what the next slower one does; one past either end
    of the table, what the end does.
    """
    if level == 0:
        level = _DEFAULT_LEVEL
    slower = next((m for m in _LEVELS if m >= level), _LEVELS[-1])
    per_message, per_byte = _MEASURED[slower]
    return per_message + per_byte * max(0.0, mean_bytes)
