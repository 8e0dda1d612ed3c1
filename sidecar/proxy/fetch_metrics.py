"""The proxy's Fetch decoding metrics, defined once against the registry passed in.

Labels are bounded: `topic` is a topic name upstream's responses carry (or `unknown` for a
topic id no listing named), `outcome` one of `OUTCOMES`.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram

#: What happened to a fetched record: its value decoded; sent as stored without our header;
#: sent as stored with our header, because it could not be decoded, or because its response's
#: decoding work was spent.
OUTCOMES: Final = ("decoded", "passed", "failed", "over_budget")
#: Seconds buckets of one response's decoding.
_SECONDS_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class FetchMetrics:
    """Records decoded, passed and failed per topic; seconds per response; partitions held
    back or refused."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._records = Counter(
            "zdict_proxy_fetch_records",
            "Records of Fetch responses decoded for clients that get them decoded, by topic and "
            "outcome: decoded, passed (no zd header: sent as stored), failed (a zd header the "
            "decoder refused: sent as stored, header and all), over_budget (sent as stored: "
            "the response's ZDICT_PROXY__FETCH_DECODE_BUDGET_BYTES was spent).",
            ["topic", "outcome"],
            registry=registry,
        )
        self._seconds = Histogram(
            "zdict_proxy_fetch_decode_duration_seconds",
            "Seconds spent rewriting the records of one Fetch response (decoding thread and "
            "waiting for it).",
            buckets=_SECONDS_BUCKETS,
            registry=registry,
        )
        self._held_back = Counter(
            "zdict_proxy_fetch_held_back_partitions",
            "Partitions whose records (or the rest of them) were left out of a Fetch response: "
            "ZDICT_PROXY__MAX_FETCH_BYTES or the budget reached, or the registry did not answer; "
            "the client fetches them again.",
            registry=registry,
        )
        self._over_budget = Counter(
            "zdict_proxy_fetch_over_budget_responses",
            "Fetch responses whose decoding work reached ZDICT_PROXY__FETCH_DECODE_BUDGET_BYTES: "
            "the rest of their first batch sent as stored, later batches held back.",
            registry=registry,
        )
        self._refused = Counter(
            "zdict_proxy_fetch_refused_partitions",
            "Partitions of the registry topic answered TOPIC_AUTHORIZATION_FAILED.",
            registry=registry,
        )
        self._children: dict[str, tuple[Counter, ...]] = {}

    def records(
        self, topic: str, decoded: int, passed: int, failed: int, over_budget: int = 0
    ) -> None:
        children = self._children.get(topic)
        if children is None:
            children = self._children[topic] = tuple(
                self._records.labels(topic, outcome) for outcome in OUTCOMES
            )
        counts = (decoded, passed, failed, over_budget)
        for child, count in zip(children, counts, strict=True):
            if count:
                child.inc(count)

    def decode_seconds(self, seconds: float) -> None:
        self._seconds.observe(seconds)

    def over_budget(self) -> None:
        self._over_budget.inc()

    def held_back(self) -> None:
        self._held_back.inc()

    def refused(self) -> None:
        self._refused.inc()
