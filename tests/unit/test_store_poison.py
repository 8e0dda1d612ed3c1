"""Poison in the store directory: whatever it holds, the store raises only its own errors,
lists only valid entries, and neither reads nor writes through a link or past a size limit.

The named tests are issue 12's "Store on disk" cases (and the store's half of "Registry
records": ids, sizes, metadata in the wrong place); the property test then fills a valid store
with arbitrary names, files, directories, links and FIFOs.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import tracemalloc
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.cli.main import main
from sidecar.dictionaries import Dictionary
from sidecar.dictionaries.model import MAX_DICT_ID, MIN_DICT_ID, validate_namespace, with_new_id
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import (
    ConfigError,
    DictionaryIntegrityError,
    StoreError,
    UnknownDictionary,
    ZdictError,
)
from tests.hypothesis_profiles import examples
from tests.unit.dictionaries import AddDictionary, add_to_store

SECRET = b"SECRET-password=hunter2"


def _skipped(logs: Sequence[Mapping[str, Any]]) -> list[str]:
    return [Path(line["path"]).name for line in logs if line["event"] == "store_entry_skipped"]


# -- namespaces ----------------------------------------------------------------------------------


@pytest.mark.parametrize("namespace", [".ids", ".hidden", ".", "..", "-"[:0]])
def test_namespaces_starting_with_a_dot_are_refused_naming_the_reservation_directory(
    store: DictionaryStore, add_dictionary: AddDictionary, namespace: str
) -> None:
    with pytest.raises(ConfigError, match="invalid namespace") as refused:
        add_dictionary(namespace)
    if namespace.startswith("."):
        assert "not starting with '.'" in str(refused.value) and ".ids" in str(refused.value)
    assert not (store.root / ".ids").exists() or not list((store.root / ".ids").iterdir())


def test_stray_entries_at_the_top_are_skipped_with_one_warning_each(
    store: DictionaryStore, add_dictionary: AddDictionary
) -> None:
    add_dictionary("orders")
    (store.root / "bad name").mkdir()
    (store.root / ".hidden").mkdir()
    (store.root / "a-file").write_text("not a namespace")
    (store.root / "link").symlink_to(store.root / "orders")
    with structlog.testing.capture_logs() as logs:
        assert store.namespaces() == ["orders"]
        assert store.namespaces() == ["orders"]
    assert sorted(_skipped(logs)) == [".hidden", "a-file", "bad name", "link"]


def test_dicts_list_skips_a_stray_directory_instead_of_exiting_2(
    store: DictionaryStore,
    add_dictionary: AddDictionary,
    capsys: pytest.CaptureFixture[str],
) -> None:
    d = add_dictionary("orders")
    (store.root / "bad name").mkdir()
    assert main(["dicts", "list", "--dictionaries", str(store.root), "--json"]) == 0
    captured = capsys.readouterr()
    assert [row["id"] for row in json.loads(captured.out)] == [d.id]
    assert captured.err.count("store_entry_skipped") == 1 and "bad name" in captured.err


def test_files_in_a_namespace_not_named_as_the_store_names_them_are_skipped(
    store: DictionaryStore, add_dictionary: AddDictionary
) -> None:
    d = add_dictionary("orders")
    ns = store.root / "orders"
    for name in ["x.json", "3276\u00b2.json", "032768.json", "5.json", "99999999999.json"]:
        (ns / name).write_bytes((ns / f"{d.id}.json").read_bytes())
    with structlog.testing.capture_logs() as logs:
        assert [m.id for m in store.versions("orders")] == [d.id]
    assert len(_skipped(logs)) == 5


# -- ids -----------------------------------------------------------------------------------------


def test_a_stray_reservation_cannot_use_the_ids_up(store: DictionaryStore) -> None:
    ids = store.root / ".ids"
    ids.mkdir(parents=True)
    for name in [
        "99999999999",
        str(MAX_DICT_ID + 1),
        "3276\u00b2",
        "\u0663\u0663\u0663\u0663\u0663",
        "0",
    ]:
        (ids / name).write_text("orders")
    with structlog.testing.capture_logs() as logs:
        assert store.known_ids() == set()
        assert store.reserve_id("orders") == MIN_DICT_ID
    assert len(_skipped(logs)) == 5


@pytest.mark.parametrize(
    "content",
    ["\u0663\u0663\u0663\u0663\u0663", "3276\u00b2", "0", "5", " 32768x", "+32768", "4294967295"],
)
def test_active_holds_an_ascii_id_in_range_or_is_refused(
    store: DictionaryStore, content: str
) -> None:
    (store.root / "orders").mkdir(parents=True)
    (store.root / "orders" / "ACTIVE").write_text(content + "\n")
    with pytest.raises(DictionaryIntegrityError, match="not a dictionary id"):
        store.active_id("orders")


def test_active_content_is_shown_escaped_and_cut_never_raw(store: DictionaryStore) -> None:
    (store.root / "orders").mkdir(parents=True)
    (store.root / "orders" / "ACTIVE").write_bytes(b"\x1b]0;owned\x07" + b"A" * 50)
    with pytest.raises(DictionaryIntegrityError) as refused:
        store.active_id("orders")
    message = str(refused.value)
    assert "\x1b" not in message and "\x07" not in message
    assert "\\x1b]0;owned\\x07" in message and "A" * 41 not in message


def test_a_reservation_that_is_not_a_namespace_loads_nothing_outside_the_store(
    tmp_path: Path, add_dictionary: AddDictionary, store: DictionaryStore
) -> None:
    d = add_dictionary("orders")
    outside = tmp_path / "x"
    shutil.copytree(store.root / "orders", outside)
    elsewhere = DictionaryStore(tmp_path / "a" / "store")
    (elsewhere.root / ".ids").mkdir(parents=True)
    (elsewhere.root / ".ids" / str(d.id)).write_text("../../x")
    with structlog.testing.capture_logs() as logs, pytest.raises(UnknownDictionary):
        elsewhere.get(d.id)
    assert _skipped(logs) == [str(d.id)]
    with pytest.raises(DictionaryIntegrityError, match=r"holds b'\.\./\.\./x', not the name"):
        elsewhere.put(d)


# -- links, special files and sizes --------------------------------------------------------------


def test_history_is_never_appended_to_through_a_link(
    tmp_path: Path, store: DictionaryStore, add_dictionary: AddDictionary
) -> None:
    d = add_dictionary("orders")
    outside = tmp_path / "outside"
    outside.write_bytes(b"")
    (store.root / "orders" / "HISTORY").symlink_to(outside)
    with pytest.raises(StoreError, match="HISTORY is a symbolic link"):
        store.activate("orders", d.id)
    assert outside.read_bytes() == b""
    (store.root / "orders" / "TRAINING.jsonl").symlink_to(outside)
    with pytest.raises(StoreError, match=r"TRAINING\.jsonl is a symbolic link"):
        store.record_training("orders", {"decision": "rejected"})
    assert outside.read_bytes() == b""


@pytest.mark.parametrize("name", ["ACTIVE", "HISTORY"])
def test_active_and_history_are_never_read_through_a_link(
    tmp_path: Path, store: DictionaryStore, name: str
) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    (store.root / "orders").mkdir(parents=True)
    (store.root / "orders" / name).symlink_to(secret)
    with pytest.raises(StoreError, match=f"{name} is a symbolic link") as refused:
        store.active_id("orders") if name == "ACTIVE" else store.history("orders")
    assert b"SECRET" not in str(refused.value).encode()


@pytest.mark.parametrize("name", ["ACTIVE", "HISTORY"])
def test_a_fifo_is_refused_without_waiting_for_a_writer(store: DictionaryStore, name: str) -> None:
    (store.root / "orders").mkdir(parents=True)
    os.mkfifo(store.root / "orders" / name)
    with pytest.raises(StoreError, match="not a regular file"):
        store.active_id("orders") if name == "ACTIVE" else store.history("orders")


@pytest.mark.parametrize(("suffix", "limit"), [(".zdict", 1 << 20), (".json", 64 * 1024)])
def test_oversized_dictionary_and_metadata_files_are_refused_before_they_are_read(
    store: DictionaryStore, add_dictionary: AddDictionary, suffix: str, limit: int
) -> None:
    d = add_dictionary("orders")
    with (store.root / "orders" / f"{d.id}{suffix}").open("r+b") as f:
        f.truncate(100 * 1024 * 1024)  # 100 MB of zeros, without writing them
    tracemalloc.start()
    try:
        with pytest.raises(StoreError, match=f"larger than any .* \\({limit} bytes\\)"):
            store.get(d.id)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024


# -- metadata against its place ------------------------------------------------------------------


def test_metadata_must_be_where_its_id_and_namespace_say(
    store: DictionaryStore, add_dictionary: AddDictionary
) -> None:
    d = add_dictionary("orders")
    ns = store.root / "orders"
    for suffix in (".json", ".zdict"):
        shutil.copy(ns / f"{d.id}{suffix}", ns / f"40000{suffix}")
    (store.root / "users").mkdir()
    for suffix in (".json", ".zdict"):
        shutil.copy(ns / f"{d.id}{suffix}", store.root / "users" / f"{d.id}{suffix}")
    with pytest.raises(
        DictionaryIntegrityError, match=r"40000\.json holds the metadata of dictionary"
    ):
        store.get(40000)
    with pytest.raises(
        DictionaryIntegrityError, match=r"users/\d+\.json holds the metadata .* orders"
    ):
        store.versions("users")
    (ns / "ACTIVE").write_text("40000\n")
    with pytest.raises(DictionaryIntegrityError, match=r"<namespace>/<id>\.json"):
        store.active("orders")


def test_metadata_out_of_range_is_refused_naming_the_file_and_field(
    store: DictionaryStore, add_dictionary: AddDictionary
) -> None:
    d = add_dictionary("orders")
    path = store.root / "orders" / f"{d.id}.json"
    meta = json.loads(path.read_text())
    for field, value in [("level", 2**40), ("version", 0), ("break_even_size", 2**40)]:
        path.write_text(json.dumps(meta | {field: value}))
        with pytest.raises(DictionaryIntegrityError, match=f"unreadable metadata: {field}:"):
            store.activate("orders", d.id)


@pytest.mark.parametrize(
    ("lines", "error"),
    [
        (b"[]\n", "line 1 is not a JSON object"),
        (b"[" * 100_000 + b"\n", "line 1 is not JSON"),
        (b'{"id": 1}\n\xff\xfe\n', "line 2 is not JSON"),
    ],
)
def test_a_history_that_is_not_json_objects_is_refused_by_line(
    store: DictionaryStore, add_dictionary: AddDictionary, lines: bytes, error: str
) -> None:
    add_dictionary("orders")
    (store.root / "orders" / "HISTORY").write_bytes(lines)
    with pytest.raises(DictionaryIntegrityError, match=error):
        store.rollback("orders")


def test_history_entries_without_an_id_in_range_are_not_rolled_back_to(
    store: DictionaryStore, add_dictionary: AddDictionary
) -> None:
    first, second = add_dictionary("orders"), add_dictionary("orders")
    store.activate("orders", first.id)
    with (store.root / "orders" / "HISTORY").open("a") as f:
        for bad in (True, 5, "32768", 2**40):
            f.write(json.dumps({"action": "activate", "id": bad}) + "\n")
    store.activate("orders", second.id)
    assert store.rollback("orders").id == first.id


def test_a_registry_dictionary_with_an_id_out_of_range_is_not_stored(
    store: DictionaryStore, add_dictionary: AddDictionary
) -> None:
    d = add_dictionary("orders")
    poison = Dictionary(meta=d.meta.model_copy(update={"id": 0}), data=d.data)
    with pytest.raises(ConfigError, match="dictionary id 0 is outside"):
        store.put(poison)
    assert not (store.root / "orders" / "0.json").exists()


# -- property: arbitrary store directories -------------------------------------------------------

_NAMES = [
    "orders",
    "users",
    ".ids",
    ".hidden",
    "bad name",
    "ACTIVE",
    "HISTORY",
    "TRAINING.jsonl",
    "32768.json",
    "32768.zdict",
    "32769.json",
    "32769.zdict",
    "40000.json",
    "0.json",
    "032768.json",
    "3276\u00b2.json",
    "32768",
    "32769",
    "99999999999",
    "\u0663\u0663\u0663\u0663\u0663",
    "x.json",
]
_DIRS = ["", "orders", ".ids", "users", "bad name"]
_KINDS = ["file", "file", "file", "dir", "link_out", "link_in", "fifo", "huge"]
# No surrogates: a file name is written as UTF-8, which cannot encode them.
_name = st.sampled_from(_NAMES) | st.text(
    st.characters(exclude_characters="/\x00", exclude_categories=["Cs"]), min_size=1, max_size=10
).filter(lambda n: n not in {".", ".."})


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, trained_bytes: bytes) -> Path:
    """A valid store: `orders` with two dictionaries, the second active."""
    root = tmp_path_factory.mktemp("template") / "store"
    store = DictionaryStore(root)
    first = add_to_store(store, "orders", trained_bytes)
    second = add_to_store(store, "orders", trained_bytes)
    store.activate("orders", first.id)
    store.activate("orders", second.id)
    return root


@st.composite
def _contents(draw: st.DrawFn, meta: bytes) -> bytes:
    kind = draw(st.sampled_from(["binary", "meta", "meta_changed", "id", "path", "deep", "ns"]))
    if kind == "binary":
        return draw(st.binary(max_size=64))
    if kind == "meta":
        return meta
    if kind == "meta_changed":
        field = draw(st.sampled_from(["id", "namespace", "level", "size", "sha256", "version"]))
        value = draw(st.sampled_from([0, 40000, 2**40, -1, "users", ".ids", "x"]))
        return json.dumps(json.loads(meta) | {field: value}).encode()
    if kind == "id":
        return draw(
            st.sampled_from([b"32768\n", b"32769", b"0", b"99999999999", "\u0663".encode()])
        )
    if kind == "path":
        return b"../../x"
    if kind == "deep":
        return b"[" * draw(st.integers(1, 50_000))
    return draw(st.sampled_from([b"orders", b"users", b".ids", b"bad name"]))


def _make(path: Path, kind: str, content: bytes, secret: Path, inside: Path) -> None:
    if os.path.lexists(path) or not path.parent.is_dir() or path.parent.is_symlink():
        return
    try:
        if kind == "dir":
            path.mkdir()
        elif kind == "link_out":
            path.symlink_to(secret)
        elif kind == "link_in":
            path.symlink_to(inside)
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "huge":
            with path.open("wb") as f:
                f.truncate(3 * 1024 * 1024)
        else:
            path.write_bytes(content)
    except OSError:
        pass  # a name the file system refuses (too long, say): nothing to test


def _checked(call: Any, *args: Any) -> Any:
    """`call(*args)`, or None if it raised a `ZdictError` (the only exceptions allowed)."""
    try:
        return call(*args)
    except ZdictError as exc:
        assert "SECRET" not in str(exc)
        return None


@pytest.mark.slow
@settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_any_store_directory_raises_only_zdict_errors_and_lists_only_valid_entries(
    template: Path, data: st.DataObject
) -> None:
    meta = (template / "orders" / f"{MIN_DICT_ID}.json").read_bytes()
    entries = data.draw(
        st.lists(
            st.tuples(st.sampled_from(_DIRS), _name, st.sampled_from(_KINDS), _contents(meta)),
            min_size=1,
            max_size=8,
        )
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        shutil.copytree(template, root)
        secret = Path(tmp) / "secret"
        secret.write_bytes(SECRET)
        for directory, name, kind, content in entries:
            _make(
                root / directory / name,
                kind,
                content,
                secret,
                root / "orders" / f"{MIN_DICT_ID}.json",
            )
        _check_store(DictionaryStore(root))


def _check_store(store: DictionaryStore) -> None:
    namespaces = _checked(store.namespaces) or []
    for namespace in namespaces:
        validate_namespace(namespace)
        assert (store.root / namespace).is_dir() and not (store.root / namespace).is_symlink()
    known = _checked(store.known_ids) or set()
    assert all(MIN_DICT_ID <= i <= MAX_DICT_ID for i in known)
    for namespace in {*namespaces, "orders", "users"}:
        for meta in _checked(store.versions, namespace) or []:
            assert meta.namespace == namespace and MIN_DICT_ID <= meta.id <= MAX_DICT_ID
            assert (store.root / namespace / f"{meta.id}.json").exists()
        active_id = _checked(store.active_id, namespace)
        assert active_id is None or MIN_DICT_ID <= active_id <= MAX_DICT_ID
        active = _checked(store.active, namespace)
        assert active is None or (active.namespace == namespace and active.id == active_id)
        history = _checked(store.history, namespace)
        assert history is None or all(isinstance(event, dict) for event in history)
        _checked(store.next_version, namespace)
    for dict_id in (MIN_DICT_ID, MIN_DICT_ID + 1, 40000, 5):
        found = _checked(store.get, dict_id)
        if found is not None:
            assert found.id == dict_id
            Dictionary.verified(found.meta, found.data, "check")
    reserved = _checked(store.reserve_id, "users")
    assert reserved is None or MIN_DICT_ID <= reserved <= MAX_DICT_ID
    _checked(store.record_training, "users", {"decision": "rejected"})
    _checked(store.activate, "orders", MIN_DICT_ID)
    _checked(store.rollback, "orders")
    original = _checked(store.get, MIN_DICT_ID)
    if original is not None:
        _checked(store.put, with_new_id(original, MIN_DICT_ID + 50))
