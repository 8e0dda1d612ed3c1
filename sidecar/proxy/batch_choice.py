"""Frames or raw, per batch: the proxy's one rule for when a client's batch is written with its
values as they came (no `zd` header, left to the batch codec) rather than as frames.

Where a batch is full, the batch codec stores its raw values in fewer bytes than per-record
frames. The fill from which it does is the topic's crossover: the relay's rule
(`live_crossover`), measured on the latest values the proxy forwarded to the topic
(`RecentValues`) with the dictionary that encodes them now: frames compressed at the level the
proxy writes the topic's batches at (`Namespace.batch_level`, chosen at training), raw values at
producers' default, which a batch passed as it came keeps (measured both at the batch level,
kafka-broker-log at 512 a batch went raw at 1.075x frames' bytes, `bench savings`); measured at
most once per `live_crossover.MEASURE_INTERVAL` seconds, and at once when the active dictionary
changes (the one the dictionary was trained with until the topic sent a few values). Per batch,
with `codec.output_mode=auto`:

- a batch whose values none were encoded (all below the codec's minimum, say) goes as it came;
- one of at least `RAW_FROM` times the crossover goes as it came, its values not encoded
  (counted as outcome `raw`; read for its values only while the crossover stands);
- one of at least `COMPARE_FROM` records and `COMPARE_ABOVE` times the crossover (none: every
  batch of `COMPARE_FROM`) is written both ways and the fewer bytes kept (`proxy.compare_batches`;
  false: never). When it came in the output codec, as it came costs nothing to write and it is
  compared every time; in another codec, as it came costs one more compression, so a batch size
  compared lately is written the way that won (`Comparisons`), compared again once in
  `COMPARE_EVERY`;
- any other batch is written as frames.

With `codec.output_mode=frames` every batch holding an encoded value is written as frames.

Pure: no Kafka, no I/O; runs on the proxy's event loop, once per topic of a Produce request and
once per batch. Nothing is compressed here but the batches written, and the live crossover's
measurement (a few milliseconds to 0.2 s, once per `MEASURE_INTERVAL`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from typing import Final

from sidecar.codec import Encoder, Transformed
from sidecar.codec.results import Outcome
from sidecar.live_crossover import MEASURE_INTERVAL, LiveCrossover, RecentValues
from sidecar.namespaces import Namespace
from sidecar.proxy.batches import BatchRewriter, ReadPartition, drained
from sidecar.record_batch import PRODUCER_ZSTD_LEVEL

#: A batch of at least this many times the crossover goes as it came, unencoded ...
RAW_FROM: Final = 2.0
#: ... and a smaller one of at least this many records is written both ways, the fewer bytes
#: kept: the crossover is an estimate, measured on values before these (around it the two part
#: by 5-30 % on real data, `bench savings`; a stream that changed may cross where the held-out
#: values never did) ...
COMPARE_FROM: Final = 4
#: ... and of at least this many times the crossover, when there is one: well below it frames
#: win (`bench savings`), and the second compression of every batch a client sends small
#: would cost CPU for no byte saved.
COMPARE_ABOVE: Final = 0.5
#: A batch size (records) compared lately is written the way that won, and compared again
#: once in this many batches of that size (`Comparisons`).
COMPARE_EVERY: Final = 16
#: Batch sizes one `Comparisons` remembers; past that it starts again.
COMPARED_SIZES: Final = 1024
#: A topic's crossover is logged when first measured, and again when it moved by at least this
#: fraction from the one last logged (each measurement moves it a little).
LOGGED_CHANGE: Final = 0.1
_COMPRESSED: Final = Outcome.COMPRESSED


class Comparisons:
    """Which way won when batches of one topic were last written both ways, per batch size
    (records): a size compared lately is written that way without the other, and compared
    again once in `every` batches of that size (a stream that changed turns it back). Only for
    batches that came in another codec than the output's, whose as-it-came costs a compression:
    the comparison's second compression is paid once in `every`."""

    __slots__ = ("_every", "_last")

    def __init__(self, every: int = COMPARE_EVERY) -> None:
        self._every = every
        #: Batch size -> (as it came won, batches of that size before the next comparison).
        self._last: dict[int, tuple[bool, int]] = {}

    def known(self, count: int) -> bool | None:
        """Whether as it came won for a batch of `count` records, counting this batch; None:
        compare it (never compared, or due again)."""
        last = self._last.get(count)
        if last is None or last[1] <= 0:
            return None
        self._last[count] = (last[0], last[1] - 1)
        return last[0]

    def found(self, count: int, as_read: bool) -> None:
        """A batch of `count` records was compared: as it came won (`as_read`) or not."""
        if count not in self._last and len(self._last) >= COMPARED_SIZES:
            self._last.clear()
        self._last[count] = (as_read, self._every - 1)


