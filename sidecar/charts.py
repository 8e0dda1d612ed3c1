"""PNG charts for benchmarks and reports: matplotlib, an optional dependency (`[report]`)."""

from __future__ import annotations

from typing import Any

from sidecar.errors import MissingDependency


def pyplot() -> Any:
    """`matplotlib.pyplot` on the file-only Agg backend (no display needed).

    Raises:
        MissingDependency: matplotlib is not installed; the message says how to add it.
    """
    try:
        import matplotlib
    except ImportError:
        raise MissingDependency(
            "PNG charts need matplotlib: pip install 'zdict-sidecar[report]' "
            "(tables and JSON were written without it)"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
