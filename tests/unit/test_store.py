"""The local dictionary store: layout, integrity, ids, activation and rollback."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest
import zstandard

from sidecar.codec import Decoder, Encoder
from sidecar.dictionaries import Dictionary
from sidecar.dictionaries.model import (
    MIN_DICT_ID,
    build_dictionary,
    embedded_dict_id,
    with_new_id,
)
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import (
    ConfigError,
    DictionaryIntegrityError,
    DictionaryNotFound,
    StoreError,
    UnknownDictionary,
)
from tests.unit.dictionaries import AddDictionary, add_to_store


def test_a_stored_dictionary_has_the_documented_layout(
    store: DictionaryStore, add_dictionary: AddDictionary
) -> None:
    d = add_dictionary("orders")
    ns = store.root / "orders"
    assert d.id == MIN_DICT_ID
    assert (ns / f"{d.id}.zdict").read_bytes() == d.data
    meta = json.loads((ns / f"{d.id}.json").read_text())
    assert {
        "id",
        "namespace",
        "version",
        "sha256",
        "size",
        "created_at",
        "zstd_version",
        "level",
        "heldout_ratio",
        "nodict_ratio",
        "break_even_size",
        "parent_id",
        "training",
    } <= meta.keys()
    assert meta["id"] == d.id and meta["namespace"] == "orders" and meta["version"] == 1
    assert embedded_dict_id(d.data) == d.id  # frames will carry the same id as the header


def test_versions_count_up_per_namespace_and_ids_are_unique_across_namespaces(
    store: DictionaryStore, add_dictionary: AddDictionary
) -> None:
    a1, b1, a2 = add_dictionary("a"), add_dictionary("b"), add_dictionary("a")
    assert [a1.meta.version, b1.meta.version, a2.meta.version] == [1, 1, 2]
    assert len({a1.id, b1.id, a2.id}) == 3
    assert [m.id for m in store.versions("a")] == [a1.id, a2.id]
    assert store.namespaces() == ["a", "b"]
    assert store.get(b1.id).namespace == "b"


def test_a_copy_carries_the_figures_under_a_new_id_with_the_metadata_replaced(
    store: DictionaryStore, add_dictionary: AddDictionary
) -> None:
    original = add_dictionary("a", batch_level=9, raw_crossover={"zstd": 8.0})
    copy = store.add_copy(original, "b", batch_level=3)
    assert (copy.namespace, copy.meta.version) == ("b", 1) and copy.id != original.id
    assert (copy.meta.batch_level, copy.meta.raw_crossover) == (3, {"zstd": 8.0})
    assert (copy.meta.level, copy.meta.training) == (original.meta.level, original.meta.training)
    assert store.get(copy.id).data == copy.data


def test_activation_switches_atomically_and_deletes_nothing(
    store: DictionaryStore, add_dictionary: AddDictionary
) -> None:
    first, second = add_dictionary(), add_dictionary()
    assert store.active("orders") is None
    store.activate("orders", first.id)
    store.activate("orders", second.id)
    active = store.active("orders")
    assert active is not None and active.id == second.id
    assert (store.root / "orders" / "ACTIVE").read_text() == f"{second.id}\n"
    assert store.get(first.id).data == first.data
    assert not list((store.root / "orders").glob("*.tmp"))


def test_a_retired_dictionary_is_removed_its_id_stays_reserved_and_the_active_one_stays(
    store: DictionaryStore, add_dictionary: AddDictionary
) -> None:
    old, current = add_dictionary(), add_dictionary()
    store.activate("orders", current.id)
    assert store.remove("orders", old.id) is True
    assert [m.id for m in store.versions("orders")] == [current.id]
    assert not (store.root / "orders" / f"{old.id}.zdict").exists()
    assert store.remove("orders", old.id) is False  # already gone
    assert old.id in store.known_ids()  # never reused
    with pytest.raises(StoreError, match="active dictionary of namespace orders"):
        store.remove("orders", current.id)
    assert store.get(current.id) == current


def test_rollback_returns_to_the_previously_active_dictionary(
    store: DictionaryStore, add_dictionary: AddDictionary
) -> None:
    d1, d2, d3 = add_dictionary(), add_dictionary(), add_dictionary()
    for d in (d1, d2, d3):
        store.activate("orders", d.id)
    assert store.rollback("orders").id == d2.id
    assert store.rollback("orders").id == d1.id
    with pytest.raises(DictionaryNotFound, match="no earlier active dictionary"):
        store.rollback("orders")
    assert store.active_id("orders") == d1.id
    assert [e["action"] for e in store.history("orders")] == ["activate"] * 3 + ["rollback"] * 2


def test_a_dictionary_whose_bytes_do_not_match_the_sha256_is_refused(
    store: DictionaryStore, add_dictionary: AddDictionary
) -> None:
    d = add_dictionary()
    path = store.root / "orders" / f"{d.id}.zdict"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(DictionaryIntegrityError, match=r"sha256 .* does not match"):
        store.get(d.id)


def test_a_missing_dictionary_file_is_an_integrity_error(
    store: DictionaryStore, add_dictionary: AddDictionary
) -> None:
    d = add_dictionary()
    (store.root / "orders" / f"{d.id}.zdict").unlink()
    with pytest.raises(DictionaryIntegrityError, match="is missing"):
        store.get(d.id)


def test_a_file_that_is_not_a_zstd_dictionary_is_refused_even_with_matching_metadata(
    add_dictionary: AddDictionary,
) -> None:
    # Raw bytes with a correct sha256 must still not load: they would be taken as raw content.
    with pytest.raises(DictionaryIntegrityError, match="not a zstd dictionary"):
        add_dictionary(data=b"just some raw content " * 100)


def test_garbage_entropy_tables_behind_the_magic_are_refused(
    store: DictionaryStore, add_dictionary: AddDictionary, trained_bytes: bytes
) -> None:
    broken = trained_bytes[:8] + bytes(len(trained_bytes) - 8)
    d = add_dictionary(data=broken)
    with pytest.raises(DictionaryIntegrityError, match="zstd refuses"):
        store.get(d.id)


def test_corrupt_metadata_is_refused_with_the_file_named(
    store: DictionaryStore, add_dictionary: AddDictionary
) -> None:
    d = add_dictionary()
    meta_path = store.root / "orders" / f"{d.id}.json"
    meta_path.write_text("{not json")
    with pytest.raises(DictionaryIntegrityError, match=f"{d.id}.json: unreadable metadata"):
        store.get(d.id)


def test_an_active_pointer_to_a_missing_dictionary_is_reported(store: DictionaryStore) -> None:
    (store.root / "orders").mkdir(parents=True)
    (store.root / "orders" / "ACTIVE").write_text("40000\n")
    with pytest.raises(DictionaryIntegrityError, match="names dictionary 40000"):
        store.active("orders")


def test_activating_an_unknown_id_is_refused(store: DictionaryStore) -> None:
    with pytest.raises(DictionaryNotFound, match="dictionary 40000 is not in namespace orders"):
        store.activate("orders", 40000)


def test_unknown_ids_raise_unknown_dictionary(store: DictionaryStore) -> None:
    with pytest.raises(UnknownDictionary, match="unknown dictionary id 40001"):
        store.get(40001)


@pytest.mark.parametrize("namespace", ["", "..", "a/b", "x" * 250, "spaces here"])
def test_bad_namespace_names_are_refused(store: DictionaryStore, namespace: str) -> None:
    with pytest.raises(ConfigError, match="invalid namespace"):
        store.versions(namespace)


def test_an_id_taken_by_another_writer_is_skipped(
    store: DictionaryStore, add_dictionary: AddDictionary
) -> None:
    first = add_dictionary()
    # Another process reserved the next id between our listing and our exclusive create.
    (store.root / ".ids" / str(first.id + 1)).write_text("other")
    (store.root / ".ids" / str(first.id + 1)).touch()
    second = add_dictionary()
    assert second.id == first.id + 2


def _add_many(root: str, data: bytes, namespace: str, count: int) -> list[int]:
    store = DictionaryStore(root)
    return [add_to_store(store, namespace, data).id for _ in range(count)]


def test_concurrent_writers_in_separate_processes_never_share_an_id(
    tmp_path: Path, trained_bytes: bytes
) -> None:
    root = str(tmp_path / "dictionaries")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        results = pool.starmap(
            _add_many, [(root, trained_bytes, f"ns{i % 2}", 10) for i in range(4)]
        )
    ids = [i for r in results for i in r]
    assert len(ids) == len(set(ids)) == 40
    store = DictionaryStore(root)
    for dict_id in ids:
        assert store.get(dict_id).id == dict_id  # every file complete and verified


def test_the_store_round_trips_through_encoder_and_decoder(
    store: DictionaryStore, add_dictionary: AddDictionary, events: list[bytes]
) -> None:
    d = add_dictionary()
    store.activate("orders", d.id)
    encoder = Encoder.from_store(store, namespace="orders")
    decoder = Decoder.from_store(store)
    for raw in events[4000:4100]:
        value, headers = encoder.encode(raw, headers=[])
        assert decoder.decode(value, headers) == raw
    assert encoder.dict_id == d.id


def test_an_encoder_for_a_namespace_without_dictionary_compresses_without_one(
    store: DictionaryStore,
) -> None:
    assert Encoder.from_store(store, namespace="fresh").dict_id == 0


def test_training_runs_are_recorded_whatever_the_decision(store: DictionaryStore) -> None:
    store.record_training("orders", {"decision": "rejected", "reason": "margin"})
    store.record_training("orders", {"decision": "failed", "reason": "few"})
    lines = (store.root / "orders" / "TRAINING.jsonl").read_text().splitlines()
    assert [json.loads(line)["decision"] for line in lines] == ["rejected", "failed"]


def test_dictionaries_trained_by_zstd_without_an_id_get_ours(
    add_dictionary: AddDictionary,
) -> None:
    # The zstandard stub's element type (its list is invariant).
    samples: list[bytes | bytearray | memoryview] = [
        f'{{"n":{i},"kind":"sample","text":"{"ab" * (i % 7)}"}}'.encode() for i in range(2000)
    ]
    d = add_dictionary("t", zstandard.train_dictionary(2048, samples).as_bytes())
    assert embedded_dict_id(d.data) == d.id
    assert zstandard.ZstdCompressionDict(d.data).dict_id() == d.id


def test_put_keeps_a_registry_dictionary_as_it_is_and_is_idempotent(
    store: DictionaryStore, add_dictionary: AddDictionary, tmp_path: Path
) -> None:
    original = add_dictionary("orders")
    other = DictionaryStore(tmp_path / "other")
    assert other.put(original) == original
    assert other.put(original) == original
    assert other.get(original.id) == original
    assert other.known_ids() == {original.id}
    assert other.next_version("orders") == original.meta.version + 1


def test_put_refuses_an_id_that_other_bytes_or_another_namespace_hold(
    store: DictionaryStore, add_dictionary: AddDictionary, trained_bytes: bytes
) -> None:
    first = add_dictionary("orders")
    imposter = build_dictionary(
        "orders",
        trained_bytes[:-1] + b"!",
        dict_id=first.id,
        version=9,
        level=3,
        heldout_ratio=2.0,
        nodict_ratio=1.0,
        break_even_size=0,
        training=first.meta.training,
    )
    with pytest.raises(DictionaryIntegrityError, match="never reused"):
        store.put(imposter)
    elsewhere = with_new_id(first, first.id)  # same bytes, but claimed by another namespace
    moved = Dictionary(
        meta=elsewhere.meta.model_copy(update={"namespace": "users"}), data=elsewhere.data
    )
    with pytest.raises(DictionaryIntegrityError, match="reserved by namespace orders"):
        store.put(moved)


def test_with_new_id_rewrites_header_and_checksum(add_dictionary: AddDictionary) -> None:
    original = add_dictionary("orders")
    moved = with_new_id(original, 40000)
    assert embedded_dict_id(moved.data) == 40000
    assert moved.data[8:] == original.data[8:]
    Dictionary.verified(moved.meta, moved.data, "test")
