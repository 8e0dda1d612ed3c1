"""Records written raw (`codec.output_mode`): how they are counted, and the shadow sample that
keeps the live ratio measured while they skip the encoder.

Counted: each raw record is one of outcome `raw` (`Outcome.RAW`), at its value's size in and out:
the saving of the producer's batch compression is the producer's, not claimed as ours.

Measured: the live ratio (`zdict_live_compression_factor`, drift detection) is what the active
dictionary achieves on the traffic. A topic written raw would leave it unmeasured, so drift would
never retrain its dictionary. `RawShadow` takes one raw record in `SHADOW_EVERY`, strided over the
batches, and encodes its value with the active encoder into nothing but the encoder's
`CodecStats.shadow_*` counts, scaled by the stride so that raw and encoded partitions weigh in
the ratio as their records do. The frame is thrown away: nothing is written, no byte counter
moves.

Pure: no Kafka, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, cast

from sidecar.codec.encoder import Encoder
from sidecar.codec.results import Outcome, Transformed
from sidecar.codec.wire import Headers

#: One raw record in this many is shadow-encoded. Encoding one value is the cost raw mode saves
#: (1.45 µs for a 113-byte event, `encoder.BATCH_API_MIN`): 1 in 32 keeps 97% of that saving,
#: and at 1,000 records/s still measures ~30 values a second, ~9,000 over the default 300 s
#: drift window.
SHADOW_EVERY: Final = 32

_RAW: Final = Outcome.RAW
_COMPRESSED: Final = Outcome.COMPRESSED
_PRECOMPRESSED: Final = Outcome.PRECOMPRESSED

#: A batch of record values with their headers, as the codec takes it.
Records = Sequence[tuple[bytes | None, Sequence[tuple[str, bytes | None]] | None]]


def passed_raw(records: Records) -> list[Transformed]:
    """`records` as written raw: value and headers unchanged, outcome `raw`, input = output
    bytes = the value's size (a tombstone: 0)."""
    out = []
    for value, headers in records:
        size = len(value) if value is not None else 0
        out.append(Transformed(value, cast(Headers, headers), _RAW, size, size))
    return out


class RawShadow:
    """The strided shadow sample of one namespace's raw records (see the module).

    Not thread-safe: one per namespace, fed by the loop that owns it.
    """

    __slots__ = ("_skip", "every")

    def __init__(self, every: int = SHADOW_EVERY) -> None:
        if every < 1:
            raise ValueError(f"the shadow sample takes one record in `every`, got {every}")
        self.every = every
        #: Raw records still to pass before the next one taken.
        self._skip = 0

    def picks(self, count: int) -> range:
        """The positions the sample takes among the next `count` raw records (in order)."""
        first = self._skip
        if first >= count:
            self._skip = first - count
            return range(0)
        taken = range(first, count, self.every)
        self._skip = taken[-1] + self.every - count
        return taken

    def measure(self, encoder: Encoder, records: Records) -> int:
        """Encode the sample's share of `records` (written raw) with `encoder`, into its
        `stats.shadow_*` counts only. Returns how many values were taken."""
        stats = encoder.stats
        every, key = self.every, encoder.header_key
        taken = self.picks(len(records))
        for i in taken:
            value, headers = records[i]
            stats.shadow_messages += every
            # Left out as the live ratio leaves them out: tombstones (no bytes), values that are
            # ours already, and values no dictionary could shrink (compressed by someone else).
            if value is None or (headers and any(k == key for k, _ in headers)):
                continue
            out, outcome = encoder.encode_value(value)
            if outcome == _PRECOMPRESSED:
                continue
            size = len(value)
            cost = len(out) + encoder.header_bytes if outcome == _COMPRESSED else size
            stats.shadow_input_bytes += every * size
            stats.shadow_output_bytes += every * cost
        return len(taken)


__all__ = ["SHADOW_EVERY", "RawShadow", "Records", "passed_raw"]
