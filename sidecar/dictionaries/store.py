"""The local dictionary store: versioned files under one directory.

Layout (README, "Dictionary store")::

    <root>/<namespace>/<id>.zdict    raw zstd dictionary bytes (what `zstd -D` takes)
    <root>/<namespace>/<id>.json     DictionaryMeta
    <root>/<namespace>/ACTIVE        the active id, replaced atomically
    <root>/<namespace>/HISTORY       one JSON line per activation or rollback (the rollback stack)
    <root>/<namespace>/TRAINING.jsonl  one JSON line per training run, promoted or not
    <root>/.ids/<id>                 id reservations: ids are unique across namespaces

Every write is a temporary file renamed into place, so readers see the old file or the new one,
never half of one. A dictionary's `.json` is written after its `.zdict`, so the metadata is the
commit point: a `.zdict` without metadata is an interrupted write and is ignored. Activation never
deletes anything.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Final

import zstandard
from pydantic import ValidationError

from sidecar.dictionaries.model import (
    MAX_DICT_ID,
    MIN_DICT_ID,
    Dictionary,
    DictionaryMeta,
    TrainingSample,
    build_dictionary,
    utc_now,
    validate_namespace,
)
from sidecar.errors import (
    DictionaryIntegrityError,
    DictionaryNotFound,
    StoreError,
    UnknownDictionary,
)

_IDS_DIR: Final = ".ids"
_ACTIVE: Final = "ACTIVE"
_HISTORY: Final = "HISTORY"
_TRAINING_LOG: Final = "TRAINING.jsonl"


def _atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same directory and a rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


class DictionaryStore:
    """Versioned dictionaries in a directory; also a `DictionaryResolver` for the Decoder."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def describe(self) -> str:
        return f"dictionary store {self.root}"

    # -- reading -------------------------------------------------------------------------------

    def namespaces(self) -> list[str]:
        """Namespaces that hold at least one dictionary, sorted."""
        if not self.root.is_dir():
            return []
        return sorted(
            p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")
        )

    def _ns_dir(self, namespace: str) -> Path:
        return self.root / validate_namespace(namespace)

    def _read_meta(self, path: Path) -> DictionaryMeta:
        try:
            return DictionaryMeta.model_validate_json(path.read_bytes())
        except ValidationError as exc:
            raise DictionaryIntegrityError(f"{path}: unreadable metadata: {exc}") from None
        except OSError as exc:
            raise StoreError(f"{path}: cannot read: {exc.strerror}") from None

    def versions(self, namespace: str) -> list[DictionaryMeta]:
        """Metadata of every dictionary of `namespace`, oldest version first."""
        ns_dir = self._ns_dir(namespace)
        if not ns_dir.is_dir():
            return []
        metas = [self._read_meta(p) for p in ns_dir.glob("*.json")]
        return sorted(metas, key=lambda m: m.version)

    def _find(self, dict_id: int) -> Path | None:
        reservation = self.root / _IDS_DIR / str(dict_id)
        try:
            namespace = reservation.read_text().strip()
        except FileNotFoundError:
            namespace = ""
        candidates = [self.root / namespace] if namespace else []
        candidates += [self.root / ns for ns in self.namespaces() if ns != namespace]
        for ns_dir in candidates:
            meta_path = ns_dir / f"{dict_id}.json"
            if meta_path.is_file():
                return meta_path
        return None

    def get(self, dict_id: int) -> Dictionary:
        """The verified dictionary `dict_id` from any namespace.

        Raises:
            UnknownDictionary: no such id in this store.
            DictionaryIntegrityError: the files exist but do not match (sha256, size, id, type).
        """
        meta_path = self._find(dict_id)
        if meta_path is None:
            raise UnknownDictionary(
                f"unknown dictionary id {dict_id}: not in {self.describe()} "
                f"(namespaces: {', '.join(self.namespaces()) or 'none'}); copy it from the "
                "registry or the store that produced the records"
            )
        return self._load(meta_path)

    def _load(self, meta_path: Path) -> Dictionary:
        meta = self._read_meta(meta_path)
        data_path = meta_path.with_suffix(".zdict")
        try:
            data = data_path.read_bytes()
        except FileNotFoundError:
            raise DictionaryIntegrityError(
                f"{data_path} is missing but its metadata {meta_path.name} exists; restore the "
                "file from the registry or a backup"
            ) from None
        except OSError as exc:
            raise StoreError(f"{data_path}: cannot read: {exc.strerror}") from None
        dictionary = Dictionary.verified(meta, data, str(data_path))
        try:
            # Loading it the way the codec will proves that zstd accepts the entropy tables.
            zstandard.ZstdCompressionDict(
                data, dict_type=zstandard.DICT_TYPE_FULLDICT
            ).precompute_compress(level=meta.level)
        except zstandard.ZstdError as exc:
            raise DictionaryIntegrityError(
                f"{data_path}: zstd refuses the dictionary: {exc}"
            ) from None
        return dictionary

    def active_id(self, namespace: str) -> int | None:
        """The active dictionary id of `namespace`, None if none was activated."""
        path = self._ns_dir(namespace) / _ACTIVE
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"{path}: cannot read: {exc.strerror}") from None
        if not text.isdigit():
            raise DictionaryIntegrityError(f"{path} holds {text!r}, not a dictionary id")
        return int(text)

    def active(self, namespace: str) -> Dictionary | None:
        """The verified active dictionary of `namespace`, None if none is active."""
        dict_id = self.active_id(namespace)
        if dict_id is None:
            return None
        meta_path = self._ns_dir(namespace) / f"{dict_id}.json"
        if not meta_path.is_file():
            raise DictionaryIntegrityError(
                f"{self._ns_dir(namespace) / _ACTIVE} names dictionary {dict_id}, which is not "
                f"in namespace {namespace}; activate an existing one (zdict-sidecar dicts list)"
            )
        return self._load(meta_path)

    def history(self, namespace: str) -> list[dict[str, object]]:
        """Activation events of `namespace`, oldest first: `{"at", "action", "id"}`."""
        path = self._ns_dir(namespace) / _HISTORY
        try:
            lines = path.read_text().splitlines()
        except FileNotFoundError:
            return []
        try:
            return [json.loads(line) for line in lines if line.strip()]
        except json.JSONDecodeError as exc:
            raise DictionaryIntegrityError(f"{path}: line {exc.lineno} is not JSON") from None

    # -- writing -------------------------------------------------------------------------------

    def reserve_id(self, namespace: str) -> int:
        """Reserve the next free id across all namespaces; safe against concurrent writers.

        For a store used without a registry; with one, the registry allocates ids.
        """
        ids_dir = self.root / _IDS_DIR
        ids_dir.mkdir(parents=True, exist_ok=True)
        taken = [int(p.name) for p in ids_dir.iterdir() if p.name.isdigit()]
        candidate = max([MIN_DICT_ID - 1, *taken]) + 1
        while candidate <= MAX_DICT_ID:
            try:
                fd = os.open(ids_dir / str(candidate), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                candidate += 1  # another writer took it between our listing and now
                continue
            with os.fdopen(fd, "w") as f:
                f.write(namespace)
            return candidate
        raise StoreError(f"{self.root}: dictionary ids {MIN_DICT_ID}..{MAX_DICT_ID} are used up")

    def add(
        self,
        namespace: str,
        data: bytes,
        *,
        level: int,
        heldout_ratio: float,
        nodict_ratio: float,
        break_even_size: int,
        training: TrainingSample,
        parent_id: int | None = None,
        **extra: object,
    ) -> Dictionary:
        """Store a new dictionary version of `namespace` under a newly reserved id (not activated).

        The dictionary header is rewritten to carry the id. `extra` keys are kept in the
        metadata (e.g. the training report's numbers).
        """
        self._ns_dir(namespace)  # a bad namespace fails before an id is reserved for it
        dictionary = build_dictionary(
            namespace,
            data,
            dict_id=self.reserve_id(namespace),
            version=self.next_version(namespace),
            level=level,
            heldout_ratio=heldout_ratio,
            nodict_ratio=nodict_ratio,
            break_even_size=break_even_size,
            training=training,
            parent_id=parent_id,
            **extra,
        )
        return self.put(dictionary)

    def next_version(self, namespace: str) -> int:
        """One more than the highest version stored for `namespace` (1 for a new namespace)."""
        return max((m.version for m in self.versions(namespace)), default=0) + 1

    def known_ids(self) -> set[int]:
        """Every id this store has reserved, in any namespace."""
        ids_dir = self.root / _IDS_DIR
        if not ids_dir.is_dir():
            return set()
        return {int(p.name) for p in ids_dir.iterdir() if p.name.isdigit()}

    def put(self, dictionary: Dictionary) -> Dictionary:
        """Write a complete dictionary (id and metadata already set, e.g. from the registry).

        Idempotent for the same bytes. Raises `DictionaryIntegrityError` when the id is already
        taken by other bytes or by another namespace: ids are never reused.
        """
        namespace, dict_id = dictionary.namespace, dictionary.id
        ns_dir = self._ns_dir(namespace)
        meta_path = ns_dir / f"{dict_id}.json"
        if meta_path.is_file():
            existing = self._read_meta(meta_path)
            if existing.sha256 == dictionary.meta.sha256:
                return dictionary
            raise DictionaryIntegrityError(
                f"dictionary {dict_id} of namespace {namespace} is already in {self.root} with "
                f"other bytes (sha256 {existing.sha256[:12]}…, new {dictionary.meta.sha256[:12]}…)"
                "; ids are never reused - the store and the registry disagree"
            )
        try:
            ns_dir.mkdir(parents=True, exist_ok=True)
            self._claim_id(namespace, dict_id)
            _atomic_write(ns_dir / f"{dict_id}.zdict", dictionary.data)
            _atomic_write(meta_path, dictionary.meta.model_dump_json(indent=2).encode())
        except OSError as exc:
            raise StoreError(f"{self.root}: cannot write dictionary: {exc}") from None
        return dictionary

    def _claim_id(self, namespace: str, dict_id: int) -> None:
        """Record `dict_id` as namespace's; refuse an id another namespace holds."""
        ids_dir = self.root / _IDS_DIR
        ids_dir.mkdir(parents=True, exist_ok=True)
        path = ids_dir / str(dict_id)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            holder = path.read_text().strip()
            if holder != namespace:
                raise DictionaryIntegrityError(
                    f"dictionary id {dict_id} is reserved by namespace {holder} in {self.root}, "
                    f"not {namespace}; ids are never reused - the store and the registry disagree"
                ) from None
            return
        with os.fdopen(fd, "w") as f:
            f.write(namespace)

    def activate(self, namespace: str, dict_id: int, *, action: str = "activate") -> Dictionary:
        """Make `dict_id` the active dictionary of `namespace`; returns it, verified."""
        meta_path = self._ns_dir(namespace) / f"{dict_id}.json"
        if not meta_path.is_file():
            raise DictionaryNotFound(
                f"dictionary {dict_id} is not in namespace {namespace} of {self.root} "
                "(zdict-sidecar dicts list shows what is there)"
            )
        dictionary = self._load(meta_path)  # never activate something that would not load
        ns_dir = self._ns_dir(namespace)
        event = {"at": utc_now().isoformat(), "action": action, "id": dict_id}
        try:
            _atomic_write(ns_dir / _ACTIVE, f"{dict_id}\n".encode())
            with open(ns_dir / _HISTORY, "a") as f:
                f.write(json.dumps(event) + "\n")
        except OSError as exc:
            raise StoreError(f"{ns_dir}: cannot activate: {exc}") from None
        return dictionary

    def _active_stack(self, namespace: str) -> list[int]:
        stack: list[int] = []
        for event in self.history(namespace):
            if event.get("action") == "rollback" and stack:
                stack.pop()
                continue
            dict_id = event.get("id")
            if isinstance(dict_id, int) and event.get("action") == "activate":
                stack.append(dict_id)
        return stack

    def rollback(self, namespace: str) -> Dictionary:
        """Re-activate the dictionary that was active before the current one."""
        stack = self._active_stack(namespace)
        if len(stack) < 2:
            raise DictionaryNotFound(
                f"namespace {namespace} has no earlier active dictionary to roll back to"
            )
        return self.activate(namespace, stack[-2], action="rollback")

    def record_training(self, namespace: str, entry: dict[str, object]) -> None:
        """Append one training run's numbers and decision to the namespace's training log."""
        ns_dir = self._ns_dir(namespace)
        line = json.dumps({"at": utc_now().isoformat(), **entry}, default=str)
        try:
            ns_dir.mkdir(parents=True, exist_ok=True)
            with open(ns_dir / _TRAINING_LOG, "a") as f:
                f.write(line + "\n")
        except OSError as exc:
            raise StoreError(f"{ns_dir}: cannot record the training run: {exc}") from None
