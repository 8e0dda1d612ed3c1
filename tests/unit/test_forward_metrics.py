"""The proxy's frame counts (`sidecar.proxy.metrics.FrameTally`): plain counts on the event
loop's path, exposed as Prometheus counters when the registry is scraped."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sidecar.proxy.metrics import REQUEST, RESPONSE, ForwardMetrics
from sidecar.proxy.versions import PRODUCE

FETCH = 1


def _samples(registry: CollectorRegistry) -> dict[tuple[str, str, str], float]:
    """(sample name, api, direction) -> value, from the exposition text a scrape gets."""
    out: dict[tuple[str, str, str], float] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        if family.name in ("zdict_proxy_frames", "zdict_proxy_frame_bytes"):
            assert family.type == "counter"
            for sample in family.samples:
                out[(sample.name, sample.labels["api"], sample.labels["direction"])] = sample.value
    return out


def test_frames_and_their_bytes_are_counted_per_api_and_direction() -> None:
    registry = CollectorRegistry()
    metrics = ForwardMetrics(registry)
    assert _samples(registry) == {}, "no frame forwarded yet: no sample"
    metrics.frame(PRODUCE, REQUEST, 1_000)
    metrics.frame(PRODUCE, REQUEST, 500)
    metrics.frame(PRODUCE, RESPONSE, 80)
    metrics.frame(FETCH, REQUEST, 90)
    assert _samples(registry) == {
        ("zdict_proxy_frames_total", "Produce", "request"): 2,
        ("zdict_proxy_frame_bytes_total", "Produce", "request"): 1_500,
        ("zdict_proxy_frames_total", "Produce", "response"): 1,
        ("zdict_proxy_frame_bytes_total", "Produce", "response"): 80,
        ("zdict_proxy_frames_total", "Fetch", "request"): 1,
        ("zdict_proxy_frame_bytes_total", "Fetch", "request"): 90,
    }
    metrics.frame(PRODUCE, REQUEST, 7)
    assert (
        registry.get_sample_value(
            "zdict_proxy_frames_total", {"api": "Produce", "direction": "request"}
        )
        == 3
    ), "each scrape reads the counts as they are"


def test_api_keys_the_proxy_does_not_know_add_up_under_one_unknown_label() -> None:
    registry = CollectorRegistry()
    metrics = ForwardMetrics(registry)
    metrics.frame(30_001, REQUEST, 10)
    metrics.frame(30_002, REQUEST, 20)
    assert _samples(registry) == {
        ("zdict_proxy_frames_total", "unknown", "request"): 2,
        ("zdict_proxy_frame_bytes_total", "unknown", "request"): 30,
    }
