"""Metrics, health and the observability HTTP server; a fresh registry in every test."""

from __future__ import annotations

import gzip
import json
import math
import socket
import threading
import time
import urllib.error
import urllib.request
from collections import Counter as Tally
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sidecar.bench.events import generate
from sidecar.cgroup_memory import CgroupMemory
from sidecar.codec import DEFAULT_HEADER_KEY, Encoder, Outcome, Transformed
from sidecar.health import Health, ObservabilityServer
from sidecar.metrics import (
    CODEC_BATCH_BUCKETS,
    MAX_PRODUCE_ERROR_REASONS,
    OTHER_REASON,
    TRAINING_RESULTS,
    Metrics,
    build_info,
)
from sidecar.metrics.stored import PROXY, RELAY
from sidecar.training.params import SKIPPED, Decision
from tests.unit.dictionaries import AddDictionary
from tests.unit.relay_fakes import Clock, make_relay

# -- fixtures and helpers -------------------------------------------------------------------


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def metrics(registry: CollectorRegistry) -> Metrics:
    return Metrics(registry)


@pytest.fixture(scope="module")
def encoded() -> list[Transformed]:
    """A batch hitting every outcome, encoded by a real no-dictionary Encoder."""
    records: list[tuple[bytes | None, list[tuple[str, bytes | None]] | None]] = [
        (v, None) for v in generate("product_viewed", 400, seed=3)
    ]
    records += [(v, None) for v in generate("access_log", 200, seed=3)]
    records += [(None, None)] * 7  # tombstones
    ours = Encoder(None).encode(b'{"already": "encoded"}' * 10)
    assert ours[1] == [(DEFAULT_HEADER_KEY, b"\x80\x00")]
    records += [ours] * 3
    records += [(gzip.compress(b"x" * 4000) + b"\0" * 200, None)] * 2  # precompressed
    records += [(bytes(range(256)), None)]  # random-ish, does not shrink: no_gain
    batch = Encoder(None).encode_batch(records)
    assert {e.outcome for e in batch} == set(Outcome.ALL), "the batch must cover every outcome"
    return batch


def scrape(registry: CollectorRegistry) -> dict[str, tuple[str, list[tuple[str, dict[str, str]]]]]:
    """Exposition text parsed back: family name -> (type, [(sample name, labels)])."""
    text = generate_latest(registry).decode()
    return {
        f.name: (f.type, [(s.name, dict(s.labels)) for s in f.samples])
        for f in text_string_to_metric_families(text)
    }


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


# -- names, types, labels ---------------------------------------------------------------------

#: Labels the Prometheus Operator (Kubernetes service discovery) puts on every target: a metric
#: label of the same name would be renamed exported_<name> (honorLabels is off by default).
TARGET_LABELS = {"namespace", "pod", "service", "container", "endpoint", "job", "instance"}

EXPECTED_FAMILIES = {
    # family name as parsed: (type, label names of its samples, "le" aside)
    "zdict_records": ("counter", {"topic", "op", "outcome"}),
    "zdict_input_bytes": ("counter", {"topic", "op"}),
    "zdict_output_bytes": ("counter", {"topic", "op"}),
    "zdict_codec_batch_duration_seconds": ("histogram", {"topic", "op"}),
    "zdict_codec_records": ("counter", {"topic", "op"}),
    "zdict_relay_latency_seconds": ("histogram", {"topic"}),
    "zdict_stored_bytes": ("counter", {"topic", "path"}),
    "zdict_stored_records": ("counter", {"topic", "path"}),
    "zdict_stored_batches": ("counter", {"topic", "path"}),
    "zdict_stored_without_sidecar_bytes": ("counter", {"topic", "path"}),
    "zdict_produce_errors": ("counter", {"reason"}),
    "zdict_commits": ("counter", {"result"}),
    "zdict_consumer_lag_records": ("gauge", {"topic", "partition"}),
    "zdict_assigned_partitions": ("gauge", {"group"}),
    "zdict_dictionary_info": ("gauge", {"topic", "dict_id", "version"}),
    "zdict_dictionary_heldout_compression_factor": ("gauge", {"topic"}),
    "zdict_dictionary_created_timestamp_seconds": ("gauge", {"topic"}),
    "zdict_batch_compression_level": ("gauge", {"topic"}),
    "zdict_training_runs": ("counter", {"topic", "result"}),
    "zdict_training_duration_seconds": ("histogram", {"topic"}),
    "zdict_last_training_timestamp_seconds": ("gauge", {"topic", "trigger", "result"}),
    "zdict_memory_limit_bytes": ("gauge", set()),
    "zdict_memory_working_set_bytes": ("gauge", set()),
    "zdict_build_info": (
        "gauge",
        {"version", "python", "zstandard", "libzstd", "confluent_kafka", "librdkafka"},
    ),
}


