"""`dicts retire`'s decision without a broker: a dictionary goes only when it is neither active
nor in the rollback stack, is older than the operator's bound, and every partition of every
topic named for its namespace holds no record from before the namespace's cutoff."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from sidecar.config import load_settings
from sidecar.dictionaries.model import DictionaryMeta
from sidecar.dictionaries.registry_state import Activation
from sidecar.dictionaries.retire_run import configured_namespace_topics
from sidecar.dictionaries.retirement import (
    PartitionSpan,
    Retention,
    TopicRecords,
    Verdict,
    cutoff,
    judge,
)
from sidecar.errors import ConfigError
from tests.unit.registry_records import activation, make

NOW = datetime(2026, 6, 1, tzinfo=UTC)
OLD = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def metas(trained_bytes: bytes) -> list[DictionaryMeta]:
    """Four dictionaries of `orders`, ids 32768..32771, created long ago."""
    return [
        make(trained_bytes, dict_id=32768 + i).meta.model_copy(update={"created_at": OLD})
        for i in range(4)
    ]


#: A topic whose records are deleted after 7 days.
WEEK = Retention("delete", 7 * 24 * 3600 * 1000, -1)


def _verdicts(
    metas: list[DictionaryMeta],
    active: Activation,
    spans: list[PartitionSpan] | None,
    older_than: timedelta = timedelta(days=30),
) -> dict[int, Verdict]:
    topics = {}
    if spans is not None:
        names = dict.fromkeys(s.topic for s in spans) or {"orders": None}
        named = [TopicRecords(t, WEEK, tuple(s for s in spans if s.topic == t)) for t in names]
        topics = {"orders": named}
    verdicts = judge(metas, {"orders": active}, topics, NOW, older_than, timedelta(hours=1))
    return {v.meta.id: v for v in verdicts}


def test_only_a_dictionary_out_of_use_whose_records_are_gone_everywhere_is_retired(
    metas: list[DictionaryMeta],
) -> None:
    active = activation("orders", 32771, stack=(32770,))
    gone = [PartitionSpan("orders", 0, 500, 400), PartitionSpan("orders.zd", 0, 7, 7)]
    verdicts = _verdicts(metas, active, gone)
    assert [i for i, v in verdicts.items() if v.retire] == [32768, 32769]
    assert verdicts[32771].reason == "active"
    assert verdicts[32770].reason == "in the rollback stack"
    assert "orders, orders.zd" in verdicts[32768].reason


def test_one_partition_still_holding_older_records_keeps_them_all(
    metas: list[DictionaryMeta],
) -> None:
    active = activation("orders", 32771)
    spans = [PartitionSpan("orders", 0, 500, 400), PartitionSpan("orders", 1, 10, 42)]
    verdicts = _verdicts(metas, active, spans)
    assert not any(v.retire for v in verdicts.values())
    assert "orders[1] still holds records from before the cutoff (offsets 10..41)" in (
        verdicts[32768].reason
    )
    # When retention takes them: 7 days after the activation and the margin.
    assert "retention.ms takes them from 2026-01-08 01:00 UTC" in verdicts[32768].reason


def test_no_topic_named_a_recent_dictionary_or_no_activation_keeps_them(
    metas: list[DictionaryMeta],
) -> None:
    active = activation("orders", 32771)
    assert "no topic named" in _verdicts(metas, active, None)[32768].reason
    recent = _verdicts(metas, active, [], older_than=timedelta(days=365))[32768]
    assert not recent.retire and "within --older-than" in recent.reason
    unknown = judge(metas, {}, {}, NOW, timedelta(0), timedelta(0))
    assert not any(v.retire for v in unknown) and "no activation" in unknown[0].reason


def test_the_cutoff_is_the_activation_plus_the_margin() -> None:
    active = activation("orders", 32771)
    assert cutoff(active, timedelta(hours=1)) == active.at + timedelta(hours=1)


@pytest.mark.parametrize(
    ("retention", "why"),
    [
        (Retention("compact", -1, -1), "cleanup.policy=compact: compaction keeps a record per key"),
        (Retention("delete", -1, -1), "records are kept forever"),
    ],
)
def test_a_topic_whose_retention_never_takes_a_record_keeps_every_dictionary(
    metas: list[DictionaryMeta], retention: Retention, why: str
) -> None:
    named = {"orders": [TopicRecords("orders", retention)]}
    active = activation("orders", 32771)
    verdicts = judge(metas, {"orders": active}, named, NOW, timedelta(0), timedelta(0))
    assert not any(v.retire for v in verdicts)
    assert verdicts[0].reason.startswith("orders: ") and why in verdicts[0].reason


def test_retention_is_read_from_the_broker_settings_and_compact_delete_takes_records() -> None:
    settings = {"cleanup.policy": "compact,delete", "retention.ms": "3600000"}
    retention = Retention.of(settings | {"retention.bytes": "-1"})
    assert retention == Retention("compact,delete", 3_600_000, -1)
    assert retention.never is None
    assert Retention("delete", -1, 1 << 30).never is None  # retention.bytes takes them


def test_the_configured_topics_of_a_namespace_are_its_input_its_relay_output_and_proxied() -> None:
    settings = load_settings(
        relay={"input_topics": ["a", "b"]},
        proxy={"topics": ["b", "c"]},
        training={"retire": "apply"},
    )
    assert settings.training.retire == "apply"
    assert configured_namespace_topics(settings) == {
        "a": ["a", "a.zd"],
        "b": ["b", "b.zd"],
        "c": ["c"],
    }
    decoding = load_settings(relay={"input_topics": ["a.zd"], "mode": "decode"})
    assert configured_namespace_topics(decoding) == {}


def test_an_unknown_retirement_mode_is_refused_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ZDICT_TRAINING__RETIRE", "yes")
    with pytest.raises(ConfigError, match="ZDICT_TRAINING__RETIRE"):
        load_settings()
