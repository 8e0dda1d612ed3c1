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
once per statistics window: about 1,024 values encoded and twenty batches compressed, a few
milliseconds every 5 s. Until the sample holds `MIN_RECORDS` records (or `MIN_BYTES` of
values), the trained crossover stands.

Pure: no Kafka, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from sidecar.batch_compression import CODEC_IDS
from sidecar.codec.encoder import Encoder
from sidecar.stored_estimate import ProducerBatches, batch_compressor
from sidecar.training.crossover import raw_crossovers

__all__ = ["MIN_BYTES", "MIN_RECORDS", "LiveCrossover"]

#: Sampled records from which the live measurement replaces the trained crossover: two runs of
#: consecutive records (`stored_estimate.SAMPLE_RUN`), batches up to 128 measured twice ...
MIN_RECORDS: Final = 256
#: ... or fewer records of this many value bytes (kilobyte documents: a few dozen tell frames
#: from raw values at every fill they reach) ...
MIN_BYTES: Final = 64 * 1024
#: ... but never fewer records than this.
MIN_FEW: Final = 8


class LiveCrossover:
    """The crossover of one stream for a batch codec, measured on its newest sampled records
    with the dictionary that encodes them now, or none (see the module). Called as the output
    mode's crossover: `live(codec)`. Not thread-safe: read by the one thread that reads
    statistics."""

    def __init__(
        self,
        sample: Callable[[], ProducerBatches | None],
        encoder: Callable[[], Encoder],
        trained: Callable[[str], float | None],
        level: int | None = None,
    ) -> None:
        """`sample`: the stream's sample (None: none yet); `encoder`: the encoder that encodes
        the stream now; `trained`: the crossover its dictionary was stored with, per codec;
        `level`: the zstd level the producer compresses its batches at (None: its default)."""
        self._level = level
        self._sample = sample
        self._encoder = encoder
        self._trained = trained
        #: The scratch encoder of the active one (same dictionary, level, minimum size, wire).
        self._scratch: tuple[Encoder, Encoder] | None = None
        #: The last measurement: (records added, the encoder, codec) -> crossover.
        self._last: tuple[tuple[int, Encoder, str], float | None] | None = None

    def __call__(self, codec: str) -> float | None:
        encoder = self._encoder()
        sample = self._sample()
        # Without a dictionary too: values compressed on their own (`zd: 0`) lose to the batch
        # codec from a few records a batch (bench savings: 3x at fill 128 on maven's POMs).
        if sample is None or codec not in CODEC_IDS:
            return self._trained(codec)
        key = (sample.added, encoder, codec)
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        # Values only, on both sides: the producer's own headers are the same in either mode.
        values = [v for _, v, _ in sample.records() if v is not None]
        compress = batch_compressor(codec, self._level)
        enough = len(values) >= MIN_RECORDS or (
            len(values) >= MIN_FEW and sum(map(len, values)) >= MIN_BYTES
        )
        if not enough or compress is None:
            return self._trained(codec)
        frames = self._scratch_of(encoder).encode_batch([(v, None) for v in values])
        measured = raw_crossovers(
            values, [(e.value or b"", e.headers or ()) for e in frames], {codec: compress}
        )[codec]
        self._last = (key, measured)
        return measured

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
