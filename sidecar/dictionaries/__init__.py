"""Dictionaries: the model, the local store, the registry topic.

The package itself re-exports the model only: the pure modules that use it (the codec) must not
load the store's file I/O. Import the store from `sidecar.dictionaries.store`.
"""

from sidecar.dictionaries.model import Dictionary, DictionaryMeta, TrainingSample

__all__ = ["Dictionary", "DictionaryMeta", "TrainingSample"]
