"""The modules deploy/build_backend.py compiles, as this checkout has them: an editable install
builds each one's extension module next to its source, and Python imports the extension. A
source edited after that build would not run: the suite refuses to start on it (conftest)."""

from __future__ import annotations

import importlib.machinery
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
