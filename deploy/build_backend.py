"""The package's PEP 517 build backend (pyproject.toml's `build-backend`): setuptools', with the
proxy's per-record path compiled to C by mypyc.

The modules in `COMPILED` are plain, type-checked Python (mypy --strict); mypyc turns each into a
C extension that runs the same code without the interpreter's per-bytecode cost. On the proxy's
Produce path (a loop over every record of every batch, the request and response walks) that
is most of its CPU per record. The `.py` files stay in the package; the extension built next to
each one is what Python imports (extension modules come before sources in a package directory).

A dataclass in a compiled module is a compiled class, but the `__init__` that `dataclasses`
generates at import is interpreted: one made per request writes its `__init__` out
(`init=False`), which mypyc compiles (tests/deploy/test_build_backend.py lists them).

`ZDICT_PURE_PYTHON=1` at build time skips the compilation (a machine without a C compiler): the
package then runs those modules as Python, the same behaviour, slower.
"""

from __future__ import annotations

import os
import shutil
import sysconfig
from typing import Final

from setuptools import build_meta

#: The compiled modules, paths from the repository's root: a connection's frame handling and
#: the Produce path's parsers and writers. Plain functions and classes: nothing in them is
#: patched or subclassed at run time.
COMPILED: Final = (
    "sidecar/proxy/addresses.py",
    "sidecar/proxy/answers.py",
    "sidecar/proxy/batches.py",
    "sidecar/proxy/bounded.py",
    "sidecar/proxy/connection.py",
    "sidecar/proxy/frames.py",
    "sidecar/proxy/produce.py",
    "sidecar/proxy/produce_request.py",
)
#: mypy's options for the compilation, after pyproject's [tool.mypy]: the packages installed
#: where the build runs are not read (a fresh build environment has none of them, a developer's
#: venv has them all: the compiled code must not depend on which), so third-party names are
#: typed Any, and what the strict options say of them is left to `make lint`, which reads them.
MYPY_OPTIONS: Final = ("--no-site-packages", "--ignore-missing-imports", "--follow-imports=silent")
#: The name of the shared library holding mypyc's runtime for them.
GROUP: Final = "sidecar_native"
#: Set (to anything but "" or "0") at build time: build without compiling.
PURE_PYTHON: Final = "ZDICT_PURE_PYTHON"


def compiling() -> bool:
    """Whether this build compiles `COMPILED` (`PURE_PYTHON` unset, "" or "0")."""
    return os.environ.get(PURE_PYTHON, "") in ("", "0")


def c_compiler() -> str | None:
    """The path of the C compiler the build would call ($CC, else the one Python was built
    with), or None when it is not on PATH."""
    command = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shutil.which(command.split()[0])


# setuptools ships no stubs here (Any): the one hook overridden is typed below.
class _Backend(build_meta._BuildMetaBackend):  # type: ignore[misc]
    """setuptools' backend with the extensions given to `setup()` rather than read from a
    setup.py (the repository keeps its top level to pyproject.toml)."""

    def run_setup(self, setup_script: str = "setup.py") -> None:
        from setuptools import setup

        if not compiling():
            setup()
            return
        if c_compiler() is None:
            # Said before mypyc runs: its own failure would be a compiler traceback.
            raise SystemExit(
                "zdict-sidecar's build compiles the proxy's modules with mypyc and finds no C "
                "compiler: install one (Debian: apt-get install gcc libc6-dev), or build with "
                f"{PURE_PYTHON}=1 to run them as Python (the same code, slower)"
            )
        # Imported here: mypy is a build requirement only, absent where the package runs.
        from mypyc.build import mypycify

        setup(ext_modules=mypycify([*MYPY_OPTIONS, *COMPILED], opt_level="3", group_name=GROUP))


_BACKEND: Final = _Backend()

get_requires_for_build_wheel = _BACKEND.get_requires_for_build_wheel
get_requires_for_build_sdist = _BACKEND.get_requires_for_build_sdist
prepare_metadata_for_build_wheel = _BACKEND.prepare_metadata_for_build_wheel
build_wheel = _BACKEND.build_wheel
build_sdist = _BACKEND.build_sdist
get_requires_for_build_editable = _BACKEND.get_requires_for_build_editable
prepare_metadata_for_build_editable = _BACKEND.prepare_metadata_for_build_editable
build_editable = _BACKEND.build_editable
