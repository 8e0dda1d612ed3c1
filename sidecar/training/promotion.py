"""A promoted training run into a stored, active dictionary: published to the registry (when
there is one) before its activation, and both before the local store switches to it, the order
`sidecar.dictionaries.lifecycle` keeps for the registry's own entries.
"""

from __future__ import annotations

from sidecar.dictionaries.model import Dictionary, TrainingSample, build_dictionary
from sidecar.dictionaries.registry import Registry
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import TrainingError
from sidecar.training.choice import TrainingReport
from sidecar.training.params import Decision


def dictionary_from_report(
    report: TrainingReport,
    *,
    dict_id: int,
    version: int,
    window: str,
    parent_id: int | None,
) -> Dictionary:
    """The dictionary of a PROMOTED report, with its measured numbers as metadata."""
    if report.decision is not Decision.PROMOTED or report.dictionary is None:
        raise TrainingError(f"nothing to store: the training run was {report.decision.value}")
    assert report.chosen is not None and report.nodict is not None  # set on every promotion
    return build_dictionary(
        report.namespace,
        report.dictionary,
        dict_id=dict_id,
        version=version,
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
        raw_crossover=report.raw_crossover,
        batch_level=report.batch_level.level if report.batch_level else None,
    )


def promote(
    store: DictionaryStore,
    registry: Registry | None,
    report: TrainingReport,
    *,
    window: str,
    parent_id: int | None,
    activate: bool = True,
) -> Dictionary:
    """Publish (registry first), store and (unless told not to) activate a promoted dictionary.

    Without a registry the store allocates the id. With one, the id is the registry's next free
    id (above the store's too), claimed by publishing; the store then caches it as published.

    Raises:
        RegistryUnavailable: the registry did not acknowledge; nothing was stored or activated.
    """
    namespace = report.namespace
    if registry is None:
        dictionary = dictionary_from_report(
            report,
            dict_id=store.reserve_id(namespace),
            version=store.next_version(namespace),
            window=window,
            parent_id=parent_id,
        )
    else:
        registry.refresh()
        avoid = store.known_ids()
        candidate = dictionary_from_report(
            report,
            dict_id=registry.state.next_id(avoid),
            version=registry.state.next_version(namespace, store.next_version(namespace)),
            window=window,
            parent_id=parent_id,
        )
        dictionary = registry.publish_dictionary(candidate, avoid=avoid)
        if activate:
            registry.publish_activation(namespace, dictionary.id, "promote")
    store.put(dictionary)
    if activate:
        store.activate(namespace, dictionary.id)
    return dictionary
