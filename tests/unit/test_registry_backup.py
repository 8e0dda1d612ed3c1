"""The registry backup file (`dicts export` / `dicts import`): every record round-trips byte for
byte, tombstones and null headers included, and a damaged or foreign file is refused with one
line naming the file, the line and what is wrong (the CLI's exit 1, no traceback). The topic
side is the restore drill's (tests/integration/test_registry_restore.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sidecar.cli.main import main
from sidecar.dictionaries.backup import RawRecord, read_backup, write_backup
from sidecar.errors import InputError

RECORDS = [
    RawRecord(0, b"dictionary/32768/ab", b"\x00\xff\x28\xb5", (("zdict.format", b"1"),)),
    RawRecord(1, b"active/orders", b'{"dict_id": 32768}', (("zdict.format", b"1"),)),
    RawRecord(4, b"active/orders", None, ()),  # a tombstone, after a compaction gap
    RawRecord(5, None, b"", (("empty", None), ("twice", b"a"), ("twice", b"b"))),
]


def test_every_record_round_trips_byte_for_byte(tmp_path: Path) -> None:
    path = tmp_path / "registry.backup"
    write_backup(path, "_zdict_dictionaries", RECORDS)
    assert read_backup(path) == ("_zdict_dictionaries", RECORDS)
    assert not (tmp_path / "registry.backup.partial").exists()


def _damaged(tmp_path: Path, edit: str) -> Path:
    path = tmp_path / "registry.backup"
    write_backup(path, "_zdict_dictionaries", RECORDS)
    lines = path.read_text().splitlines()
    if edit == "truncated":
        lines = lines[:-1]
    elif edit == "not json":
        lines[2] = lines[2][:-3]
    elif edit == "bad base64":
        row = json.loads(lines[1])
        row["value"] = "not base64!"
        lines[1] = json.dumps(row)
    elif edit == "foreign":
        lines = ['{"hello": "world"}']
    elif edit == "newer":
        header = json.loads(lines[0])
        header["version"] = 2
        lines[0] = json.dumps(header)
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    ("edit", "complaint"),
    [
        ("truncated", "announces 4 records, the file holds 3"),
        ("not json", "line 3: not JSON"),
        ("bad base64", "line 2: not base64"),
        ("foreign", "is not a registry backup"),
        ("newer", "backup version 2"),
    ],
)
def test_a_damaged_or_foreign_file_is_refused_naming_what_is_wrong(
    tmp_path: Path, edit: str, complaint: str
) -> None:
    with pytest.raises(InputError, match=complaint):
        read_backup(_damaged(tmp_path, edit))


def test_import_of_a_damaged_file_is_one_error_line_before_any_kafka_client(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing listens here: a file that does not parse must fail before any connection.
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    path = _damaged(tmp_path, "truncated")
    assert main(["dicts", "import", str(path)]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert str(path) in line and "truncated" in line and "Traceback" not in line


def test_export_and_import_refuse_a_disabled_registry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZDICT_REGISTRY__ENABLED", "false")
    assert main(["dicts", "export", str(tmp_path / "out")]) != 0
    assert "ZDICT_REGISTRY__ENABLED" in capsys.readouterr().err
