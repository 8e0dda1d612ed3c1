"""PNG charts for reports and benchmarks: matplotlib, an optional dependency (`[report]`).

Figures are built with matplotlib's object API (`Figure`), never `pyplot`: no global state, no
display, safe in a long-running process.
"""

from __future__ import annotations

from typing import Any, Final

from sidecar.errors import MissingDependency

INSTALL_HINT: Final = "pip install 'zdict-sidecar[report]'"


def require_matplotlib() -> None:
    """Fail before any work when a chart could not be drawn.

    Raises:
        MissingDependency: matplotlib is not installed; the message says how to add it.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display, no GUI toolkit
    except ImportError:
        raise MissingDependency(f"PNG charts need matplotlib: {INSTALL_HINT}") from None


def figure(**kwargs: Any) -> Any:
    """A new `matplotlib.figure.Figure` (see `require_matplotlib`)."""
    require_matplotlib()
    from matplotlib.figure import Figure

    return Figure(**kwargs)
