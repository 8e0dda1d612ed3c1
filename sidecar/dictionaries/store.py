"""The local dictionary store: versioned files under one directory.

Layout (dictionaries/README.md, "The store")::

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

What the directory holds is checked, never trusted: files are read without following symbolic
links and only up to a size far above what the store writes; ids are ASCII decimal in the private
range; metadata must match its place (`<namespace>/<id>.json`); namespaces never start with `.`.
Entries the store would not have written are skipped with one warning each.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError

from sidecar.dictionaries.model import (
    MAX_DICT_ID,
    MAX_DICT_SIZE,
    MAX_META_SIZE,
    MIN_DICT_ID,
    Dictionary,
    DictionaryMeta,
    TrainingSample,
    build_dictionary,
    describe_invalid,
    parse_dict_id,
    utc_now,
    validate_dict_id,
    validate_namespace,
)
from sidecar.errors import (
    ConfigError,
    DictionaryIntegrityError,
    DictionaryNotFound,
    StoreError,
    UnknownDictionary,
    ZdictError,
)
from sidecar.logs import get_logger

log = get_logger(__name__)

_IDS_DIR: Final = ".ids"
_ACTIVE: Final = "ACTIVE"
_HISTORY: Final = "HISTORY"
_TRAINING_LOG: Final = "TRAINING.jsonl"
#: Read limits, bytes, far above what the store writes: a larger file is not one of ours, and
#: reading it whole could take the process's memory.
_MAX_ACTIVE_SIZE: Final = 64  # an id and a newline
_MAX_RESERVATION_SIZE: Final = 256  # a namespace name (at most 249 characters)
_MAX_HISTORY_SIZE: Final = 16 * 1024 * 1024  # about 200,000 activations
#: How much of a file's unexpected content an error message shows (escaped).
_SHOWN: Final = 40
#: Flags for every file the store reads or appends to: never through a symbolic link (an append
#: could land outside the store, a read could show another file's content in an error), never
#: blocking on a FIFO.
_NO_LINKS: Final = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


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


def _refused(path: Path, exc: OSError, doing: str) -> StoreError:
    """The error for an `OSError` on `path`; a symbolic link is named as such."""
    if exc.errno == errno.ELOOP:
        return StoreError(
            f"{path} is a symbolic link; the store follows none (it could read or append "
            "outside the store) - replace it with a regular file or remove it"
        )
    return StoreError(f"{path}: cannot {doing}: {exc.strerror}")


def _read_file(path: Path, limit: int, what: str) -> bytes:
    """The bytes of the regular file `path`, read without following a link, at most `limit`.

    Raises:
        FileNotFoundError: there is no such file.
        StoreError: it is a link, not a regular file, larger than `limit` bytes, or unreadable.
    """
    try:
        fd = os.open(path, os.O_RDONLY | _NO_LINKS)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise _refused(path, exc, "read") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        # Checked before fdopen, which refuses a directory with an OSError of its own.
        os.close(fd)
        raise StoreError(f"{path} is not a regular file; a {what} is one - remove it")
    with os.fdopen(fd, "rb") as f:
        # The size first, so that nothing is read of a file that is too large; the read is
        # bounded too, in case the file grows meanwhile.
        size = info.st_size
        if size <= limit:
            try:
                data = f.read(limit + 1)
            except OSError as exc:
                raise _refused(path, exc, "read") from None
            size = len(data)
    if size > limit:
        raise StoreError(
            f"{path} is {size} bytes, larger than any {what} ({limit} bytes): it is not one of "
            "ours - remove it (a dictionary can be restored from the registry or a backup)"
        )
    return data


def _append_line(path: Path, line: str) -> None:
    """Append `line` and a newline to the regular file `path` (created if missing), no link."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NO_LINKS, 0o644)
    except OSError as exc:
        raise _refused(path, exc, "append to it") from None
    with os.fdopen(fd, "a") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise StoreError(f"{path} is not a regular file - remove it")
        try:
            f.write(line + "\n")
        except OSError as exc:
            raise _refused(path, exc, "append to it") from None


