"""The per-topic core that the relay and the proxy share.

A namespace is a topic as the producers name it: its dictionaries are trained on its values and
stored under its name. Per namespace, a process holds the encoder of its active dictionary, the
reservoir that samples its raw values for training, and its metrics. `Namespaces` builds them,
encodes and counts a batch (`Namespace.encode`), counts the records written raw and
shadow-encodes a share of them for the live ratio (`Namespace.pass_raw`; both in one batch:
`encode_with_raw`), and switches a
namespace to a new encoder when the store's active dictionary changes (told by the trainer, or
found in the store every `DICTIONARY_CHECK_INTERVAL` seconds), announcing each encoder it takes
up in the log and in the `zdict_dictionary_*` metrics.

Not thread-safe but for `request_refresh`: the relay's loop or the proxy's event loop owns it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Final

from sidecar.codec import CodecStats, Encoder, Transformed
from sidecar.codec.raw_values import RawShadow, passed_raw
from sidecar.config import CodecSettings, SamplingSettings
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import ZdictError
from sidecar.logs import get_logger
from sidecar.metrics import Metrics, NamespaceMetrics
from sidecar.record_batch import PRODUCER_ZSTD_LEVEL
from sidecar.training.sampling import Reservoir

log = get_logger(__name__)

#: A batch of record values with their headers, as the codec takes it.
Records = Sequence[tuple[bytes | None, Sequence[tuple[str, bytes | None]] | None]]
#: How a namespace's encoder is built: from the store, for the namespace's active dictionary.
EncoderFactory = Callable[[DictionaryStore, str], Encoder]

#: Seconds between two looks at the store for a newly activated dictionary.
DICTIONARY_CHECK_INTERVAL: Final = 5.0
#: `min_size` that makes every value pass through: the pass-through baseline runs the same path.
NEVER_COMPRESS: Final = 2**62


def encoder_factory(codec: CodecSettings, *, compress: bool = True) -> EncoderFactory:
    """Encoders as the codec settings say; with `compress` false, encoders that pass every value
    through (the cost baseline)."""
    min_size = codec.min_size if compress else NEVER_COMPRESS

    def build(store: DictionaryStore, namespace: str) -> Encoder:
        return Encoder.from_store(
            store,
            namespace,
            level=codec.level,
            min_size=min_size,
            header_key=codec.header_key,
            frame=codec.frame,
            wire=codec.wire_format,
        )

    return build


def new_reservoir(topic: str, sampling: SamplingSettings) -> Reservoir:
    """The training sample's reservoir of `topic`, bounded as the sampling settings say."""
    return Reservoir(
        topic,
        max_bytes=sampling.max_bytes,
        every=sampling.every,
        min_messages=sampling.min_messages,
        max_value_bytes=sampling.max_value_bytes,
    )


class Namespace:
    """One namespace: its current encoder, its training sample (None: nothing trains), its
    metrics and the shadow sample of its raw records."""

    __slots__ = ("active_id", "encoder", "metrics", "reservoir", "shadow", "topic")

    def __init__(
        self, topic: str, encoder: Encoder, reservoir: Reservoir | None, metrics: NamespaceMetrics
    ) -> None:
        self.topic = topic
        self.encoder = encoder
        #: The id of the store's active dictionary the encoder was built for (None: none).
        self.active_id: int | None = encoder.dict_id or None
        self.reservoir = reservoir
        self.metrics = metrics
        self.shadow = RawShadow()

    def encode(self, records: Records) -> list[Transformed]:
        """Encode a batch with the current encoder and count it in the metrics (outcomes, bytes
        in and out, the mean encode time). Raises `CodecError` for a batch with a record that
        cannot be encoded; nothing of it is counted then."""
        encoder = self.encoder
        stats = encoder.stats
        # A plain dict copy: a Counter's copy and subtract cost more than the small batches
        # of a Produce request take to encode.
        outcomes, input_bytes, output_bytes = (
            dict(stats.outcomes),
            stats.input_bytes,
            stats.output_bytes,
        )
        started = time.perf_counter()
        encoded = encoder.encode_batch(records)
        seconds = time.perf_counter() - started
        # The encoder tallied the batch already: its deltas cost nothing per record.
        delta = {k: n - outcomes.get(k, 0) for k, n in stats.outcomes.items()}
        self.metrics.observe_counts(
            delta, stats.input_bytes - input_bytes, stats.output_bytes - output_bytes, seconds
        )
        return encoded

    def output_crossover(self, codec: str) -> float | None:
        """The fill (records per batch) from which raw values with batch codec `codec` store
        fewer bytes than the current dictionary's frames (None: no dictionary, frames win at
        every fill measured, or not measured: frames)."""
        dictionary = self.encoder.dictionary
        return None if dictionary is None else dictionary.meta.output_crossover(codec)

    @property
    def batch_level(self) -> int:
        """The zstd level batches of the current dictionary's records are written at when the
        proxy writes them again: the one chosen at training (no dictionary, or none chosen:
        the producers' default)."""
        dictionary = self.encoder.dictionary
        level = None if dictionary is None else dictionary.meta.batch_level
        return PRODUCER_ZSTD_LEVEL if level is None else level

    def encode_with_raw(self, records: Records, raw: Sequence[int]) -> list[Transformed]:
        """`records` encoded (`encode`), but those at the positions `raw` (ascending) passed as
        they came (`pass_raw`); each of the two gets its records in one call."""
        if not raw:
            return self.encode(records)
        if len(raw) == len(records):
            return self.pass_raw(records)
        out: list[Transformed | None] = [None] * len(records)
        taken = set(raw)
        positions = [i for i in range(len(records)) if i not in taken]
        # The encoder first: a batch it refuses (CodecError) is retried record by record, and
        # its raw records must not have been counted already.
        for i, encoded in zip(positions, self.encode([records[i] for i in positions]), strict=True):
            out[i] = encoded
        for i, passed in zip(raw, self.pass_raw([records[i] for i in raw]), strict=True):
            out[i] = passed
        return [t for t in out if t is not None]

    def pass_raw(self, records: Records) -> list[Transformed]:
        """`records` written raw (their partitions' output mode), as they came: counted as
        outcome `raw` at their size in and out, and the shadow sample's share of them encoded
        with the current encoder for the live ratio only (`codec.raw_values`)."""
        passed = passed_raw(records)
        self.count_raw(records, sum(t.input_bytes for t in passed))
        return passed

    def count_raw(self, records: Records, value_bytes: int) -> None:
        """Count `records`, whose values hold `value_bytes` bytes, as written raw (`pass_raw`)
        without making a result per record: for a caller that writes every one of them as it
        came."""
        self.metrics.observe_raw(len(records), value_bytes)
        self.shadow.measure(self.encoder, records)


