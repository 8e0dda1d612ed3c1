"""The output mode of a partition: per-record frames, or raw values that the producer's batch
compression compresses together.

Frames win while batches hold few records; raw values win once batches hold more records than
the dictionary's output crossover (`DictionaryMeta.raw_crossover`, measured at training). Given
that crossover and the partition's observed fill (records per batch, smoothed over statistics
windows), `next_mode` decides, with hysteresis so that a fill hovering near the crossover does
not make the output flap: raw above the crossover x `RAW_ABOVE`, frames again below the
crossover x `FRAMES_BELOW`, and frames whenever the crossover is unknown. A partition starts in
frames, its first fill deciding as any other: the crossover is measured on values before the
ones it decides for, and a stream drifts (the in-process producer at 4 a batch, crossover 3.7 on
the 256 values before, 5.0-6.2 on the next 512: raw stored 5-11 % more than frames, `bench
savings`), while just past the crossover raw saves next to nothing. Raw values carry no header
of ours: every decoder passes such records through unchanged.

Pure: no Kafka, no I/O. The relay (`relay.output_modes`) and the in-process producer
(`serde.output_modes`) feed it their producer's statistics, and the crossover measured on their
newest records (`live_crossover`).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import Final, Generic, Literal, TypeAlias, TypeVar

#: `frames`: per-record frames with our header; `raw`: the values as they came.
OutputMode: TypeAlias = Literal["frames", "raw"]
FRAMES: Final = "frames"
RAW: Final = "raw"
MODES: Final = (FRAMES, RAW)
#: Raw once the smoothed fill is above the crossover times this ...
RAW_ABOVE: Final = 1.1
#: ... and frames again once it is below the crossover times this. Narrow: stored bytes part
#: fast around the crossover (on real corpora frames store 2-15 % more than raw values at 1.25x
#: it), while a switch costs nothing but a log line; the smoothed fill keeps it from flapping.
FRAMES_BELOW: Final = 0.9
#: Weight of the newest statistics window in the smoothed fill (an exponential moving average):
#: a change of fill takes two or three windows to switch the mode.
SMOOTHING: Final = 0.5


def next_mode(current: OutputMode, crossover: float | None, fill: float) -> OutputMode:
    """The mode after `current` for a smoothed `fill` (records per batch) and the dictionary's
    `crossover` (None: unknown, or frames win at every fill: frames)."""
    if crossover is None:
        return FRAMES
    if current == FRAMES:
        return RAW if fill > crossover * RAW_ABOVE else FRAMES
    return FRAMES if fill < crossover * FRAMES_BELOW else RAW


def smoothed(previous: float | None, observed: float) -> float:
    """The fill smoothed with one more window's `observed` fill (`SMOOTHING`)."""
    if previous is None:
        return observed
    return previous + SMOOTHING * (observed - previous)


K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Switch(Generic[K]):
    """A partition changed mode: which, from what to what, at which fill and crossover."""

    key: K
    previous: OutputMode
    mode: OutputMode
    fill: float | None
    crossover: float | None


@dataclass(slots=True)
class _State:
    mode: OutputMode = FRAMES
    fill: float | None = None


class ModeTable(Generic[K]):
    """The mode of every partition (any hashable key: e.g. topic and partition) seen so far.

    `raw` is the set of the keys in raw mode, for the per-record path: a lookup, no call.
    """

    def __init__(self) -> None:
        self._states: dict[K, _State] = {}
        self.raw: set[K] = set()

    def mode(self, key: K) -> OutputMode:
        """The mode of `key` (frames until it is observed)."""
        state = self._states.get(key)
        return FRAMES if state is None else state.mode

    def fill(self, key: K) -> float | None:
        """The smoothed fill of `key` (None: never observed)."""
        state = self._states.get(key)
        return None if state is None else state.fill

    def known(self) -> Iterator[K]:
        """Every key observed so far."""
        return iter(list(self._states))

    def __contains__(self, key: object) -> bool:
        return key in self._states

    def observe(self, key: K, fill: float | None, crossover: float | None) -> Switch[K] | None:
        """One statistics window of `key`: its fill in that window (None: it sent no batch, the
        smoothed fill stays) and the current crossover. Returns the switch, if the mode
        changed."""
        state = self._states.setdefault(key, _State())
        if fill is not None:
            state.fill = smoothed(state.fill, fill)
        previous = state.mode
        if state.fill is None:
            state.mode = FRAMES
        else:
            state.mode = next_mode(previous, crossover, state.fill)
        if state.mode == previous:
            return None
        if state.mode == RAW:
            self.raw.add(key)
        else:
            self.raw.discard(key)
        return Switch(key, previous, state.mode, state.fill, crossover)
