"""Turning a training decision into stored (and active) dictionaries.

Today: the local store. The registry topic (publish before activate) plugs in here.
"""

from __future__ import annotations

from sidecar.dictionaries.model import Dictionary, TrainingSample
from sidecar.dictionaries.store import DictionaryStore
from sidecar.dictionaries.training import Decision, TrainingReport
from sidecar.errors import TrainingError


def store_trained(
    store: DictionaryStore,
    report: TrainingReport,
    *,
    window: str,
    parent_id: int | None,
    activate: bool = True,
) -> Dictionary:
    """Store the dictionary of a PROMOTED report under a new id; activate it unless told not to."""
    if report.decision is not Decision.PROMOTED or report.dictionary is None:
        raise TrainingError(f"nothing to store: the training run was {report.decision.value}")
    assert report.chosen is not None and report.nodict is not None  # set on every promotion
    dictionary = store.add(
        report.namespace,
        report.dictionary,
        level=report.chosen.level,
        heldout_ratio=round(report.chosen.ratio, 4),
        nodict_ratio=round(report.nodict.ratio, 4),
        break_even_size=report.break_even_size,
        parent_id=parent_id,
        training=TrainingSample(
            count=report.train_count,
            bytes=report.train_bytes,
            heldout_count=report.heldout_count,
            heldout_bytes=report.heldout_bytes,
            window=window,
        ),
        dict_size_requested=report.chosen.dict_size,
    )
    if activate:
        store.activate(report.namespace, dictionary.id)
    return dictionary
