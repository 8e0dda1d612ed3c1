"""What a topic's records would have stored without the sidecar, estimated where it is not seen:
the relay and the in-process producer (`ProducerBatches`; the proxy counts it exactly).

The counterfactual is the producer's own record batches, with its own batch codec, at the fill
the sidecar's batches had. The sidecar keeps a sample of the records as the producer would have
written them (key, raw value, the producer's headers): runs of `SAMPLE_RUN` consecutive
records, one run in `SAMPLE_EVERY`, the last `SAMPLE_RECORDS` records of them. For each
statistics window (the batches and records librdkafka reports the sidecar's producer sent), the
sample is cut into batches of the window's mean fill, each batch's records framed as Kafka
frames them (`record_batch`) and compressed with the producer's codec, and the window's estimate
is its batches' 61-byte headers plus its records times the sample's bytes per record.

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

from sidecar.proxy.compression import CODEC_IDS, Compression
from sidecar.record_batch import BATCH_HEADER_BYTES, Compress, Header, record_bytes

__all__ = ["SAMPLE_EVERY", "SAMPLE_RECORDS", "SAMPLE_RUN", "ProducerBatches", "batch_compressor"]

#: The sample takes runs of this many consecutive records (a batch's records are consecutive:
#: records written close together are alike, which the batch codec finds, and a sample of
#: records far apart would not show) ...
SAMPLE_RUN: Final = 128
#: ... one run in this many: one record in 8 is sampled, a tuple kept, no other work per record.
SAMPLE_EVERY: Final = 8
#: The sampled records kept (the latest): 8 runs, batches at fills up to a few hundred;
#: framing and compressing them once per statistics window (5 s) costs about a millisecond.
SAMPLE_RECORDS: Final = 1024

#: A sampled record: key, value, headers, as the producer would have written it.
Sampled = tuple[bytes | None, bytes | None, Sequence[Header]]


def batch_compressor(codec: str) -> Compress | None:
    """The records-section compressor of a producer's `compression.type` `codec` (none: None).

    Raises:
        ValueError: a codec Kafka does not know.
    """
    if codec not in CODEC_IDS:
        raise ValueError(f"unknown batch codec {codec!r}: use one of {sorted(CODEC_IDS)}")
    if codec == "none":
        return None
    code, compression = CODEC_IDS[codec], Compression()
    return lambda data: compression.compress(code, data)


class ProducerBatches:
    """The sample of one topic's records, and the estimate of what the producer's own batches
    of them store (see the module). Not thread-safe: fed and read by one thread at a time."""

    def __init__(
        self,
        compress: Compress | None,
        every: int = SAMPLE_EVERY,
        keep: int = SAMPLE_RECORDS,
        run: int = SAMPLE_RUN,
    ) -> None:
        if every < 1 or keep < 1 or run < 1:
            raise ValueError(f"every, keep and run must be at least 1, got {every}, {keep}, {run}")
        self.compress = compress
        self.run = run
        self.cycle = run * every
        self._sample: deque[Sampled] = deque(maxlen=keep)
        #: Records added so far: tells a reader of the sample whether it changed.
        self.added = 0
        #: The position of the next record written in the cycle (a run, then the records left).
        self._at = 0

    def picks(self, count: int) -> list[int]:
        """The positions the sample takes among the next `count` records written (in order);
        the caller `add`s each."""
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
        self._sample.append((key, value, headers))
        self.added += 1

    def records(self) -> list[Sampled]:
        """The sampled records kept, oldest first."""
        return list(self._sample)

    def estimate(self, batches: int, records: int) -> int | None:
        """Bytes that `batches` batches of the producer, holding `records` records, store (None:
        nothing sampled yet)."""
        sample = self.records()
        if not sample or batches <= 0 or records <= 0:
            return None
        fill = max(1, round(records / batches))
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
