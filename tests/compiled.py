"""The modules deploy/build_backend.py compiles, as this checkout has them: an editable install
builds each one's extension module next to its source, and Python imports the extension. A
source edited after that build would not run: the suite refuses to start on it (conftest).

With `ZDICT_PURE_PYTHON` set (as for a build that compiles nothing) the package imports those
modules from their sources instead (`sidecar.compiled`): `make test` runs the proxy's unit tests
that way too, so the code a pure-Python build runs is tested as well as the compiled one.
"""

from __future__ import annotations

import importlib.machinery
from pathlib import Path

from deploy.build_backend import compiling

ROOT = Path(__file__).resolve().parents[1]


def pure_python() -> bool:
    """Whether this run asks for the compiled modules' sources: the variable that makes a build
    compile nothing (`deploy.build_backend.PURE_PYTHON`) is set."""
    return not compiling()


def runs_compiled() -> bool:
    """Whether this run imports the compiled modules compiled: the install built them (a build
    without a C compiler did not) and the sources are not asked for."""
    import sidecar

    package = Path(sidecar.__file__).parent
    built = any(
        next((package / "proxy").glob(f"*{suffix}"), None) is not None
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
    )
    return built and not pure_python()


def stale_extensions(root: Path = ROOT) -> list[str]:
    """Each source under `root`/sidecar edited after the extension module built from it (paths
    from `root`): what the suite refuses to run on (the extension, not the source, is what
    would be imported)."""
    stale: list[str] = []
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        for extension in (root / "sidecar").rglob(f"*{suffix}"):
            source = extension.with_name(extension.name[: -len(suffix)] + ".py")
            if source.exists() and source.stat().st_mtime > extension.stat().st_mtime:
                stale.append(str(source.relative_to(root)))
    return sorted(stale)
