"""zdict-sidecar: per-message zstd compression with trained, versioned dictionaries for Kafka."""

from importlib.metadata import PackageNotFoundError, version

from sidecar.compiled import import_sources_if_asked

# Before any of the compiled modules is imported (sidecar.compiled).
import_sources_if_asked()

try:
    __version__ = version("zdict-sidecar")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