def _shown(raw: bytes) -> str:
    """Unexpected file content for an error message: escaped, and only its start."""
    return repr(raw[:_SHOWN]) + ("..." if len(raw) > _SHOWN else "")


def _json_lines(path: Path, what: str) -> list[dict[str, Any]]:
    """The JSON objects of the store's JSON Lines file `path` (none if it does not exist).

    Raises:
        DictionaryIntegrityError: a line is not a JSON object.
        StoreError: the file is not one the store wrote (`_read_file`).
    """
    try:
        raw = _read_file(path, _MAX_HISTORY_SIZE, what)
    except FileNotFoundError:
        return []
    entries: list[dict[str, Any]] = []
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            raise DictionaryIntegrityError(f"{path}: line {number} is not JSON") from None
        if not isinstance(entry, dict):
            raise DictionaryIntegrityError(f"{path}: line {number} is not a JSON object")
        entries.append(entry)
    return entries


def _is_namespace(name: str) -> bool:
    try:
        validate_namespace(name)
    except ConfigError:
        return False
    return True


class DictionaryStore:
    """Versioned dictionaries in a directory; also a `DictionaryResolver` for the Decoder.

    Every method raises nothing but `ZdictError`s, whatever the directory holds: entries with
    names the store would not write are skipped with one `store_entry_skipped` warning each.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self._skipped: set[Path] = set()

    def describe(self) -> str:
        return f"dictionary store {self.root}"

    def _skip(self, path: Path, reason: str) -> None:
        """Warn once (per store object) that `path` is not one of the store's entries."""
        if path not in self._skipped:
            self._skipped.add(path)
            log.warning("store_entry_skipped", path=str(path), reason=reason)

    def _list(self, directory: Path) -> list[os.DirEntry[str]]:
        """The entries of `directory`; none if it does not exist (or is not a directory)."""
        try:
            with os.scandir(directory) as entries:
                return list(entries)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise StoreError(f"{directory}: cannot list: {exc.strerror}") from None

    # -- reading -------------------------------------------------------------------------------

    def namespaces(self) -> list[str]:
        """Namespaces of the store (its directories with a valid namespace name), sorted."""
        found: list[str] = []
        for entry in self._list(self.root):
            if entry.name == _IDS_DIR:
                continue
            path = Path(entry.path)
            if not _is_namespace(entry.name):
                self._skip(path, "not a valid namespace name")
            elif not entry.is_dir(follow_symlinks=False):
                self._skip(path, "not a directory")
            else:
                found.append(entry.name)
        return sorted(found)

    def _ns_dir(self, namespace: str) -> Path:
        return self.root / validate_namespace(namespace)

    def _read_meta(self, path: Path) -> DictionaryMeta:
        """The metadata in `path` (`<root>/<namespace>/<id>.json`), checked against that place.

        Raises:
            FileNotFoundError: there is no such file.
            DictionaryIntegrityError: it is not metadata, or not that of `<namespace>/<id>`.
        """
        raw = _read_file(path, MAX_META_SIZE, "dictionary metadata file")
        try:
            meta = DictionaryMeta.model_validate_json(raw)
        except ValidationError as exc:
            raise DictionaryIntegrityError(
                f"{path}: unreadable metadata: {describe_invalid(exc)}"
            ) from None
        if str(meta.id) != path.stem or meta.namespace != path.parent.name:
            raise DictionaryIntegrityError(
                f"{path} holds the metadata of dictionary {meta.id} of namespace "
                f"{meta.namespace}, but a dictionary's metadata is <namespace>/<id>.json; "
                "restore the file from the registry or a backup, never move it by hand"
            )
        return meta

    def versions(self, namespace: str) -> list[DictionaryMeta]:
        """Metadata of every dictionary of `namespace`, oldest version first.

        Raises:
            DictionaryIntegrityError: a metadata file is unreadable (`checked` lists the rest).
        """
        metas, problems = self._versions(namespace)
        if problems:
            raise problems[0]
        return metas

    def checked(
        self, namespace: str
    ) -> tuple[list[tuple[DictionaryMeta, StoreError | None]], list[StoreError]]:
        """Every dictionary of `namespace` with readable metadata (oldest version first), each
        with what is wrong with its `.zdict` (missing, corrupt, not the one its metadata
        describes; None: it loads and matches), and the errors of the metadata files that do
        not read. Reads every dictionary whole."""
        metas, unreadable = self._versions(namespace)
        found: list[tuple[DictionaryMeta, StoreError | None]] = []
        for meta in metas:
            problem: StoreError | None = None
            try:
                self._load(self._ns_dir(namespace) / f"{meta.id}.json")
            except FileNotFoundError:
                continue  # removed since the listing
            except StoreError as exc:
                problem = exc
            found.append((meta, problem))
        return found, unreadable

    def _versions(self, namespace: str) -> tuple[list[DictionaryMeta], list[StoreError]]:
        """The readable metadata of `namespace` (oldest version first), and the errors of the
        metadata files that are not."""
        metas: list[DictionaryMeta] = []
        problems: list[StoreError] = []
        for entry in self._list(self._ns_dir(namespace)):
            stem, dot, suffix = entry.name.rpartition(".")
            if not dot or suffix != "json":
                continue
            if parse_dict_id(stem) is None:
                self._skip(
                    Path(entry.path), f"not named <id>.json, {MIN_DICT_ID} <= id <= {MAX_DICT_ID}"
                )
                continue
            try:
                metas.append(self._read_meta(Path(entry.path)))
            except FileNotFoundError:
                continue  # removed since the listing
            except StoreError as exc:
                problems.append(exc)
        return sorted(metas, key=lambda m: m.version), problems

    def _reservation(self, dict_id: int) -> Path:
        return self.root / _IDS_DIR / str(dict_id)

    def _holder(self, path: Path) -> str:
        """The namespace a reservation file names.

        Raises:
            FileNotFoundError: there is no such reservation.
            DictionaryIntegrityError: its content is not a namespace name.
        """
        raw = _read_file(path, _MAX_RESERVATION_SIZE, "reservation file").strip()
        holder = raw.decode("ascii", "replace")
        if not _is_namespace(holder):
            raise DictionaryIntegrityError(
                f"{path} holds {_shown(raw)}, not the name of the namespace that reserved the "
                "id; remove the file only if no namespace holds that id"
            )
        return holder

    def _find(self, dict_id: int) -> Path | None:
        """The metadata file of `dict_id`, looked for where its reservation says first."""
        if not MIN_DICT_ID <= dict_id <= MAX_DICT_ID:
            return None
        try:
            hint: str | None = self._holder(self._reservation(dict_id))
        except FileNotFoundError:
            hint = None
        except ZdictError as exc:  # the reservation is only a hint: look everywhere
            self._skip(self._reservation(dict_id), str(exc))
            hint = None
        candidates = [hint] if hint else []
        candidates += [ns for ns in self.namespaces() if ns != hint]
        for namespace in candidates:
            meta_path = self.root / namespace / f"{dict_id}.json"
            if os.path.lexists(meta_path):
                return meta_path
        return None

    def get(self, dict_id: int) -> Dictionary:
        """The verified dictionary `dict_id` from any namespace.

        Raises:
            UnknownDictionary: no such id in this store.
            DictionaryIntegrityError: the files exist but do not match (sha256, size, id, type).
        """
        meta_path = self._find(dict_id)
        try:
            if meta_path is not None:
                return self._load(meta_path)
        except FileNotFoundError:
            pass  # removed since it was found
        raise UnknownDictionary(
            f"unknown dictionary id {dict_id}: not in {self.describe()} "
            f"(namespaces: {', '.join(self.namespaces()) or 'none'}); copy it from the "
            "registry or the store that produced the records"
        )

    def _load(self, meta_path: Path) -> Dictionary:
        """The verified dictionary whose metadata is `meta_path` (FileNotFoundError if none)."""
        meta = self._read_meta(meta_path)
        data_path = meta_path.with_suffix(".zdict")
        try:
            data = _read_file(data_path, MAX_DICT_SIZE, "dictionary")
        except FileNotFoundError:
            raise DictionaryIntegrityError(
                f"{data_path} is missing but its metadata {meta_path.name} exists; restore the "
                "file from the registry or a backup"
            ) from None
        return Dictionary.verified(meta, data, str(data_path))

    def active_id(self, namespace: str) -> int | None:
        """The active dictionary id of `namespace`, None if none was activated."""
        path = self._ns_dir(namespace) / _ACTIVE
        try:
            raw = _read_file(path, _MAX_ACTIVE_SIZE, "ACTIVE file")
        except FileNotFoundError:
            return None
        dict_id = parse_dict_id(raw.strip().decode("ascii", "replace"))
        if dict_id is None:
            raise DictionaryIntegrityError(
                f"{path} holds {_shown(raw)}, not a dictionary id ({MIN_DICT_ID}..{MAX_DICT_ID}); "
                f"activate one again (zdict-sidecar dicts activate --namespace {namespace} ID)"
            )
        return dict_id

    def active(self, namespace: str) -> Dictionary | None:
        """The verified active dictionary of `namespace`, None if none is active."""
        dict_id = self.active_id(namespace)
        if dict_id is None:
            return None
        try:
            return self._load(self._ns_dir(namespace) / f"{dict_id}.json")
        except FileNotFoundError:
            raise DictionaryIntegrityError(
                f"{self._ns_dir(namespace) / _ACTIVE} names dictionary {dict_id}, which is not "
                f"in namespace {namespace}; activate an existing one (zdict-sidecar dicts list)"
            ) from None

    def history(self, namespace: str) -> list[dict[str, Any]]:
        """Activation events of `namespace`, oldest first: `{"at", "action", "id"}`."""
        return _json_lines(self._ns_dir(namespace) / _HISTORY, "HISTORY file")

    def last_training(self, namespace: str) -> dict[str, Any] | None:
        """The namespace's last training run recorded here (`record_training`), None if none."""
        entries = _json_lines(self._ns_dir(namespace) / _TRAINING_LOG, "training log")
        return entries[-1] if entries else None

    # -- writing -------------------------------------------------------------------------------

    def ensure_writable(self) -> None:
        """Make the store's directory if missing and write (then remove) a file in it.

        Raises:
            StoreError: it cannot be made or written (a read-only volume, a permission).
        """
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.root, prefix=".probe."):
                pass
        except OSError as exc:
            raise StoreError(
                f"the dictionary store {self.root} is not writable: {exc.strerror or exc}"
            ) from None

    def reserve_id(self, namespace: str) -> int:
        """Reserve the next free id across all namespaces; safe against concurrent writers.

        For a store used without a registry; with one, the registry allocates ids.
        """
        validate_namespace(namespace)
        ids_dir = self.root / _IDS_DIR
        try:
            ids_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"{ids_dir}: cannot create: {exc.strerror}") from None
        candidate = max([MIN_DICT_ID - 1, *self.known_ids()]) + 1
        while candidate <= MAX_DICT_ID:
            try:
                fd = os.open(ids_dir / str(candidate), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                candidate += 1  # another writer took it between our listing and now
                continue
            except OSError as exc:
                raise StoreError(f"{ids_dir}: cannot reserve an id: {exc.strerror}") from None
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

    def add_copy(
        self, dictionary: Dictionary, namespace: str | None = None, **extra: object
    ) -> Dictionary:
        """`dictionary`'s bytes and figures stored again under a newly reserved id (not
        activated), in `namespace` (default its own); `extra` replaces metadata it carries
        (`raw_crossover`, `batch_level`, ...)."""
        meta = dictionary.meta
        carried: dict[str, Any] = {
            "raw_crossover": meta.raw_crossover,
            "batch_level": meta.batch_level,
        }
        return self.add(
            namespace or meta.namespace,
            dictionary.data,
            level=meta.level,
            heldout_ratio=meta.heldout_ratio,
            nodict_ratio=meta.nodict_ratio,
            break_even_size=meta.break_even_size,
            training=meta.training,
            **(carried | extra),
        )

    def next_version(self, namespace: str) -> int:
        """One more than the highest version stored for `namespace` (1 for a new namespace)."""
        return max((m.version for m in self.versions(namespace)), default=0) + 1

    def known_ids(self) -> set[int]:
        """Every id this store has reserved, in any namespace.

        A name in `.ids` that is not an id in range is skipped: the store never writes one, and
        counting it (`.ids/99999999999`) would make every id look used up.
        """
        ids: set[int] = set()
        for entry in self._list(self.root / _IDS_DIR):
            dict_id = parse_dict_id(entry.name)
            if dict_id is None:
                self._skip(Path(entry.path), f"not an id in {MIN_DICT_ID}..{MAX_DICT_ID}")
            else:
                ids.add(dict_id)
        return ids

    def put(self, dictionary: Dictionary) -> Dictionary:
        """Write a complete dictionary (id and metadata already set, e.g. from the registry).

        Idempotent for the same bytes. Raises `DictionaryIntegrityError` when the id is already
        taken by other bytes or by another namespace: ids are never reused.
        """
        namespace, dict_id = dictionary.namespace, validate_dict_id(dictionary.id)
        ns_dir = self._ns_dir(namespace)
        meta_path = ns_dir / f"{dict_id}.json"
        try:
            existing: DictionaryMeta | None = self._read_meta(meta_path)
        except FileNotFoundError:
            existing = None
        if existing is not None:
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
        """Record `dict_id` as namespace's; refuse an id another namespace holds.

        Raises `OSError` for the caller to report.
        """
        ids_dir = self.root / _IDS_DIR
        ids_dir.mkdir(parents=True, exist_ok=True)
        path = ids_dir / str(dict_id)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            holder = self._holder(path)
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
        ns_dir = self._ns_dir(namespace)
        try:
            # Never activate something that would not load.
            dictionary = self._load(ns_dir / f"{validate_dict_id(dict_id)}.json")
        except FileNotFoundError:
            raise DictionaryNotFound(
                f"dictionary {dict_id} is not in namespace {namespace} of {self.root} "
                "(zdict-sidecar dicts list shows what is there)"
            ) from None
        event = {"at": utc_now().isoformat(), "action": action, "id": dict_id}
        try:
            _atomic_write(ns_dir / _ACTIVE, f"{dict_id}\n".encode())
        except OSError as exc:
            raise StoreError(f"{ns_dir}: cannot activate: {exc}") from None
        _append_line(ns_dir / _HISTORY, json.dumps(event))
        return dictionary

    def remove(self, namespace: str, dict_id: int) -> bool:
        """Delete a retired dictionary's files (`.json` first: without it the `.zdict` is an
        interrupted write); its id stays reserved, never to be reused. Returns whether it was
        there.

        Raises:
            StoreError: it is the namespace's active dictionary, or a file cannot be deleted.
        """
        ns_dir = self._ns_dir(namespace)
        if self.active_id(namespace) == validate_dict_id(dict_id):
            raise StoreError(
                f"dictionary {dict_id} is the active dictionary of namespace {namespace} in "
                f"{self.root}; activate another before it is removed"
            )
        found = False
        for suffix in (".json", ".zdict"):
            try:
                (ns_dir / f"{dict_id}{suffix}").unlink()
                found = True
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise StoreError(f"{ns_dir}: cannot remove dictionary {dict_id}: {exc}") from None
        return found

    def _active_stack(self, namespace: str) -> list[int]:
        stack: list[int] = []
        for event in self.history(namespace):
            if event.get("action") == "rollback" and stack:
                stack.pop()
                continue
            dict_id = event.get("id")
            # An id in range, as the store writes it (JSON `true` would pass for an int).
            if (
                event.get("action") == "activate"
                and type(dict_id) is int
                and MIN_DICT_ID <= dict_id <= MAX_DICT_ID
            ):
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
        except OSError as exc:
            raise StoreError(f"{ns_dir}: cannot record the training run: {exc}") from None
        _append_line(ns_dir / _TRAINING_LOG, line)