def test_every_metric_is_exposed_with_its_name_type_and_bounded_labels(
    metrics: Metrics, registry: CollectorRegistry, encoded: list[Transformed]
) -> None:
    metrics.observe_batch("orders", encoded, 0.001)
    metrics.observe_delivery_latency("orders", 0.02)
    metrics.produce_error("_MSG_TIMED_OUT")
    metrics.commit(ok=True)
    metrics.set_lag("orders", 0, 12)
    metrics.set_assigned_partitions(3)
    metrics.set_active_dictionary("orders", 4242, 2, 2.5, datetime(2025, 1, 2, tzinfo=UTC))
    metrics.training_run("orders", Decision.PROMOTED, 12.0)
    metrics.namespace("orders").last_training(
        {"finished_at": 1.7e9, "trigger": "manual", "decision": "rejected"}
    )
    metrics.stored.add("orders", RELAY, 3, 120, 9000, 12_000)
    metrics.set_batch_level("orders", 9)

    families = scrape(registry)

    for name, (kind, labels) in EXPECTED_FAMILIES.items():
        assert name in families, f"{name} missing from the exposition"
        got_kind, samples = families[name]
        assert got_kind == kind, name
        main = [lbl for s, lbl in samples if not s.endswith("_created")]
        assert main, f"{name} has no samples"
        for lbl in main:
            assert set(lbl) - {"le"} == labels, (name, lbl)
    exported_labels = {
        label for _, samples in families.values() for _, lbl in samples for label in lbl
    }
    assert not exported_labels & TARGET_LABELS
    counter_samples = {s for s, _ in families["zdict_records"][1]}
    assert "zdict_records_total" in counter_samples
    assert value(registry, "zdict_dictionary_info", topic="orders", dict_id="4242", version="2")
    assert value(registry, "zdict_build_info", **build_info()) == 1.0
    assert value(registry, "zdict_batch_compression_level", topic="orders") == 9
    metrics.set_batch_level("orders", None)
    assert value(registry, "zdict_batch_compression_level", topic="orders") is None


