"""The output crossover measured on the stream as it is now: the relay's and the in-process
producer's output mode rule (`codec.output_mode`) reads it in place of the crossover measured at
training.

Training measures the crossover on held-out values of its sample (`training.crossover`); the
stream's later values drift away from them, and the dictionary ages: on the real corpora of this
machine the crossover of the values after the sample is up to half the trained one (dpkg's log:
5.7 trained, 3.7 to 2.7 over the next 2,048 lines), and frames then store 8 % more than raw values
at fill 4 (tests/unit/test_crossover.py). So the crossover is measured again, on the stream's
newest records: the sample the stored-bytes estimate keeps anyway (`stored_estimate.
ProducerBatches`: runs of consecutive records, the latest `SAMPLE_RECORDS`) encoded with the
active dictionary as the encoder uses it (level, minimum size, wire format; a scratch encoder, so
no metric moves) and compared with its raw values at every fill (`training.crossover.
raw_crossovers`). It is measured again only when the sample or the dictionary changed, at most
once per `MEASURE_INTERVAL` seconds (sooner while the sample is small and doubled since): about
1,024 values encoded and twenty batches compressed, from a few milliseconds (log lines) to 0.2 s
(JSON documents of ~840 B), on the thread that reads the producer's statistics. Measured at
every statistics window of 100 ms instead, that thread (the application's `poll()`) did little
else, and the in-process producer's batches of 512 records held 4 (`bench savings`,
apt-packages-json: 1.59x producer zstd).

A young stream's sample is small: with `MIN_FEW` values or more, but fewer than `MIN_RECORDS`
(and `MIN_BYTES`), the crossover is measured only at the fills of which the sample holds
`MIN_BATCHES` batches or more. A crossing found there stands (raw values won on several batches
of that fill); none found says frames win up to the largest fill measured, and the trained
crossover stands but not below it. So a dictionary trained on a few dozen documents, whose
held-out values were too few to show the crossing, does not keep frames where raw values store
half as much (bench savings: npm's package.json files, 92 trained on, frames at fill 32 were
2.3x producer zstd).

The proxy (`proxy.batch_choice`) reads it per Produce request, on a sample of its own
(`RecentValues`: the latest values it forwarded).

Pure: no Kafka, no I/O.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from sidecar.batch_compression import CODEC_IDS
from sidecar.codec.encoder import Encoder
from sidecar.stored_estimate import SAMPLE_RECORDS, Sampled, batch_compressor
from sidecar.training.crossover import CROSSOVER_FILLS, raw_crossovers

__all__ = [
    "MEASURE_INTERVAL",
    "MIN_BATCHES",
    "MIN_BYTES",
    "MIN_FEW",
    "MIN_RECORDS",
    "LiveCrossover",
    "RecentValues",
]

#: Sampled records from which the live measurement is taken at every fill the sample holds: two
#: runs of consecutive records (`stored_estimate.SAMPLE_RUN`), batches up to 128 measured twice
#: ...
MIN_RECORDS: Final = 256
#: ... or fewer records of this many value bytes (kilobyte documents: a few dozen tell frames
#: from raw values at every fill they reach) ...
MIN_BYTES: Final = 64 * 1024
#: ... and from this many records, at the fills of which the sample holds `MIN_BATCHES` batches.
MIN_FEW: Final = 8
#: Batches of one fill a small sample must hold for that fill to be measured: one batch's luck
#: is not the stream's crossover.
MIN_BATCHES: Final = 4
#: Seconds a measurement stands while the sample changes (see the module).
MEASURE_INTERVAL: Final = 5.0


class Sample(Protocol):
    """What the crossover is measured on: the stream's newest records, and how many were added
    so far (tells whether it changed)."""

    @property
    def added(self) -> int: ...

    def records(self) -> list[Sampled]: ...


class RecentValues:
    """The latest values of one topic as the proxy forwarded them (the proxy counts stored bytes
    exactly and keeps no `ProducerBatches`): one deque append per partition of a request."""

    __slots__ = ("_keep", "_values", "added")

    def __init__(self, keep: int = SAMPLE_RECORDS) -> None:
        self._keep = keep
        self._values: deque[bytes | None] = deque(maxlen=keep)
        self.added = 0

    def extend(self, values: Sequence[bytes | None]) -> None:
        """The values of one partition of a request, in order."""
        self._values.extend(values[-self._keep :] if len(values) > self._keep else values)
        self.added += len(values)

    def records(self) -> list[Sampled]:
        """The latest values, oldest first, as records without key or headers."""
        return [(None, v, ()) for v in self._values]


@dataclass(frozen=True, slots=True)
class _Measured:
    """One measurement: of which sample and encoder, when, and whether the sample was full."""

    added: int
    encoder: Encoder
    codec: str
    at: float
    full: bool
    crossover: float | None


class LiveCrossover:
    """The crossover of one stream for a batch codec, measured on its newest sampled records
    with the dictionary that encodes them now, or none (see the module). Called as the output
    mode's crossover: `live(codec)`. Not thread-safe: read by the one thread that reads
    statistics, or the proxy's event loop."""

    def __init__(
        self,
        sample: Callable[[], Sample | None],
        encoder: Callable[[], Encoder],
        trained: Callable[[str], float | None],
        *,
        level: int | None = None,
        raw_level: int | None = None,
        interval: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`sample`: the stream's sample (None: none yet); `encoder`: the encoder that encodes
        the stream now; `trained`: the crossover its dictionary was stored with, per codec;
        `level`: the zstd level the producer compresses its batches at (None: its default);
        `raw_level`: the level raw values' batches are stored at, where not `level` (the
        proxy's: a client's batch passed as it came keeps the client's level);
        `interval`: seconds a measurement stands while the sample changes (0: measured again
        at every change), but for a small sample that doubled since."""
        self._level = level
        self._raw_level = raw_level
        self._sample = sample
        self._encoder = encoder
        self._trained = trained
        self._interval = interval
        self._clock = clock
        #: The scratch encoder of the active one (same dictionary, level, minimum size, wire).
        self._scratch: tuple[Encoder, Encoder] | None = None
        self._last: _Measured | None = None

    def __call__(self, codec: str) -> float | None:
        encoder = self._encoder()
        sample = self._sample()
        # Without a dictionary too: values compressed on their own (`zd: 0`) lose to the batch
        # codec from a few records a batch (bench savings: 3x at fill 128 on maven's POMs).
        if sample is None or codec not in CODEC_IDS:
            return self._trained(codec)
        added = sample.added
        last = self._last
        if last is not None and self._stands(last, encoder, codec, added):
            return last.crossover
        measured, full = self._measure(sample, encoder, codec)
        self._last = _Measured(added, encoder, codec, self._clock(), full, measured)
        return measured

    def _stands(self, last: _Measured, encoder: Encoder, codec: str, added: int) -> bool:
        """Whether the `last` measurement stands for the sample at `added` records."""
        if last.encoder is not encoder or last.codec != codec:
            return False
        if last.added == added:
            return True
        recent = self._clock() - last.at < self._interval
        return recent and (last.full or added < 2 * last.added)

    def _measure(self, sample: Sample, encoder: Encoder, codec: str) -> tuple[float | None, bool]:
        """(the crossover of `sample`, whether it was measured at every fill it holds)."""
        # Values only, on both sides: the producer's own headers are the same in either mode.
        values = [v for _, v, _ in sample.records() if v is not None]
        compress = batch_compressor(codec, self._level)
        count = len(values)
        full = count >= MIN_RECORDS or (count >= MIN_FEW and sum(map(len, values)) >= MIN_BYTES)
        if compress is None or count < MIN_FEW:
            return self._trained(codec), False
        fills = (
            CROSSOVER_FILLS if full else [f for f in CROSSOVER_FILLS if f * MIN_BATCHES <= count]
        )
        frames = self._scratch_of(encoder).encode_batch([(v, None) for v in values])
        raw = batch_compressor(codec, self._raw_level) if self._raw_level is not None else None
        measured = raw_crossovers(
            values,
            [(e.value or b"", e.headers or ()) for e in frames],
            {codec: compress},
            fills,
            {codec: raw} if raw is not None else None,
        )[codec]
        if full or measured is not None:
            return measured, full
        # Frames won at every fill measured: the trained crossover, but not below those fills.
        trained = self._trained(codec)
        return (None if trained is None else max(trained, float(fills[-1]))), False

    def _scratch_of(self, encoder: Encoder) -> Encoder:
        """An encoder like `encoder` whose statistics nobody reads."""
        if self._scratch is None or self._scratch[0] is not encoder:
            scratch = Encoder(
                encoder.dictionary,
                level=encoder.level,
                min_size=encoder.min_size,
                header_key=encoder.header_key,
                frame=encoder.frame,
                wire=encoder.wire,
            )
            self._scratch = (encoder, scratch)
        return self._scratch[1]
