"""zdict-sidecar: per-message zstd compression with trained, versioned dictionaries for Kafka."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("zdict-sidecar")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
