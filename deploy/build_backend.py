"""The package's PEP 517 build backend (pyproject.toml's `build-backend`): setuptools' own hooks,
and what setup.py gives `setup()`: the proxy's per-record path compiled to C by mypyc when a
working C compiler is there, the same modules as Python when not.

The modules in `COMPILED` are plain, type-checked Python (mypy --strict); mypyc turns each into a
C extension that runs the same code without the interpreter's per-bytecode cost. On the proxy's
Produce path (a loop over every record of every batch, the request and response walks) that
is much of its CPU per record (`bench proxy`'s row with `ZDICT_PURE_PYTHON=1`). The `.py` files
stay in the package; the extension built next to each one is what Python imports (extension
modules come before sources in a package directory), unless `ZDICT_PURE_PYTHON` is set where
the package runs (`sidecar.compiled`).

A dataclass in a compiled module is a compiled class, but the `__init__` that `dataclasses`
generates at import is interpreted: one made per request writes its `__init__` out
(`init=False`), which mypyc compiles (tests/deploy/test_build_backend.py lists them).

Compiled modules are an option, not a requirement: `ZDICT_PURE_PYTHON=1` at build time skips
the compilation, and so does a build whose C compiler ($CC, else Python's) is missing or does not
compile a line of C (`CC=false pip install .`): said in one line, then the package installs as
Python, the same behaviour, slower.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any, Final

# The backend's hooks are setuptools' own (its public PEP 517 module), setup.py giving the
# extensions to `setup()`.
from setuptools.build_meta import (
    build_editable,
    build_sdist,
    build_wheel,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]

#: The compiled modules, paths from the repository's root: a connection's frame handling, the
#: filters every request meets, the Produce path's parsers and writers, and the varints and
#: batch layout they read and write with (`sidecar.wire`). Plain functions and classes: nothing
#: in them is patched or subclassed at run time.
COMPILED: Final = (
    "sidecar/proxy/addresses.py",
    "sidecar/proxy/batch_choice.py",
    "sidecar/proxy/batches.py",
    "sidecar/proxy/bounded.py",
    "sidecar/proxy/chain.py",
    "sidecar/proxy/connection.py",
    "sidecar/proxy/correlation.py",
    "sidecar/proxy/filter.py",
    "sidecar/proxy/filters/api_versions.py",
    "sidecar/proxy/filters/produce.py",
    "sidecar/proxy/frames.py",
    "sidecar/proxy/node_addresses.py",
    "sidecar/proxy/produce.py",
    "sidecar/proxy/produce_request.py",
    "sidecar/proxy/produce_response.py",
    "sidecar/wire/record_batch.py",
    "sidecar/wire/varint.py",
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
    """Whether this build is asked to compile `COMPILED` (`PURE_PYTHON` unset, "" or "0")."""
    return os.environ.get(PURE_PYTHON, "") in ("", "0")


def c_compiler() -> list[str]:
    """The command of the C compiler the build would call: $CC, else the one Python was built
    with, else `cc`."""
    return shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")


def compiler_works(command: list[str]) -> bool:
    """Whether `command` compiles a line of C into an object file."""
    with tempfile.TemporaryDirectory(prefix="zdict-cc-") as tmp:
        source = Path(tmp, "probe.c")
        source.write_text("int probe(void) { return 0; }\n")
        try:
            done = subprocess.run(
                [*command, "-c", str(source), "-o", str(Path(tmp, "probe.o"))],
                capture_output=True,
                check=False,
            )
        except OSError:  # not on PATH, not executable
            return False
        return done.returncode == 0 and Path(tmp, "probe.o").is_file()


def ext_modules() -> list[Any]:
    """The extension modules setup.py gives `setup()`: `COMPILED` through mypyc, or none (a
    pure-Python build, asked for or for want of a C compiler)."""
    if not compiling():
        return []
    command = c_compiler()
    if not compiler_works(command):
        print(
            f"zdict-sidecar: no working C compiler ({shlex.join(command)}): the proxy's modules "
            f"are installed as Python, not compiled (the same code, slower; {PURE_PYTHON}=1 "
            "says so without looking for one)",
            file=sys.stderr,
        )
        return []
    # Imported here: mypy is a build requirement only, absent where the package runs.
    from mypyc.build import mypycify

    extensions: list[Any] = mypycify([*MYPY_OPTIONS, *COMPILED], opt_level="3", group_name=GROUP)
    return extensions
