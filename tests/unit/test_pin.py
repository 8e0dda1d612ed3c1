"""`dicts pin` / `unpin` in the registry's rules, and what `dicts status` makes of a registry,
a store and a sidecar's /metrics (no broker: a registry over an in-memory log)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from sidecar.cli.main import main
from sidecar.dictionaries.model import utc_now
from sidecar.dictionaries.registry_state import Activation, RegistryState
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import DictionaryNotFound, NamespacePinned
from sidecar.tools import status
from tests.unit.dictionaries import AddDictionary
from tests.unit.log_registry import NAMESPACE, LogRegistry, dictionary


@pytest.fixture
def registry(trained_bytes: bytes) -> LogRegistry:
    """Two dictionaries of `orders` published, the second active."""
    registry = LogRegistry()
    for dict_id in (40000, 40001):
        registry.publish(dictionary(trained_bytes, dict_id))
    return registry


def test_a_pin_holds_against_a_promotion_and_stays_through_activate_and_rollback(
    registry: LogRegistry, trained_bytes: bytes
) -> None:
    pinned = registry.pin(NAMESPACE, actor="operator")
    assert pinned.dict_id == 40001 and pinned.pinned is not None
    assert pinned.pinned.by == "operator" and pinned.action == "promote"
    assert registry.pin(NAMESPACE) == pinned  # twice: nothing new published
    registry.publish_dictionary(dictionary(trained_bytes, 40002), keep_id=True)
    with pytest.raises(NamespacePinned, match="dicts unpin --namespace orders"):
        registry.publish_activation(NAMESPACE, 40002, "promote")
    assert registry.state.activations[NAMESPACE].dict_id == 40001
    # The operator's own choices still go through, and keep the pin.
    assert registry.publish_activation(NAMESPACE, 40002, "activate").pinned == pinned.pinned
    assert registry.rollback(NAMESPACE).pinned == pinned.pinned
    assert registry.state.activations[NAMESPACE].dict_id == 40001
    assert registry.unpin(NAMESPACE).pinned is None
    assert registry.publish_activation(NAMESPACE, 40002, "promote").pinned is None


def test_only_a_namespace_with_an_active_dictionary_can_be_pinned() -> None:
    with pytest.raises(DictionaryNotFound, match="activate one first"):
        LogRegistry().pin("clicks")


def test_a_pin_reads_as_an_unknown_field_to_a_reader_that_knows_none(
    registry: LogRegistry,
) -> None:
    # A reader of the previous version: its Activation has no `pinned`, and allows extras.
    registry.pin(NAMESPACE)
    _, value, _ = registry.log[-1]
    older = json.loads(value or b"")
    assert older["pinned"]["by"] == "test"
    del older["pinned"]
    assert Activation.model_validate(older).pinned is None
    # And a record of the previous version (no field) reads as not pinned.
    state = RegistryState()
    for offset, record in enumerate(registry.log[:-1]):
        state.apply(offset, *record)
    assert state.activations[NAMESPACE].pinned is None


def test_status_from_the_registry_names_the_pin_and_the_last_training(
    registry: LogRegistry,
) -> None:
    registry.pin(NAMESPACE, actor="operator")
    finished = (utc_now() - timedelta(hours=2)).timestamp()
    registry.publish_training(
        NAMESPACE,
        {"decision": "rejected", "reason": "held-out ratio 2.1 does not beat", "trigger": "manual"}
        | {"finished_at": finished},
    )
    registry.refresh()
    (row,) = status.from_registry(registry.state)
    now = utc_now()
    entry = row.to_dict(now)
    assert entry["dict_id"] == 40001 and entry["pinned"] is True
    assert entry["pinned_by"] == "operator" and entry["heldout_ratio"] == 2.0
    assert entry["last_training"]["decision"] == "rejected"
    text = status.format_status([row], now, "registry topic t")
    assert "rejected (manual, 2h 0m ago)" in text
    assert "orders: pinned by operator at" in text and "held-out ratio 2.1 does not beat" in text


METRICS = """\
# HELP zdict_live_compression_factor Raw / output bytes over the drift window.
# TYPE zdict_live_compression_factor gauge
zdict_live_compression_factor{topic="orders"} 2.5
# HELP zdict_output_mode 1 for the mode an output partition is written in.
# TYPE zdict_output_mode gauge
zdict_output_mode{mode="frames",partition="0",topic="orders.zd"} 1.0
zdict_output_mode{mode="raw",partition="0",topic="orders.zd"} 0.0
zdict_output_mode{mode="frames",partition="1",topic="orders.zd"} 0.0
zdict_output_mode{mode="raw",partition="1",topic="orders.zd"} 1.0
zdict_output_mode{mode="frames",partition="-1",topic="clicks"} 1.0
"""


def test_status_with_metrics_shows_the_live_ratio_and_each_partitions_mode(
    registry: LogRegistry,
) -> None:
    rows = status.add_metrics(
        status.from_registry(registry.state),
        METRICS,
        "http://x/metrics",
        lambda topic: topic.removesuffix(".zd"),
    )
    by_name = {r.namespace: r for r in rows}
    assert by_name["orders"].live_ratio == 2.5
    assert by_name["orders"].modes == {0: "frames", 1: "raw"}
    assert by_name["clicks"].active is None and by_name["clicks"].modes == {-1: "frames"}
    text = status.format_status(rows, utc_now(), "registry topic t")
    assert "0:frames 1:raw" in text and "all:frames" in text and "2.500" in text


def test_dicts_status_from_the_store_when_the_registry_is_disabled(
    store: DictionaryStore,
    add_dictionary: AddDictionary,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ZDICT_REGISTRY__ENABLED", "false")
    active = add_dictionary("orders")
    root = str(store.root)
    activate = ["dicts", "activate", "--namespace", "orders", str(active.id)]
    assert main([*activate, "--dictionaries", root]) == 0
    activated = capsys.readouterr().out
    assert main(["dicts", "status", "--json", "--dictionaries", root]) == 0
    out = capsys.readouterr().out
    (entry,) = json.loads(out.removeprefix(activated))
    assert entry["dict_id"] == active.id and entry["action"] == "activate"
    assert entry["pinned"] is None  # pins live in the registry
