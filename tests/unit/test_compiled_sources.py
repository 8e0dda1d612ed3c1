"""`sidecar.compiled`: with ZDICT_PURE_PYTHON set where the package is imported, the modules
mypyc compiled are imported from their sources, the same install measured both ways; without
it, the extension modules where the build made them (none: a build without a C compiler)."""

from __future__ import annotations

import importlib.machinery
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.build_backend import COMPILED

#: Prints where each compiled module was imported from.
_WHERE = "import importlib, sys; [print(importlib.import_module(m).__file__) for m in sys.argv[1:]]"


def _imported_from(pure: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "ZDICT_PURE_PYTHON"}
    if pure is not None:
        env["ZDICT_PURE_PYTHON"] = pure
    modules = [p.removesuffix(".py").replace("/", ".") for p in COMPILED]
    done = subprocess.run(
        [sys.executable, "-c", _WHERE, *modules], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.parametrize("pure", ["1", "yes"])
def test_zdict_pure_python_imports_every_compiled_module_from_its_source(pure: str) -> None:
    files = _imported_from(pure)
    assert len(files) == len(COMPILED) and all(f.endswith(".py") for f in files), files


@pytest.mark.parametrize("pure", [None, "", "0"])
def test_without_it_a_module_built_compiled_is_imported_compiled(pure: str | None) -> None:
    # A build without a C compiler has no extension module: its sources are imported.
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    files = [Path(f) for f in _imported_from(pure)]
    assert len(files) == len(COMPILED)
    for file in files:
        source = file.with_name(file.name.split(".")[0] + ".py")
        built = any(source.with_suffix(s).exists() for s in suffixes)
        assert file.name.endswith(suffixes) is built, (file, built)
