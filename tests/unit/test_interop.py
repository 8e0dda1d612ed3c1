"""Frames from the Encoder are zstd: the reference `zstd` CLI decodes them byte-exact (compact
frames once their magic number is prepended, the documented one-line transform)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from sidecar.codec import (
    Encoder,
    FrameOptions,
    Outcome,
    WireFormat,
    header_tag,
    standard_frame,
)
from sidecar.dictionaries.store import DictionaryStore
from tests.unit.dictionaries import AddDictionary


def zstd_cli() -> str:
    path = shutil.which("zstd")
    if path is None:  # a missing reference must fail loudly, not skip: `make test` installs it
        pytest.fail("the zstd CLI is not installed; run `make test` (it installs Debian's zstd)")
    return path


@pytest.mark.parametrize("wire", ["compact", "standard"])
@pytest.mark.parametrize(
    "frame", [FrameOptions(), FrameOptions(checksum=True)], ids=["default", "checksum"]
)
def test_the_zstd_cli_decodes_our_frames_with_the_stored_dictionary_file(
    tmp_path: Path,
    store: DictionaryStore,
    add_dictionary: AddDictionary,
    events: list[bytes],
    frame: FrameOptions,
    wire: WireFormat,
) -> None:
    dictionary = add_dictionary()
    dict_file = store.root / "orders" / f"{dictionary.id}.zdict"
    encoder = Encoder(dictionary, frame=frame, wire=wire)

    checked = 0
    for i, raw in enumerate(events[4000:4300]):
        encoded = encoder.encode_record(raw)
        if encoded.outcome != Outcome.COMPRESSED:
            continue
        assert encoded.value is not None
        frame_file = tmp_path / f"{i}.zst"
        tag = header_tag(encoded.headers, encoder.header_key)
        assert tag is not None
        frame_file.write_bytes(standard_frame(encoded.value, tag))  # what `cat --frames` prints
        result = subprocess.run(
            [zstd_cli(), "-d", "-q", "-c", "-D", str(dict_file), str(frame_file)],
            capture_output=True,
            check=True,
        )
        assert result.stdout == raw
        checked += 1
    assert checked > 250


def test_the_zstd_cli_refuses_a_frame_without_its_dictionary(
    tmp_path: Path, add_dictionary: AddDictionary, events: list[bytes]
) -> None:
    value, _ = Encoder(add_dictionary(), wire="standard").encode(events[4000])
    assert value is not None
    frame_file = tmp_path / "one.zst"
    frame_file.write_bytes(value)
    result = subprocess.run([zstd_cli(), "-d", "-q", "-c", str(frame_file)], capture_output=True)
    assert result.returncode != 0
    assert b"ictionary" in result.stderr  # "Dictionary mismatch" / "dictionary required"