class FramesOrRaw:
    """One topic's rule (see module): its latest values, the crossover measured on them, the
    batch sizes taken from it for the request being written, and its comparisons."""

    __slots__ = (
        "_clock",
        "_codec",
        "_compare",
        "_live",
        "_logged",
        "_raw",
        "_recent",
        "compare_from",
        "comparisons",
        "crossover",
        "raw_from",
    )

    def __init__(
        self,
        codec: str,
        *,
        raw: bool = True,
        compare: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`codec`: the output codec the crossover is measured for (`proxy.output_compression`;
        `producer`: the trained crossover); `raw`: batches past the crossover go as they came
        (`codec.output_mode=auto`; False: frames always); `compare`: with `raw`, batches near
        it are written both ways (`proxy.compare_batches`)."""
        self._codec = codec
        self._raw = raw
        self._compare = raw and compare
        self._clock = clock
        self._recent = RecentValues()
        #: The namespace and encoder the live crossover was built for, and it.
        self._live: tuple[Namespace, Encoder, LiveCrossover] | None = None
        #: The crossover at the topic's last request (None: none, frames up to `raw_from`).
        self.crossover: float | None = None
        #: Batches of at least this many records go as they came, unencoded (None: none).
        self.raw_from: float | None = None
        #: Batches of at least this many records are written both ways (None: none).
        self.compare_from: float | None = COMPARE_FROM if self._compare else None
        self.comparisons = Comparisons()
        #: The crossover last logged, in a tuple (`to_log`; None: none logged yet).
        self._logged: tuple[float | None] | None = None

    def update(self, namespace: Namespace, latest: Sequence[Sequence[bytes | None]]) -> bool:
        """The crossover for a request of the topic, measured on the values before it (what its
        batches are compared with); then its `latest` values (per partition, in order) added
        to them. Whether the crossover moved from the last request's (another dictionary, or
        the stream drifted): the batches read for their values only must be read again, and
        the sizes compared lately are compared again."""
        before = self.crossover
        if self._raw:
            self.crossover = self._live_of(namespace)(self._codec)
            for values in latest:
                self._recent.extend(values)
        moved = before is not None and self.crossover != before
        if moved:
            self.comparisons = Comparisons()
        crossover = self.crossover
        self.raw_from = None if crossover is None else crossover * RAW_FROM
        if self._compare:
            above = 0.0 if crossover is None else crossover * COMPARE_ABOVE
            self.compare_from = max(float(COMPARE_FROM), above)
        return moved

    def to_log(self) -> bool:
        """Whether the crossover is news to log (see `LOGGED_CHANGE`); if so, noted as logged."""
        crossover = self.crossover
        if not self._raw:
            return False
        if self._logged is not None:
            (logged,) = self._logged
            if crossover == logged or (
                crossover is not None
                and logged is not None
                and abs(crossover - logged) < LOGGED_CHANGE * logged
            ):
                return False
        self._logged = (crossover,)
        return True

    def values_from(self) -> float | None:
        """Batches of at least this many records are read for their values only: they go as
        they came by the crossover of the topic's last request (None: none)."""
        return self.raw_from

    def all_raw(self, partitions: Sequence[ReadPartition]) -> bool:
        """Whether every batch of `partitions` holding records goes as it came, unencoded."""
        raw_from = self.raw_from
        return raw_from is not None and all(
            b.control or not b.count or b.count >= raw_from for p in partitions for b in p.batches
        )

    def raw_positions(self, partitions: Sequence[ReadPartition]) -> list[int]:
        """The positions, in the inputs of `partitions` in order, of the records that go as
        they came, unencoded: those of the batches of at least `raw_from` records."""
        raw_from = self.raw_from
        out: list[int] = []
        if raw_from is None:
            return out
        at = 0
        for partition in partitions:
            for batch in partition.batches:
                count = 0 if batch.control else batch.count
                if count and count >= raw_from:
                    out.extend(range(at, at + count))
                at += count
        return out

    def _live_of(self, namespace: Namespace) -> LiveCrossover:
        """The live crossover of `namespace`'s encoder now, built anew when the active
        dictionary changed: its frames measured at the level the topic's batches are written
        at, raw values at producers' default (see module)."""
        encoder = namespace.encoder
        live = self._live
        if live is None or live[0] is not namespace or live[1] is not encoder:
            recent = self._recent
            live = self._live = (
                namespace,
                encoder,
                LiveCrossover(
                    lambda: recent,
                    lambda: encoder,
                    namespace.output_crossover,
                    level=namespace.batch_level,
                    raw_level=PRODUCER_ZSTD_LEVEL,
                    interval=MEASURE_INTERVAL,
                    clock=self._clock,
                ),
            )
        return live[2]


