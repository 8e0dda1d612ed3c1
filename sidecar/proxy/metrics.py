"""The proxy's Prometheus metrics, defined once against the registry passed in.

Labels are bounded: `api` is a name from kio's index of Kafka's APIs (or `unknown`),
`direction` is `request` or `response`, `listener` is `bootstrap` or `broker`, `reason` is one
of `CLOSE_REASONS`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from sidecar.metrics.stored import PROXY, StoredBytes
from sidecar.proxy.versions import api_name

REQUEST: Final = "request"
RESPONSE: Final = "response"
BOOTSTRAP: Final = "bootstrap"
BROKER: Final = "broker"
#: Why the proxy closed a client connection: a request it does not forward (or cannot read),
#: a frame that did not arrive within the read timeout, an idle connection, upstream closing
#: or answering what the proxy cannot read, upstream not reachable, upstream refusing the
#: proxy's SASL credentials, a client starting a SASL handshake of its own, an idle connection
#: closed to admit a new one (`slots`).
CLOSE_REASONS: Final = (
    "refused",
    "timeout",
    "idle",
    "evicted",
    "upstream_closed",
    "upstream_unreachable",
    "upstream_auth_failed",
    "client_sasl",
)
#: Why a Produce request was refused at the door (`produce`, `batches`, `routes`).
PRODUCE_REFUSALS: Final = (
    "topic",
    "acks",
    "corrupt",
    "invalid_record",
    "codec",
    "too_large",
    "too_many_records",
    "value_too_large",
    "timestamp",
    "too_many_topics",
)


#: The `mode` label of `zdict_proxy_output_batches_total`.
OUTPUT_MODES: Final = ("frames", "raw")
#: Why a request other than Produce was answered by the proxy rather than forwarded (`access`).
REQUEST_REFUSALS: Final = ("admin_api", "protected_topic", "unknown_topic_id", "too_many_topics")


class FrameTally(Collector):
    """`zdict_proxy_frames_total` and `zdict_proxy_frame_bytes_total`, by API and direction.

    Counted in plain ints by the event loop (`count`, two per frame) and made metric families
    when the registry is scraped, as `sidecar.serde.metrics` does: a prometheus_client child
    takes a lock of its own per `inc`, four per request on the proxy's busiest path. Only the
    loop writes the counts; a scrape reads them as they are.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        #: [frames, bytes] per (API key, direction).
        self._counts: dict[tuple[int, str], list[int]] = {}
        registry.register(self)

    def count(self, api_key: int, direction: str, size: int) -> None:
        """One frame of `size` bytes (size prefix included) forwarded in `direction`."""
        counts = self._counts.get((api_key, direction))
        if counts is None:
            counts = self._counts[(api_key, direction)] = [0, 0]
        counts[0] += 1
        counts[1] += size

    def collect(self) -> Iterator[Metric]:
        frames = CounterMetricFamily(
            "zdict_proxy_frames",
            "Frames forwarded: requests to upstream, responses to clients.",
            labels=("api", "direction"),
        )
        sizes = CounterMetricFamily(
            "zdict_proxy_frame_bytes",
            "Bytes of those frames, size prefixes included (responses as sent to the client, "
            "after rewriting).",
            labels=("api", "direction"),
        )
        # By API name: the keys the proxy does not know all count as `unknown`.
        totals: dict[tuple[str, str], list[int]] = {}
        for (api_key, direction), (count, size) in list(self._counts.items()):
            total = totals.setdefault((api_name(api_key), direction), [0, 0])
            total[0] += count
            total[1] += size
        for labels, (count, size) in sorted(totals.items()):
            frames.add_metric(labels, count)
            sizes.add_metric(labels, size)
        yield frames
        yield sizes


