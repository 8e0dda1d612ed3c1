"""What a topic's records would have stored without the sidecar, estimated where it is not seen:
the relay and the in-process producer (`ProducerBatches`; the proxy counts it exactly).

The counterfactual is the producer's own record batches, with its own batch codec (zstd as
librdkafka writes it, byte for byte: `record_batch.producer_zstd`), at the fill the sidecar's
batches had. The sidecar keeps a sample of the records as the producer would have written them
(key, raw value, the producer's headers): runs of `SAMPLE_RUN` consecutive records, one run in
`every`, where `every` follows the traffic so that a statistics window samples about
`WINDOW_RECORDS` records (all of them up to that: ~800 records/s at 5 s windows). For each
statistics window (the batches and records librdkafka reports the sidecar's producer sent), the
sampled records the window's records stand for are taken in the order written (the oldest not
taken yet: the producer sends records in that order, a linger later), cut into batches of the
window's mean fill, each batch's records framed as Kafka frames them (`record_batch`) and
compressed with the producer's codec, and the window's estimate is its batches' 61-byte headers
plus its records times the sample's bytes per record. With every record sampled it is the
producer's batches byte for byte, bar batch boundaries. A window with too few sampled records
left for one batch takes the latest `SAMPLE_RECORDS` instead.

What it leaves out: timestamp deltas (taken as 0, one byte a record; a real batch's are a byte
or two), and which partition each record went to (a run is consecutive in the order written,
across partitions). The error against the broker's log segments is measured by
tests/integration/test_saving.py (deploy/README.md, "Metrics").

Pure: no Kafka, no I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Final

from sidecar.batch_compression import CODEC_IDS, Compression
from sidecar.record_batch import Compress, producer_zstd
from sidecar.wire.record_batch import BATCH_HEADER_BYTES, Header, record_bytes

__all__ = [
    "SAMPLE_RECORDS",
    "SAMPLE_RUN",
    "WINDOW_RECORDS",
    "ProducerBatches",
    "batch_compressor",
    "stride",
]

#: The sample takes runs of this many consecutive records (a batch's records are consecutive:
#: records written close together are alike, which the batch codec finds, and a sample of
#: records far apart would not show) ...
SAMPLE_RUN: Final = 128
#: ... one run in `every`, set each window for about this many sampled records in the next:
#: framing and compressing them once per statistics window (5 s) costs about 10 ms. Every record
#: of a slow stream, so that a short run's estimate is about exact (a sample of 1 in 8 was 1.1 %
#: off over 4,096 events, a third of a 3 % saving).
WINDOW_RECORDS: Final = 4096
#: Sampled records waiting for the window that sends them: at most this many windows' worth.
PENDING_WINDOWS: Final = 4
#: The latest sampled records kept across windows (8 runs): the estimate of a window that
#: sampled too few, and the live crossover (`live_crossover`).
SAMPLE_RECORDS: Final = 1024

#: A sampled record: key, value, headers, as the producer would have written it.
Sampled = tuple[bytes | None, bytes | None, Sequence[Header]]


def batch_compressor(codec: str, level: int | None = None) -> Compress | None:
    """The records-section compressor of a producer's `compression.type` `codec` (none: None;
    zstd: librdkafka's byte for byte, `record_batch.producer_zstd`, at `level`, default its
    default).

    Raises:
        ValueError: a codec Kafka does not know.
    """
    if codec not in CODEC_IDS:
        raise ValueError(f"unknown batch codec {codec!r}: use one of {sorted(CODEC_IDS)}")
    if codec == "none":
        return None
    if codec == "zstd":
        return producer_zstd() if level is None else producer_zstd(level)
    code, compression = CODEC_IDS[codec], Compression()
    return lambda data: compression.compress(code, data)


def stride(offered: int, window: int = WINDOW_RECORDS) -> int:
    """One run in this many samples about `window` of `offered` records a window."""
    return max(1, -(-offered // window))


class ProducerBatches:
    """The sample of one topic's records, and the estimate of what the producer's own batches
    of them store (see the module). Not thread-safe: fed and read by one thread at a time."""

    def __init__(
        self,
        compress: Compress | None,
        every: int = 1,
        keep: int = SAMPLE_RECORDS,
        run: int = SAMPLE_RUN,
        window: int = WINDOW_RECORDS,
    ) -> None:
        """`every`: one run in this many until the first estimate (then as the traffic says);
        `keep`: the latest records kept across windows; `window`: the sampled records a
        window aims at."""
        if min(every, keep, run, window) < 1:
            raise ValueError(
                f"every, keep, run and window must be at least 1, got {every}, {keep}, {run}, "
                f"{window}"
            )
        self.compress = compress
        self.run = run
        self.every = every
        self.cycle = run * every
        self._window_records = window
        self._sample: deque[Sampled] = deque(maxlen=keep)
        #: The sampled records no estimate took yet, oldest first (bounded: a producer that
        #: sends nothing for a while loses the oldest).
        self._pending: deque[Sampled] = deque(maxlen=PENDING_WINDOWS * window)
        #: Records offered (`picks`) since the last estimate.
        self._offered = 0
        #: Records added so far: tells a reader of the sample whether it changed.
        self.added = 0
        #: The position of the next record written in the cycle (a run, then the records left).
        self._at = 0

    def picks(self, count: int) -> list[int]:
        """The positions the sample takes among the next `count` records written (in order);
        the caller `add`s each."""
        self._offered += count
        out: list[int] = []
        at, i = self._at, 0
        while i < count:
            phase = (at + i) % self.cycle
            if phase < self.run:
                taken = min(self.run - phase, count - i)
                out.extend(range(i, i + taken))
                i += taken
            else:
                i += self.cycle - phase
        self._at = (at + count) % self.cycle
        return out

    def add(self, key: bytes | None, value: bytes | None, headers: Sequence[Header]) -> None:
        """One sampled record, as the producer would have written it."""
        record = (key, value, headers)
        self._sample.append(record)
        self._pending.append(record)
        self.added += 1

    def records(self) -> list[Sampled]:
        """The sampled records kept, oldest first."""
        return list(self._sample)

    def estimate(self, batches: int, records: int) -> int | None:
        """Bytes that `batches` batches of the producer, holding `records` records, store (None:
        nothing sampled yet). Ends the window: the next one samples one run in as many as the
        records offered in this one call for (`stride`)."""
        if batches <= 0 or records <= 0:
            return None
        fill = max(1, round(records / batches))
        pending = self._pending
        if len(pending) >= fill:
            # The sampled records this window's stand for: one in `every`.
            take = min(len(pending), max(fill, -(-records // self.every)))
            sample = [pending.popleft() for _ in range(take)]
        else:
            sample = self.records()
        if self._offered:  # else the caller samples (`add`) and sets `every` itself
            self.every = stride(self._offered, self._window_records)
            self.cycle = self.run * self.every
            self._offered = 0
        if not sample:
            return None
        # Whole batches of the fill where the sample holds one; else the sample as one batch.
        whole = len(sample) - len(sample) % fill if len(sample) >= fill else len(sample)
        size = 0
        for start in range(0, whole, fill):
            size += self._section_bytes(sample[start : start + fill])
        return batches * BATCH_HEADER_BYTES + round(records * size / whole)

    def _section_bytes(self, records: Sequence[Sampled]) -> int:
        section = b"".join(
            record_bytes(value, headers, offset_delta=i, key=key)
            for i, (key, value, headers) in enumerate(records)
        )
        if self.compress is None:
            return len(section)
        # A batch that compression does not shrink is sent uncompressed (`batch_bytes`).
        return min(len(section), len(self.compress(section)))
