"""The per-topic core the relay and the proxy share: encoders that follow the store's active
dictionary, the training sample, and the encode-and-count step."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from sidecar.codec import Encoder, Outcome
from sidecar.config import CodecSettings, SamplingSettings
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import StoreError
from sidecar.metrics import Metrics
from sidecar.namespaces import (
    DICTIONARY_CHECK_INTERVAL,
    NEVER_COMPRESS,
    EncoderFactory,
    Namespaces,
    encoder_factory,
)
from tests.unit.dictionaries import AddDictionary


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def build(store: DictionaryStore, namespace: str) -> Encoder:
    return Encoder.from_store(store, namespace)


def make(
    store: DictionaryStore,
    clock: Clock,
    sampling: SamplingSettings | None = None,
    factory: EncoderFactory = build,
) -> tuple[Namespaces, CollectorRegistry]:
    registry = CollectorRegistry()
    return Namespaces(store, factory, Metrics(registry), sampling, clock), registry


def dictionary_id(registry: CollectorRegistry, topic: str) -> str | None:
    """The dict_id label of `topic`'s zdict_dictionary_info series."""
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == "zdict_dictionary_info" and sample.labels["topic"] == topic:
                return sample.labels["dict_id"]
    return None


def test_a_namespace_takes_up_the_active_dictionary_and_announces_it(
    store: DictionaryStore, add_dictionary: AddDictionary
) -> None:
    dictionary = add_dictionary("orders")
    store.activate("orders", dictionary.id)
    namespaces, registry = make(store, Clock())
    with capture_logs() as logs:
        namespace = namespaces.add("orders")
    assert namespace.active_id == dictionary.id
    assert namespaces.add("orders") is namespace  # set up once
    assert dictionary_id(registry, "orders") == str(dictionary.id)
    assert [(e["event"], e.get("dict_id")) for e in logs] == [("dictionary_loaded", dictionary.id)]


def test_a_namespace_without_a_dictionary_says_so_and_compresses_without_one(
    store: DictionaryStore,
) -> None:
    namespaces, registry = make(store, Clock())
    with capture_logs() as logs:
        namespace = namespaces.add("orders")
    assert namespace.active_id is None
    assert dictionary_id(registry, "orders") == "0"
    assert [e["event"] for e in logs] == ["no_dictionary"]


def test_encode_counts_the_batch_in_the_metrics_as_the_encoder_tallied_it(
    store: DictionaryStore,
) -> None:
    namespaces, registry = make(store, Clock())
    namespace = namespaces.add("orders")
    value = b'{"event":"product_viewed","sku":"A-1"}' * 8
    encoded = namespace.encode([(value, None), (None, None), (b"x", None)])
    assert [e.outcome for e in encoded] == [
        Outcome.COMPRESSED,
        Outcome.TOMBSTONE,
        Outcome.BELOW_THRESHOLD,
    ]

    def messages(outcome: str) -> float | None:
        labels = {"topic": "orders", "op": "encode", "outcome": outcome}
        return registry.get_sample_value("zdict_records_total", labels)

    assert messages(Outcome.COMPRESSED) == 1
    assert messages(Outcome.TOMBSTONE) == 1
    assert messages(Outcome.BELOW_THRESHOLD) == 1
    stats = namespaces.encoder_stats("orders")
    input_bytes = registry.get_sample_value(
        "zdict_input_bytes_total", {"topic": "orders", "op": "encode"}
    )
    assert input_bytes == stats.input_bytes


def test_a_newly_activated_dictionary_is_taken_up_when_asked_or_at_the_next_interval(
    store: DictionaryStore, add_dictionary: AddDictionary
) -> None:
    clock = Clock()
    namespaces, _ = make(store, clock)
    namespace = namespaces.add("orders")
    first = add_dictionary("orders")
    store.activate("orders", first.id)
    namespaces.refresh_if_due()
    assert namespace.active_id is None  # not asked, and the interval has not passed
    namespaces.request_refresh()
    namespaces.refresh_if_due()
    assert namespace.active_id == first.id
    second = add_dictionary("orders")
    store.activate("orders", second.id)
    clock.now += DICTIONARY_CHECK_INTERVAL
    namespaces.refresh_if_due()
    assert namespace.active_id == second.id
    assert namespace.encoder.dict_id == second.id


def test_a_dictionary_that_cannot_be_loaded_keeps_the_current_encoder(
    store: DictionaryStore, add_dictionary: AddDictionary
) -> None:
    failing = False

    def factory(store: DictionaryStore, namespace: str) -> Encoder:
        if failing:
            raise StoreError("dictionary file damaged")
        return build(store, namespace)

    namespaces, _ = make(store, Clock(), factory=factory)
    namespace = namespaces.add("orders")
    before = namespace.encoder
    store.activate("orders", add_dictionary("orders").id)
    failing = True
    with capture_logs() as logs:
        namespaces.refresh()
        namespaces.refresh()  # the same activation is not tried again
    assert namespace.encoder is before
    assert [e["event"] for e in logs] == ["dictionary_load_failed"]


@pytest.mark.parametrize("sampling", [SamplingSettings(), None])
def test_only_sampled_namespaces_have_a_reservoir(
    store: DictionaryStore, sampling: SamplingSettings | None
) -> None:
    namespaces, _ = make(store, Clock(), sampling)
    namespaces.add("orders")
    namespaces.add("payments")
    if sampling is None:
        assert namespaces.reservoirs() == {}
    else:
        assert sorted(namespaces.reservoirs()) == ["orders", "payments"]
    assert namespaces.topics() == ["orders", "payments"]


def test_the_pass_through_baseline_builds_encoders_that_compress_nothing(tmp_path: Path) -> None:
    store = DictionaryStore(tmp_path)
    encoder = encoder_factory(CodecSettings(), compress=False)(store, "orders")
    assert encoder.min_size == NEVER_COMPRESS
    (result,) = encoder.encode_batch([(b"{}" * 500, None)])
    assert result.outcome == Outcome.BELOW_THRESHOLD


@pytest.mark.parametrize("trained", [False, True])
def test_a_pass_through_namespace_announces_no_dictionary_in_the_metrics(
    store: DictionaryStore, add_dictionary: AddDictionary, trained: bool
) -> None:
    """was: a pass-through deployment without a dictionary exported dict_id 0, "compressing
    without a dictionary", and ZdictNoDictionary warned for it (issue 28, point 4)."""
    if trained:
        add_dictionary("orders")
    registry = CollectorRegistry()
    namespaces = Namespaces(
        store,
        encoder_factory(CodecSettings(), compress=False),
        Metrics(registry),
        None,
        Clock(),
        compress=False,
    )
    with capture_logs() as logs:
        namespaces.add("orders")
    assert dictionary_id(registry, "orders") is None
    created = "zdict_dictionary_created_timestamp_seconds"
    assert registry.get_sample_value(created, {"topic": "orders"}) is None
    assert [e["event"] for e in logs] == ["passing_through"]
    # The same store compressing: the topic's dictionary series is there.
    compressing, compressing_registry = make(store, Clock())
    compressing.add("orders")
    assert dictionary_id(compressing_registry, "orders") is not None
