"""Compiled modules, or their sources: the package built with a C compiler holds a mypyc
extension module next to each of the proxy's per-request modules (deploy/build_backend.py), and
Python imports the extension; built without one, the sources run, the same behaviour.

`ZDICT_PURE_PYTHON` set (to anything but "" or "0") when the package is imported makes it
import every such module from its source even where the extension is there: the same install
measured both ways (`bench proxy`'s row without the compiled modules).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Final

#: The variable that asks for the sources (also what makes a build compile nothing).
PURE_PYTHON: Final = "ZDICT_PURE_PYTHON"


def sources_asked() -> bool:
    """Whether `PURE_PYTHON` asks for the sources."""
    return os.environ.get(PURE_PYTHON, "") not in ("", "0")


class _Sources(importlib.abc.MetaPathFinder):
    """Finds a module of the package as its `.py` file when an extension module sits beside it."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if path is None or not fullname.startswith("sidecar."):
            return None
        name = fullname.rpartition(".")[2]
        for entry in path:
            source = Path(entry, f"{name}.py")
            compiled = any(
                Path(entry, name + suffix).exists()
                for suffix in importlib.machinery.EXTENSION_SUFFIXES
            )
            if compiled and source.is_file():
                return importlib.util.spec_from_file_location(fullname, source)
        return None


def import_sources_if_asked() -> None:
    """Import the compiled modules from their sources from now on, if `PURE_PYTHON` asks."""
    if sources_asked() and not any(isinstance(f, _Sources) for f in sys.meta_path):
        sys.meta_path.insert(0, _Sources())