def write(
    rewriter: BatchRewriter,
    partition: ReadPartition,
    encoded: Sequence[Transformed],
    rule: FramesOrRaw | None = None,
    level: int = PRODUCER_ZSTD_LEVEL,
) -> bytes:
    """The records field of `partition` written again (`write_steps`), all at once."""
    return drained(write_steps(rewriter, partition, encoded, rule, level))


def write_steps(
    rewriter: BatchRewriter,
    partition: ReadPartition,
    encoded: Sequence[Transformed],
    rule: FramesOrRaw | None = None,
    level: int = PRODUCER_ZSTD_LEVEL,
) -> Generator[None, None, bytes]:
    """The records field of `partition` written again with its values `encoded` (as many as
    its inputs, in order), each batch as frames or as it came by `rule` (None: frames; see
    module), in steps of at most `batches.STEP_RECORDS` records, None after each but the last.
    A batch written again is compressed at `level` (zstd's); one passed as it came in the
    output codec keeps the client's bytes. Counts the batches written as frames in
    `partition.framed`."""
    compare_from = None if rule is None else rule.compare_from
    out: list[bytes] = []
    at = 0
    for batch in partition.batches:
        if batch.control:
            out.append(batch.raw)
            continue
        mine = encoded[at : at + batch.count]
        at += batch.count
        # Only an encoded value adds a header: a batch without one is its records as read.
        if not any(e.outcome is _COMPRESSED for e in mine):
            out.append(rewriter.as_read(batch, level))
            continue
        compared = compare_from is not None and batch.count >= compare_from
        cached = compared and not rewriter.same_codec(batch)
        known = rule.comparisons.known(batch.count) if cached and rule is not None else None
        if known is True:  # as it came won lately: the frames are not written
            out.append(rewriter.as_read(batch, level))
            continue
        framed = yield from rewriter.framed_steps(batch, mine, level)
        if compared and known is None:
            as_read = rewriter.as_read(batch, level)
            fewer = len(as_read) < len(framed)
            if cached and rule is not None:
                rule.comparisons.found(batch.count, fewer)
            if fewer:
                out.append(as_read)
                continue
        partition.framed += 1
        out.append(framed)
    return b"".join(out)