class Namespaces:
    """Every namespace a process encodes, by topic, following the store's active dictionaries."""

    def __init__(
        self,
        store: DictionaryStore,
        build: EncoderFactory,
        metrics: Metrics,
        sampling: SamplingSettings | None,
        clock: Callable[[], float] = time.monotonic,
        *,
        compress: bool = True,
    ) -> None:
        """`build` makes a namespace's encoder; `sampling` bounds each namespace's training
        sample (None: nothing is sampled, nothing trains); `compress` false: `build` makes
        encoders that pass every value through (`--pass-through`, the kill switch), so no
        dictionary is active and none is announced in the metrics (a pass-through topic
        without one is not a topic compressed without one: `ZdictNoDictionary`)."""
        self.store = store
        self._compress = compress
        self.metrics = metrics
        self._build = build
        self._sampling = sampling
        self._clock = clock
        self._namespaces: dict[str, Namespace] = {}
        self._refresh = threading.Event()
        self._checked = clock()

    def add(self, topic: str) -> Namespace:
        """Set up `topic`'s namespace (once): its encoder, announced, and its reservoir."""
        namespace = self._namespaces.get(topic)
        if namespace is not None:
            return namespace
        encoder = self._build(self.store, topic)
        sampling = self._sampling
        namespace = Namespace(
            topic,
            encoder,
            new_reservoir(topic, sampling) if sampling is not None else None,
            self.metrics.namespace(topic),
        )
        self._namespaces[topic] = namespace
        self._announce(namespace)
        return namespace

    def get(self, topic: str) -> Namespace | None:
        return self._namespaces.get(topic)

    def __getitem__(self, topic: str) -> Namespace:
        return self._namespaces[topic]

    def __iter__(self) -> Iterator[Namespace]:
        return iter(list(self._namespaces.values()))

    def topics(self) -> list[str]:
        """Every namespace's topic, sorted."""
        return sorted(self._namespaces)

    def reservoirs(self) -> dict[str, Reservoir]:
        """Per topic, the training sample's reservoir (the namespaces that sample)."""
        namespaces = list(self._namespaces.items())  # the proxy adds namespaces meanwhile
        return {t: n.reservoir for t, n in namespaces if n.reservoir is not None}

    def encoder_stats(self, topic: str) -> CodecStats:
        """The current encoder's counts for `topic` (empty for a topic not set up)."""
        namespace = self._namespaces.get(topic)
        return namespace.encoder.stats if namespace is not None else CodecStats()

    def request_refresh(self) -> None:
        """The store's active dictionaries changed: look at them at the next `refresh_if_due`
        (thread-safe)."""
        self._refresh.set()

    def refresh_if_due(self) -> bool:
        """`refresh` when asked to, or `DICTIONARY_CHECK_INTERVAL` seconds after the last look;
        whether it looked."""
        now = self._clock()
        if not self._refresh.is_set() and now - self._checked < DICTIONARY_CHECK_INTERVAL:
            return False
        self._refresh.clear()
        self._checked = now
        self.refresh()
        return True

    def refresh(self) -> None:
        """Switch every namespace whose active dictionary changed to an encoder for it. A store
        that cannot be read, or a dictionary that cannot be loaded, keeps the current encoder."""
        for namespace in self:
            topic = namespace.topic
            try:
                active = self.store.active_id(topic)
            except ZdictError as exc:
                log.error("dictionary_check_failed", namespace=topic, error=str(exc))
                continue
            if active == namespace.active_id:
                continue
            try:
                namespace.encoder = self._build(self.store, topic)
            except ZdictError as exc:  # keep the current encoder rather than stop
                log.error("dictionary_load_failed", namespace=topic, error=str(exc))
                namespace.active_id = active
                continue
            namespace.active_id = active
            self._announce(namespace)

    def _announce(self, namespace: Namespace) -> None:
        """The encoder a namespace takes up, in the log and the dictionary metrics."""
        dictionary = namespace.encoder.dictionary
        if not self._compress:
            log.info("passing_through", namespace=namespace.topic)
            return
        self.metrics.set_dictionary(namespace.topic, dictionary)
        if dictionary is None:
            log.warning(
                "no_dictionary",
                namespace=namespace.topic,
                detail="compressing without a dictionary (zd=0) where that still shrinks; "
                "train one with `zdict-sidecar train`",
            )
        else:
            log.info(
                "dictionary_loaded",
                namespace=namespace.topic,
                dict_id=dictionary.id,
                version=dictionary.meta.version,
                heldout_ratio=dictionary.meta.heldout_ratio,
                level=namespace.encoder.level,
            )