class OutputModeTally(Collector):
    """`zdict_proxy_output_batches_total` by topic, partition and mode: the batches the proxy
    wrote upstream with frames of ours and those it wrote as their values came (it decides per
    batch: raw values from the crossover, or where they are fewer bytes than the frames). The
    share written as frames per partition over time is the proxy's output mode; plain ints, as
    `FrameTally`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        #: [frames, raw] batches per (topic, partition).
        self._counts: dict[tuple[str, int], list[int]] = {}
        registry.register(self)

    def count(self, topic: str, partition: int, framed: int, raw: int) -> None:
        counts = self._counts.get((topic, partition))
        if counts is None:
            counts = self._counts[(topic, partition)] = [0, 0]
        counts[0] += framed
        counts[1] += raw

    def describe(self) -> Iterator[Metric]:
        yield self._family()

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for (topic, partition), counts in sorted(self._counts.items()):
            for mode, count in zip(OUTPUT_MODES, counts, strict=True):
                family.add_metric((topic, str(partition), mode), count)
        yield family

    @staticmethod
    def _family() -> CounterMetricFamily:
        return CounterMetricFamily(
            "zdict_proxy_output_batches",
            "Record batches the proxy wrote upstream, by mode (frames or raw).",
            labels=("topic", "partition", "mode"),
        )


class ForwardMetrics:
    """Requests, responses and bytes per API and direction; connections; what the Produce
    requests forwarded store, against the clients' batches as received."""

    def __init__(self, registry: CollectorRegistry, stored: StoredBytes | None = None) -> None:
        """`stored`: the process's `StoredBytes` (`Metrics.stored`), if it has one on
        `registry` already; else one is registered."""
        self._frames = FrameTally(registry)
        self._modes = OutputModeTally(registry)
        self._stored = stored if stored is not None else StoredBytes(registry)
        self._rewritten = Counter(
            "zdict_proxy_rewritten_responses",
            "Responses parsed and written again: broker addresses rewritten, ApiVersions filtered.",
            ["api"],
            registry=registry,
        )
        self._open = Gauge(
            "zdict_proxy_connections",
            "Client connections open, by listener.",
            ["listener"],
            registry=registry,
        )
        self._closed = Counter(
            "zdict_proxy_closed_connections",
            "Client connections the proxy closed, by reason (clients closing theirs are not "
            "counted).",
            ["reason"],
            registry=registry,
        )
        self._refused = Counter(
            "zdict_proxy_refused_connections",
            "Client connections closed at once: ZDICT_PROXY__MAX_CONNECTIONS (or "
            "ZDICT_PROXY__MAX_CONNECTIONS_PER_CLIENT of its address) were open, none idle.",
            registry=registry,
        )
        self._listeners = Gauge(
            "zdict_proxy_broker_listeners",
            "Local listeners of upstream brokers (one per node id seen).",
            registry=registry,
        )
        self._produce_refused = Counter(
            "zdict_proxy_refused_produce_requests",
            "Produce requests refused at the door, nothing of them forwarded, by the first "
            "reason found.",
            ["reason"],
            registry=registry,
        )
        self._request_refused = Counter(
            "zdict_proxy_refused_requests",
            "Requests other than Produce answered by the proxy with an error, not forwarded, "
            "by API and reason.",
            ["api", "reason"],
            registry=registry,
        )
        for reason in PRODUCE_REFUSALS:
            self._produce_refused.labels(reason)
        for listener in (BOOTSTRAP, BROKER):
            self._open.labels(listener)
        for reason in CLOSE_REASONS:
            self._closed.labels(reason)

    def frame(self, api_key: int, direction: str, size: int) -> None:
        """One frame of `size` bytes forwarded in `direction`."""
        self._frames.count(api_key, direction, size)

    def rewritten(self, api_key: int) -> None:
        self._rewritten.labels(api_name(api_key)).inc()

    def opened(self, listener: str) -> None:
        self._open.labels(listener).inc()

    def ended(self, listener: str, reason: str | None) -> None:
        """A connection ended; `reason` when the proxy closed it (one of `CLOSE_REASONS`)."""
        self._open.labels(listener).dec()
        if reason is not None:
            self._closed.labels(reason).inc()

    def produce_refused(self, reason: str) -> None:
        """A Produce request refused; `reason` one of `PRODUCE_REFUSALS`."""
        self._produce_refused.labels(reason).inc()

    def stored(self, topic: str, batches: int, records: int, sent: int, received: int) -> None:
        """One partition of a Produce request forwarded: `batches` record batches holding
        `records` records, `sent` bytes of them upstream, `received` bytes as the client sent
        them (what the broker would have stored without the proxy)."""
        self._stored.add(topic, PROXY, batches, records, sent, received)

    def output_batches(self, topic: str, partition: int, framed: int, raw: int) -> None:
        """One partition of a Produce request forwarded: `framed` batches written with frames,
        `raw` as their values came."""
        self._modes.count(topic, partition, framed, raw)

    def refused(self) -> None:
        self._refused.inc()

    def set_broker_listeners(self, count: int) -> None:
        self._listeners.set(count)

    def request_refused(self, api_key: int, reason: str) -> None:
        """A request answered by the proxy; `reason` one of `REQUEST_REFUSALS`."""
        self._request_refused.labels(api_name(api_key), reason).inc()