def test_the_codec_batch_histogram_spans_a_few_records_to_a_large_batch(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    metrics.namespace("orders")
    _, samples = scrape(registry)["zdict_codec_batch_duration_seconds"]
    bounds = [float(lbl["le"]) for s, lbl in samples if s.endswith("_bucket")]
    assert bounds[: len(CODEC_BATCH_BUCKETS)] == list(CODEC_BATCH_BUCKETS)
    assert bounds[0] == 10e-6 and bounds[-2] == 2.5 and bounds[-1] == float("inf")


def test_registering_a_namespace_initialises_every_outcome_at_zero(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    metrics.namespace("orders")
    for outcome in Outcome.ALL:
        assert (
            value(registry, "zdict_records_total", topic="orders", op="encode", outcome=outcome)
            == 0
        )
    for result in TRAINING_RESULTS:
        assert value(registry, "zdict_training_runs_total", topic="orders", result=result) == 0
    assert value(registry, "zdict_input_bytes_total", topic="orders", op="encode") == 0
    assert value(registry, "zdict_commits_total", result="failed") == 0


def test_the_assigned_partitions_carry_the_consumer_group_from_joining_it() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry, group="orders-relay")
    metrics.join_group()
    assert value(registry, "zdict_assigned_partitions", group="orders-relay") == 0
    metrics.set_assigned_partitions(4)
    metrics.join_group()  # joining again keeps what is held
    assert value(registry, "zdict_assigned_partitions", group="orders-relay") == 4


def test_a_process_that_never_joins_its_group_exports_no_assignment() -> None:
    """was: every process exported zdict_assigned_partitions{group} = 0 from its start, so a
    proxy that never joins a group (--no-training, --pass-through) paged
    ZdictNoPartitionAssigned after 5 minutes (issue 28, point 2)."""
    registry = CollectorRegistry()
    metrics = Metrics(registry, group="orders-zdict-proxy")
    metrics.namespace("orders")
    assert scrape(registry)["zdict_assigned_partitions"] == ("gauge", [])
    metrics.set_assigned_partitions(2)  # a first assignment without join_group: exported too
    assert value(registry, "zdict_assigned_partitions", group="orders-zdict-proxy") == 2


def test_each_registry_is_independent_and_a_second_metrics_on_one_registry_is_refused(
    registry: CollectorRegistry,
) -> None:
    first = Metrics(registry)
    other = CollectorRegistry()
    Metrics(other).set_assigned_partitions(5)
    first.join_group()
    assert value(registry, "zdict_assigned_partitions", group="") == 0
    assert first.registry is registry
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        Metrics(registry)


# -- the hot path -----------------------------------------------------------------------------


def test_observe_batch_counts_add_up_to_the_encoded_outcomes_and_bytes(
    metrics: Metrics, registry: CollectorRegistry, encoded: list[Transformed]
) -> None:
    metrics.observe_batch("orders", encoded, 0.002)
    metrics.observe_batch("orders", encoded[:10], 0.0001)

    expected = Tally(e.outcome for e in encoded) + Tally(e.outcome for e in encoded[:10])
    for outcome in Outcome.ALL:
        got = value(registry, "zdict_records_total", topic="orders", op="encode", outcome=outcome)
        assert got == expected[outcome], outcome
    in_bytes = sum(e.input_bytes for e in encoded) + sum(e.input_bytes for e in encoded[:10])
    out_bytes = sum(e.output_bytes for e in encoded) + sum(e.output_bytes for e in encoded[:10])
    assert value(registry, "zdict_input_bytes_total", topic="orders", op="encode") == in_bytes
    assert value(registry, "zdict_output_bytes_total", topic="orders", op="encode") == out_bytes
    assert out_bytes < in_bytes  # compressed records make up for the header bytes


def test_observe_batch_matches_the_encoders_own_stats(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    encoder = Encoder(None)
    batch = encoder.encode_batch((v, None) for v in generate("customer", 300, seed=11))
    metrics.observe_batch("customers", batch, 0.001)
    stats = encoder.stats
    for outcome in Outcome.ALL:
        got = value(
            registry, "zdict_records_total", topic="customers", op="encode", outcome=outcome
        )
        assert got == stats.outcomes[outcome]
    assert (
        value(registry, "zdict_input_bytes_total", topic="customers", op="encode")
        == stats.input_bytes
    )
    assert (
        value(registry, "zdict_output_bytes_total", topic="customers", op="encode")
        == stats.output_bytes
    )


def test_observe_batch_increments_once_per_distinct_label_set_not_per_message(
    metrics: Metrics, encoded: list[Transformed], monkeypatch: pytest.MonkeyPatch
) -> None:
    children = metrics.namespace("orders")
    calls: list[float] = []
    real_inc = Counter.inc

    def counting_inc(self: Counter, amount: float = 1, exemplar: object = None) -> None:
        calls.append(amount)
        real_inc(self, amount)

    monkeypatch.setattr(Counter, "inc", counting_inc)
    children.observe_batch(encoded, 0.001)
    distinct_outcomes = len({e.outcome for e in encoded})
    assert len(calls) == distinct_outcomes + 3  # + input bytes, output bytes, codec records
    assert len(encoded) > 10 * len(calls)


def test_the_codec_time_is_observed_once_per_batch_with_its_records_counted_beside(
    metrics: Metrics, registry: CollectorRegistry, encoded: list[Transformed]
) -> None:
    """was: `zdict_compress_seconds` observed each batch's per-message mean, which the dashboard
    read as a per-message percentile (issue 28, point 10)."""
    metrics.observe_batch("orders", encoded, 0.003)
    metrics.observe_batch("orders", encoded[:10], 0.001)
    labels = {"topic": "orders", "op": "encode"}
    assert value(registry, "zdict_codec_batch_duration_seconds_count", **labels) == 2
    assert value(registry, "zdict_codec_batch_duration_seconds_sum", **labels) == pytest.approx(
        0.004
    )
    assert value(registry, "zdict_codec_records_total", **labels) == len(encoded) + 10
    per_record = 0.004 / (len(encoded) + 10)
    seconds = value(registry, "zdict_codec_batch_duration_seconds_sum", **labels)
    records = value(registry, "zdict_codec_records_total", **labels)
    assert seconds is not None and records is not None
    assert seconds / records == pytest.approx(per_record)


def test_an_empty_batch_observes_nothing(metrics: Metrics, registry: CollectorRegistry) -> None:
    metrics.observe_batch("orders", [], 0.5)
    labels = {"topic": "orders", "op": "encode"}
    assert value(registry, "zdict_codec_batch_duration_seconds_count", **labels) == 0
    assert value(registry, "zdict_codec_records_total", **labels) == 0
    assert value(registry, "zdict_input_bytes_total", **labels) == 0


def test_observe_counts_takes_pre_aggregated_totals(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    children = metrics.namespace("orders")
    children.observe_counts({Outcome.COMPRESSED: 8, Outcome.TOMBSTONE: 2}, 1000, 300, 0.00001)
    assert (
        value(registry, "zdict_records_total", topic="orders", op="encode", outcome="compressed")
        == 8
    )
    assert value(registry, "zdict_output_bytes_total", topic="orders", op="encode") == 300
    assert value(
        registry, "zdict_codec_batch_duration_seconds_sum", topic="orders", op="encode"
    ) == pytest.approx(1e-5)
    assert value(registry, "zdict_codec_records_total", topic="orders", op="encode") == 10


def test_delivery_latency_is_a_histogram_and_negative_skew_counts_as_zero(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    metrics.observe_delivery_latency("orders", 0.004)
    metrics.observe_delivery_latency("orders", -2.0)  # producer clock ahead of ours
    assert value(registry, "zdict_relay_latency_seconds_count", topic="orders") == 2
    assert value(registry, "zdict_relay_latency_seconds_sum", topic="orders") == 0.004
    le_1ms = value(registry, "zdict_relay_latency_seconds_bucket", topic="orders", le="0.001")
    assert le_1ms == 1


def test_an_encoding_and_a_decoding_relay_count_their_bytes_under_their_own_mode(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    # One encoder (1000 -> 400 B) and one decoder (400 -> 1000 B) in the same job: summed
    # without the op, the ratio would read 1.0 and nothing saved.
    metrics.namespace("orders").observe_counts({Outcome.COMPRESSED: 10}, 1000, 400, 1e-5)
    decoding = metrics.namespace("orders.zd", Outcome.DECODE_ALL)
    decoding.observe_counts({Outcome.DECODED: 10}, 400, 1000, 1e-5)
    encoded_in = value(registry, "zdict_input_bytes_total", topic="orders", op="encode")
    encoded_out = value(registry, "zdict_output_bytes_total", topic="orders", op="encode")
    assert (encoded_in, encoded_out) == (1000, 400)
    assert value(registry, "zdict_output_bytes_total", topic="orders.zd", op="decode") == 1000
    for outcome in Outcome.DECODE_ALL:
        got = value(
            registry, "zdict_records_total", topic="orders.zd", op="decode", outcome=outcome
        )
        assert got == (10 if outcome == Outcome.DECODED else 0)
    labels = {"topic": "orders.zd", "op": "decode"}
    assert value(registry, "zdict_codec_batch_duration_seconds_count", **labels) == 1
    assert value(registry, "zdict_codec_records_total", **labels) == 10


def test_stored_bytes_add_up_per_topic_and_path(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    metrics.stored.add("orders", RELAY, 2, 100, 6100, 9000)
    metrics.stored.add("orders", RELAY, 1, 20, 1300, 1200)
    metrics.stored.add("orders", PROXY, 1, 5, 400, 400)
    relay = {"topic": "orders", "path": RELAY}
    assert value(registry, "zdict_stored_batches_total", **relay) == 3
    assert value(registry, "zdict_stored_records_total", **relay) == 120
    assert value(registry, "zdict_stored_bytes_total", **relay) == 7400
    assert value(registry, "zdict_stored_without_sidecar_bytes_total", **relay) == 10_200
    assert value(registry, "zdict_stored_bytes_total", topic="orders", path=PROXY) == 400


def _producer_stats(topics: dict[str, tuple[int, int, int]]) -> str:
    """librdkafka producer statistics: per topic (batches, records, bytes) in the window."""
    return json.dumps(
        {
            "type": "producer",
            "topics": {
                topic: {
                    "batchsize": {"cnt": batches, "sum": size, "avg": size // max(batches, 1)},
                    "batchcnt": {"cnt": batches, "sum": records},
                    "partitions": {"0": {"partition": 0, "consumer_lag": -1}},
                }
                for topic, (batches, records, size) in topics.items()
            },
        }
    )


def test_the_relays_producer_statistics_count_each_output_under_its_input_topic(
    tmp_path: Path,
) -> None:
    registry = CollectorRegistry()
    _relay, _, _, events = make_relay(
        tmp_path,
        Clock(),
        outputs={"orders": "orders.zd", "a": "shared.zd", "b": "shared.zd"},
        partitions={},
        metrics=Metrics(registry),
        dead_letters={"orders": "orders.dlq"},
    )
    stats = {"orders.zd": (4, 400, 30_000), "shared.zd": (1, 10, 900), "orders.dlq": (1, 1, 99)}
    events.on_stats(_producer_stats(stats))
    events.on_stats(_producer_stats({"orders.zd": (1, 50, 4000)}))
    orders = {"topic": "orders", "path": RELAY}
    assert value(registry, "zdict_stored_bytes_total", **orders) == 34_000
    assert value(registry, "zdict_stored_records_total", **orders) == 450
    assert value(registry, "zdict_stored_batches_total", **orders) == 5
    # Nothing consumed, nothing sampled: no estimate, so nothing is claimed saved.
    assert value(registry, "zdict_stored_without_sidecar_bytes_total", **orders) == 34_000
    # An output shared by two inputs cannot be split between them: counted under its name.
    assert value(registry, "zdict_stored_bytes_total", topic="shared.zd", path=RELAY) == 900
    # Dead letters are not the output; the consumer's statistics are not batches produced.
    assert value(registry, "zdict_stored_bytes_total", topic="orders.dlq", path=RELAY) is None
    consumer_stats = json.loads(_producer_stats({"orders.zd": (9, 9, 9)})) | {"type": "consumer"}
    events.on_stats(json.dumps(consumer_stats))
    assert value(registry, "zdict_stored_batches_total", **orders) == 5


# -- the latest training run, from the registry -------------------------------------------------


def last_training(registry: CollectorRegistry) -> list[tuple[dict[str, str], float]]:
    text = generate_latest(registry).decode()
    return [
        (dict(s.labels), s.value)
        for f in text_string_to_metric_families(text)
        if f.name == "zdict_last_training_timestamp_seconds"
        for s in f.samples
    ]


def test_the_latest_training_run_is_one_series_per_topic_replaced_by_the_next(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    orders = metrics.namespace("orders")
    orders.last_training({"finished_at": 1000.5, "trigger": "manual", "decision": "failed"})
    orders.last_training({"finished_at": 2000, "trigger": "scheduled", "decision": "promoted"})
    metrics.namespace("clicks").last_training(
        {"finished_at": 3000, "trigger": "manual", "decision": "rejected"}
    )
    assert sorted(last_training(registry), key=lambda s: s[1]) == [
        ({"topic": "orders", "trigger": "scheduled", "result": "promoted"}, 2000.0),
        ({"topic": "clicks", "trigger": "manual", "result": "rejected"}, 3000.0),
    ]


def test_a_run_skipped_because_the_topic_is_pinned_is_labelled_skipped_not_other(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    """was: `result="other"`, the label of unknown values, for the entry of a pinned topic."""
    orders = metrics.namespace("orders")
    orders.last_training({"finished_at": 7.0, "trigger": "scheduled", "decision": SKIPPED})
    assert last_training(registry) == [
        ({"topic": "orders", "trigger": "scheduled", "result": "skipped"}, 7.0)
    ]


def test_a_training_record_with_unknown_values_is_bounded_and_one_without_a_time_ignored(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    orders = metrics.namespace("orders")
    orders.last_training({"finished_at": "yesterday", "trigger": "manual", "decision": "failed"})
    orders.last_training({"trigger": "manual", "decision": "failed"})
    assert last_training(registry) == []
    orders.last_training({"finished_at": 5.0, "trigger": "x" * 500, "decision": "maybe"})
    assert last_training(registry) == [
        ({"topic": "orders", "trigger": OTHER_REASON, "result": OTHER_REASON}, 5.0)
    ]


# -- the container's memory ---------------------------------------------------------------------


def _cgroup(tmp_path: Path, proc: str, files: dict[str, str]) -> CgroupMemory:
    for name, text in files.items():
        path = tmp_path / "fs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / "cgroup").write_text(proc)
    return CgroupMemory(root=tmp_path / "fs", proc_cgroup=tmp_path / "cgroup")


def test_cgroup_v2_memory_is_the_limit_and_usage_minus_inactive_file_pages(tmp_path: Path) -> None:
    memory = _cgroup(
        tmp_path,
        "0::/kubepods/pod1/abc\n",
        {
            "kubepods/pod1/abc/memory.max": "335544320\n",
            "kubepods/pod1/abc/memory.current": "200000000\n",
            "kubepods/pod1/abc/memory.stat": "anon 150000000\ninactive_file 30000000\n",
        },
    )
    assert memory.read() == (335544320.0, 170_000_000)


def test_cgroup_v2_without_a_limit_reads_infinity_and_a_private_namespace_is_the_root(
    tmp_path: Path,
) -> None:
    # In a container with its own cgroup namespace /proc/self/cgroup says "/".
    memory = _cgroup(
        tmp_path,
        "0::/\n",
        {"memory.max": "max\n", "memory.current": "1000\n", "memory.stat": "file 10\n"},
    )
    assert memory.read() == (math.inf, 1000)


def test_cgroup_v1_memory_falls_back_to_the_mount_root_and_reads_huge_limits_as_none(
    tmp_path: Path,
) -> None:
    files = {
        "memory/memory.limit_in_bytes": "536870912\n",
        "memory/memory.usage_in_bytes": "100000\n",
        "memory/memory.stat": "cache 5\ntotal_inactive_file 40000\n",
    }
    # The host's path, not visible inside the container: the mount's root is the container's.
    memory = _cgroup(tmp_path, "9:cpu,cpuacct:/docker/x\n4:memory:/docker/x\n", files)
    assert memory.read() == (536870912.0, 60_000)
    files["memory/memory.limit_in_bytes"] = "9223372036854771712\n"
    assert _cgroup(tmp_path, "4:memory:/\n", files).read() == (math.inf, 60_000)


def test_no_memory_cgroup_exports_no_memory_series(tmp_path: Path) -> None:
    memory = _cgroup(tmp_path, "0::/\n", {})
    assert memory.read() is None
    registry = CollectorRegistry()
    Metrics(registry, memory=memory)
    assert "zdict_memory_limit_bytes" not in scrape(registry)
    missing = CgroupMemory(root=tmp_path / "fs", proc_cgroup=tmp_path / "nothing")
    assert missing.read() is None


def test_the_memory_limit_and_working_set_are_exposed_infinity_included(tmp_path: Path) -> None:
    memory = _cgroup(
        tmp_path, "0::/\n", {"memory.max": "max", "memory.current": "7", "memory.stat": ""}
    )
    registry = CollectorRegistry()
    Metrics(registry, memory=memory)
    assert value(registry, "zdict_memory_limit_bytes") == math.inf
    assert value(registry, "zdict_memory_working_set_bytes") == 7
    assert b"zdict_memory_limit_bytes +Inf" in generate_latest(registry)


# -- dictionaries -----------------------------------------------------------------------------


def info_series(registry: CollectorRegistry) -> list[tuple[dict[str, str], float]]:
    text = generate_latest(registry).decode()
    return [
        (dict(s.labels), s.value)
        for f in text_string_to_metric_families(text)
        if f.name == "zdict_dictionary_info"
        for s in f.samples
    ]


def test_switching_the_active_dictionary_leaves_exactly_one_info_series_per_namespace(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    created = datetime(2025, 6, 1, 12, tzinfo=UTC)
    metrics.set_active_dictionary("orders", 0, 0, None, None)
    metrics.set_active_dictionary("orders", 1001, 1, 2.1, created)
    metrics.set_active_dictionary("clicks", 2002, 1, 3.0, created)
    metrics.set_active_dictionary("orders", 1003, 2, 2.4, created)

    series = info_series(registry)
    by_namespace = Tally(labels["topic"] for labels, _ in series)
    assert by_namespace == {"orders": 1, "clicks": 1}
    assert ({"topic": "orders", "dict_id": "1003", "version": "2"}, 1.0) in series
    assert ({"topic": "clicks", "dict_id": "2002", "version": "1"}, 1.0) in series
    assert value(registry, "zdict_dictionary_heldout_compression_factor", topic="orders") == 2.4
    assert value(
        registry, "zdict_dictionary_created_timestamp_seconds", topic="orders"
    ) == pytest.approx(created.timestamp())


def test_no_dictionary_is_dict_id_zero_and_drops_the_ratio_and_creation_time(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    metrics.set_active_dictionary("orders", 1001, 1, 2.1, datetime(2025, 1, 1, tzinfo=UTC))
    metrics.set_dictionary("orders", None)
    assert info_series(registry) == [({"topic": "orders", "dict_id": "0", "version": "0"}, 1.0)]
    assert value(registry, "zdict_dictionary_heldout_compression_factor", topic="orders") is None
    assert value(registry, "zdict_dictionary_created_timestamp_seconds", topic="orders") is None


def test_set_dictionary_takes_identity_and_ratio_from_a_stored_dictionary(
    metrics: Metrics, registry: CollectorRegistry, add_dictionary: AddDictionary
) -> None:
    dictionary = add_dictionary("orders", heldout_ratio=2.75)
    metrics.set_dictionary("orders", dictionary)
    labels = {
        "topic": "orders",
        "dict_id": str(dictionary.id),
        "version": str(dictionary.meta.version),
    }
    assert info_series(registry) == [(labels, 1.0)]
    assert value(registry, "zdict_dictionary_heldout_compression_factor", topic="orders") == 2.75
    assert value(
        registry, "zdict_dictionary_created_timestamp_seconds", topic="orders"
    ) == pytest.approx(dictionary.meta.created_at.timestamp())


def test_a_naive_creation_time_is_taken_as_utc(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    metrics.set_active_dictionary("orders", 7, 1, 2.0, datetime(2025, 1, 1))
    got = value(registry, "zdict_dictionary_created_timestamp_seconds", topic="orders")
    assert got == datetime(2025, 1, 1, tzinfo=UTC).timestamp()


# -- consumer, producer, training -------------------------------------------------------------


def test_lag_is_per_partition_and_removed_with_the_partition(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    metrics.set_lag("orders", 0, 5)
    metrics.set_lag("orders", 1, 7)
    metrics.set_lag("orders", 0, 3)
    assert value(registry, "zdict_consumer_lag_records", topic="orders", partition="0") == 3
    metrics.remove_partition("orders", 0)
    metrics.remove_partition("orders", 9)  # never seen: a no-op
    assert value(registry, "zdict_consumer_lag_records", topic="orders", partition="0") is None
    assert value(registry, "zdict_consumer_lag_records", topic="orders", partition="1") == 7


def test_produce_error_reasons_are_counted_and_bounded(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    metrics.produce_error("_MSG_TIMED_OUT")
    metrics.produce_error("_MSG_TIMED_OUT")
    assert value(registry, "zdict_produce_errors_total", reason="_MSG_TIMED_OUT") == 2
    for i in range(MAX_PRODUCE_ERROR_REASONS + 10):
        metrics.produce_error(f"E{i}")
    reasons = {lbl["reason"] for s, lbl in scrape(registry)["zdict_produce_errors"][1]}
    assert len(reasons) == MAX_PRODUCE_ERROR_REASONS + 1  # the first 64, then "other"
    assert value(registry, "zdict_produce_errors_total", reason=OTHER_REASON) == 11


def test_commits_are_counted_by_result(metrics: Metrics, registry: CollectorRegistry) -> None:
    metrics.commit(ok=True)
    metrics.commit(ok=True)
    metrics.commit(ok=False)
    assert value(registry, "zdict_commits_total", result="ok") == 2
    assert value(registry, "zdict_commits_total", result="failed") == 1


def test_training_runs_are_counted_by_result_and_timed(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    metrics.training_run("orders", Decision.PROMOTED, 40.0)
    metrics.training_run("orders", "rejected", 20.0)
    assert value(registry, "zdict_training_runs_total", topic="orders", result="promoted") == 1
    assert value(registry, "zdict_training_runs_total", topic="orders", result="rejected") == 1
    assert value(registry, "zdict_training_duration_seconds_sum", topic="orders") == 60.0
    with pytest.raises(ValueError, match="training result 'maybe'"):
        metrics.training_run("orders", "maybe", 1.0)


def test_build_info_names_our_version_and_the_native_libraries(
    registry: CollectorRegistry,
) -> None:
    import zstandard

    from sidecar import __version__

    Metrics(registry)
    info = build_info()
    assert info["version"] == __version__
    assert info["libzstd"] == ".".join(map(str, zstandard.ZSTD_VERSION))
    assert info["librdkafka"] != "unknown" and info["confluent_kafka"] != "unknown"
    assert value(registry, "zdict_build_info", **info) == 1.0


# -- health -----------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_health_is_alive_until_the_heartbeat_is_older_than_the_staleness() -> None:
    clock = FakeClock()
    health = Health(staleness_seconds=10, clock=clock)
    assert health.liveness() == (True, "ok")
    clock.now += 9
    assert health.alive
    clock.now += 2
    alive, why = health.liveness()
    assert not alive and "11.0s old" in why and "limit 10s" in why
    health.beat()
    assert health.alive


def test_health_is_ready_with_an_encoder_while_alive_and_not_stopping_whatever_is_assigned() -> (
    None
):
    clock = FakeClock()
    health = Health(staleness_seconds=5, clock=clock)
    assert health.readiness() == (False, "no encoder ready yet")
    health.set_encoder_ready()
    # No partition assigned (more pods than partitions, a surge pod): ready all the same.
    assert health.readiness() == (True, "ready")
    clock.now += 6
    assert not health.ready and "heartbeat" in health.readiness()[1]
    health.beat()
    health.set_stopping()
    assert health.readiness() == (False, "shutting down")


def test_a_start_longer_than_the_staleness_is_alive_and_its_end_counts_as_a_beat() -> None:
    clock = FakeClock()
    health = Health(staleness_seconds=10, clock=clock)
    with health.starting():
        clock.now += 60  # a registry read at start, longer than the staleness
        assert health.liveness() == (True, "starting")
        assert health.readiness() == (False, "no encoder ready yet")
    assert health.liveness() == (True, "ok")
    clock.now += 11
    assert not health.alive


def test_health_refuses_a_non_positive_staleness() -> None:
    with pytest.raises(ValueError, match="staleness_seconds"):
        Health(staleness_seconds=0)


# -- the HTTP server, on a real loopback socket -----------------------------------------------

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with _OPENER.open(request, timeout=5) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read(), dict(error.headers)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def health(clock: FakeClock) -> Health:
    return Health(staleness_seconds=30, clock=clock)


@pytest.fixture
def server(registry: CollectorRegistry, metrics: Metrics, health: Health) -> Iterator[str]:
    """Base URL of a running server on a free loopback port."""
    http = ObservabilityServer(registry, health)
    _, port = http.start("127.0.0.1", 0)
    assert port > 0 and http.port == port
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        http.stop()


def test_metrics_endpoint_serves_the_registry_in_prometheus_text_format(
    server: str, metrics: Metrics, encoded: list[Transformed]
) -> None:
    metrics.observe_batch("orders", encoded, 0.001)
    status, body, headers = get(server + "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=")
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    compressed = [
        s
        for s in families["zdict_records"].samples
        if s.name == "zdict_records_total" and s.labels["outcome"] == "compressed"
    ]
    assert compressed[0].value == sum(e.outcome == Outcome.COMPRESSED for e in encoded)


def test_metrics_endpoint_gzips_when_asked(server: str) -> None:
    status, body, headers = get(server + "/metrics", {"Accept-Encoding": "gzip"})
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    assert b'zdict_commits_total{result="failed"} 0.0' in gzip.decompress(body)


def test_metrics_endpoint_speaks_openmetrics_when_asked(server: str) -> None:
    status, body, headers = get(server + "/metrics", {"Accept": "application/openmetrics-text"})
    assert status == 200 and headers["Content-Type"].startswith("application/openmetrics-text")
    assert body.rstrip().endswith(b"# EOF")
    assert b"# TYPE zdict_dictionary info" in body


def test_healthz_is_200_while_the_heartbeat_is_fresh_and_503_once_stale(
    server: str, health: Health, clock: FakeClock
) -> None:
    assert get(server + "/healthz")[:2] == (200, b"ok\n")
    clock.now += 31
    status, body, _ = get(server + "/healthz")
    assert status == 503 and b"heartbeat is 31.0s old" in body
    health.beat()
    assert get(server + "/healthz")[0] == 200


def test_readyz_is_503_with_a_one_line_reason_until_ready_and_once_stopping(
    server: str, health: Health
) -> None:
    status, body, _ = get(server + "/readyz")
    assert (status, body) == (503, b"no encoder ready yet\n")
    health.set_encoder_ready()
    assert get(server + "/readyz")[:2] == (200, b"ready\n")
    health.set_stopping()
    assert get(server + "/readyz")[:2] == (503, b"shutting down\n")


@pytest.mark.parametrize("path", ["/", "/metrics/extra", "/healthz/", "/favicon.ico"])
def test_any_other_path_is_404(server: str, path: str) -> None:
    assert get(server + path)[0] == 404


def test_query_strings_do_not_change_the_route(server: str) -> None:
    assert get(server + "/healthz?verbose=1")[:2] == (200, b"ok\n")


def test_a_malformed_request_gets_400_and_the_server_keeps_serving(server: str) -> None:
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(b"GARBAGE\r\n\r\n")
        response = conn.recv(4096)  # an HTTP/0.9-style reply: the error page without a status line
        assert b"Error code: 400" in response
    assert get(server + "/healthz")[0] == 200


def test_stop_closes_the_socket_and_a_stopped_server_can_start_again(
    registry: CollectorRegistry, health: Health
) -> None:
    http = ObservabilityServer(registry, health)
    _, port = http.start("127.0.0.1", 0)
    with pytest.raises(RuntimeError, match="already running"):
        http.start("127.0.0.1", 0)
    http.stop()
    assert http.port is None
    with pytest.raises(urllib.error.URLError):
        _OPENER.open(f"http://127.0.0.1:{port}/healthz", timeout=2)
    http.stop()  # idempotent
    with http:
        _, port = http.start("127.0.0.1", 0)
        assert get(f"http://127.0.0.1:{port}/healthz")[0] == 200
    assert http.port is None


def _serving_thread(port: int) -> threading.Thread:
    (thread,) = [t for t in threading.enumerate() if t.name == f"zdict-http-{port}"]
    return thread


def _voluntary_switches(thread: threading.Thread) -> int:
    """How many times `thread` has gone to sleep in the kernel (Linux counts it per thread)."""
    status = Path(f"/proc/self/task/{thread.native_id}/status").read_text()
    (line,) = [x for x in status.splitlines() if x.startswith("voluntary_ctxt_switches:")]
    return int(line.split()[1])


def test_the_serving_thread_sleeps_until_a_connection_or_stop_while_idle(
    registry: CollectorRegistry, health: Health
) -> None:
    """was: serve_forever(poll_interval=0.05) woke the thread 20 times a second in every
    process, idle or not, each time taking the GIL from the relay or proxy loop."""
    with ObservabilityServer(registry, health) as http:
        _, port = http.start("127.0.0.1", 0)
        assert get(f"http://127.0.0.1:{port}/healthz")[0] == 200
        thread = _serving_thread(port)
        time.sleep(0.2)  # back in its wait after the request
        before = _voluntary_switches(thread)
        time.sleep(1.0)
        woken = _voluntary_switches(thread) - before
        assert woken < 5, f"the idle serving thread woke {woken} times in 1 s"
        assert get(f"http://127.0.0.1:{port}/healthz")[0] == 200


@pytest.mark.parametrize("requests", [0, 3])
def test_stop_returns_at_once_and_ends_the_serving_thread(
    registry: CollectorRegistry, health: Health, requests: int
) -> None:
    http = ObservabilityServer(registry, health)
    for _ in range(2):  # a stopped server starts again
        _, port = http.start("127.0.0.1", 0)
        for _ in range(requests):
            assert get(f"http://127.0.0.1:{port}/metrics")[0] == 200
        thread = _serving_thread(port)
        time.sleep(0.1)  # the thread is waiting, not starting up
        started = time.monotonic()
        http.stop()
        took = time.monotonic() - started
        assert took < 0.5, f"stop() took {took:.2f}s"
        assert not thread.is_alive()
        with pytest.raises(urllib.error.URLError):
            _OPENER.open(f"http://127.0.0.1:{port}/healthz", timeout=2)


def test_a_topic_has_no_trainer_series_until_the_trainer_decides(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    """was: every registered topic exported zdict_trainer 0, so a process that never trains
    (training disabled, pass-through, decoding) told ZdictTrainerNotUnique that nobody trained
    it, and a no-training proxy whose topic the retraining CronJob trains paged (issue 28,
    point 4)."""
    children = metrics.namespace("orders")
    assert value(registry, "zdict_trainer", topic="orders") is None
    children.set_trainer(False)
    assert value(registry, "zdict_trainer", topic="orders") == 0
    children.set_trainer(True)
    assert value(registry, "zdict_trainer", topic="orders") == 1
