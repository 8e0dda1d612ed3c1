"""deploy/build_backend.py: the modules it compiles are the ones this environment imports
compiled, their per-request dataclasses built by compiled code, and a build asked for pure
Python, or without a working C compiler, compiles nothing."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.machinery
import os
import types
from pathlib import Path

import pytest

from deploy import build_backend
from sidecar.proxy.batches import ReadBatch, ReadPartition
from sidecar.proxy.filter import Expected
from sidecar.proxy.frames import RequestHeader
from sidecar.proxy.produce_request import PartitionData, ProduceRequest, TopicData
from tests.compiled import ROOT, runs_compiled, stale_extensions

EXTENSIONS = tuple(importlib.machinery.EXTENSION_SUFFIXES)


def _module(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def test_the_modules_the_backend_compiles_are_imported_compiled_unless_sources_are_asked() -> None:
    # `make` builds this environment compiling: the tests and the benchmarks run the code the
    # image ships; with ZDICT_PURE_PYTHON the suite runs the sources a pure build would.
    for path in build_backend.COMPILED:
        assert (ROOT / path).is_file(), path
        module = importlib.import_module(_module(path))
        compiled = str(module.__file__).endswith(EXTENSIONS)
        assert compiled is runs_compiled(), module.__file__


#: The dataclasses of the compiled modules made per request, each with its `__init__` written
#: out (`init=False`): the one dataclasses generates runs interpreted, even in a compiled class.
PER_REQUEST = (
    RequestHeader,
    Expected,
    ReadBatch,
    ReadPartition,
    PartitionData,
    TopicData,
    ProduceRequest,
)


@pytest.mark.parametrize("cls", PER_REQUEST, ids=lambda cls: cls.__name__)
def test_a_per_request_dataclass_is_built_by_compiled_code(cls: type) -> None:
    assert dataclasses.is_dataclass(cls)
    interpreted = isinstance(cls.__init__, types.FunctionType)
    assert interpreted is not runs_compiled(), cls.__init__


def test_a_written_out_init_keeps_the_dataclass_semantics() -> None:
    header = RequestHeader(0, 11, 7, "perf", 20)
    assert header == RequestHeader(0, 11, 7, "perf", 20) != RequestHeader(0, 11, 8, "perf", 20)
    assert hash(header) == hash(RequestHeader(0, 11, 7, "perf", 20))
    with pytest.raises(dataclasses.FrozenInstanceError):
        header.version = 12  # type: ignore[misc]  # frozen: what the test checks
    expected = Expected(0, 11, 7)
    assert (expected.marked, expected.then) == (False, [])
    assert expected.then is not Expected(0, 11, 8).then, "a list of its own each"
    assert ReadPartition([], []).value_bytes == 0
    assert ReadBatch(b"", (), 0, [], True).plain == b""


@pytest.mark.parametrize(("value", "compiles"), [("", True), ("0", True), ("1", False)])
def test_zdict_pure_python_turns_the_compilation_off(
    monkeypatch: pytest.MonkeyPatch, value: str, compiles: bool
) -> None:
    monkeypatch.setenv(build_backend.PURE_PYTHON, value)
    assert build_backend.compiling() is compiles


def test_a_source_edited_after_its_extension_was_built_is_found_stale(tmp_path: Path) -> None:
    package = tmp_path / "sidecar"
    package.mkdir()
    source, extension = package / "hot.py", package / f"hot{EXTENSIONS[0]}"
    source.write_text("X = 1\n")
    extension.write_bytes(b"")
    os.utime(source, (1_000, 1_000))
    os.utime(extension, (2_000, 2_000))
    assert stale_extensions(tmp_path) == []
    os.utime(source, (3_000, 3_000))
    assert stale_extensions(tmp_path) == ["sidecar/hot.py"]


def test_no_compiled_module_here_is_older_than_its_source() -> None:
    assert stale_extensions() == []


def test_this_machine_has_a_working_c_compiler() -> None:
    # `make` builds this environment compiled: what the tests above check.
    assert build_backend.compiler_works(build_backend.c_compiler())


@pytest.mark.parametrize("cc", ["false", "no-such-compiler-zdict -O2"])
def test_a_build_without_a_working_c_compiler_installs_as_python_and_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], cc: str
) -> None:
    monkeypatch.setenv("CC", cc)
    monkeypatch.delenv(build_backend.PURE_PYTHON, raising=False)  # a build asked to compile
    assert build_backend.ext_modules() == []
    (line,) = capsys.readouterr().err.splitlines()
    assert "no working C compiler" in line and build_backend.PURE_PYTHON in line


def test_a_pure_python_build_looks_for_no_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(build_backend.PURE_PYTHON, "1")
    monkeypatch.setattr(build_backend, "compiler_works", lambda _command: pytest.fail("probed"))
    assert build_backend.ext_modules() == []
