"""Dictionaries: the model, the local store and (pure) training."""

from sidecar.dictionaries.model import Dictionary, DictionaryMeta, TrainingSample
from sidecar.dictionaries.store import DictionaryStore

__all__ = ["Dictionary", "DictionaryMeta", "DictionaryStore", "TrainingSample"]
