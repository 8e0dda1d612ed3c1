"""Turning training decisions and registry entries into stored, active dictionaries.

The order is the guarantee: a dictionary is acknowledged by the registry (when there is one)
before its activation is published, and both before the local store switches to it; the relay
only ever encodes with what the local store holds. So no record references a dictionary that a
reader of the registry cannot find.
"""

from __future__ import annotations

from collections.abc import Iterable

from sidecar.dictionaries.model import Dictionary, TrainingSample, build_dictionary
from sidecar.dictionaries.registry import Registry
from sidecar.dictionaries.registry_state import Activation
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import TrainingError, ZdictError
from sidecar.logs import get_logger
from sidecar.training.choice import Decision, TrainingReport

log = get_logger(__name__)


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


def sync_store(registry: Registry, store: DictionaryStore, namespaces: Iterable[str]) -> list[str]:
    """Make the local store's active dictionary of `namespaces` the registry's; returns those
    that changed.

    Only a namespace whose activation moved is touched: its active dictionary is read (from the
    registry's cache, or its record by offset) and stored; other versions stay in the registry,
    read from it when a record names them. A namespace without an activation in the registry
    keeps its local state.
    """
    changed: list[str] = []
    for namespace in namespaces:
        activation = registry.state.activations.get(namespace)
        if activation is None or _local_active_id(store, namespace) == activation.dict_id:
            continue
        try:
            dictionary = registry.state.dictionaries[activation.dict_id]
            store.put(dictionary)
        except (ZdictError, KeyError) as exc:
            log.error(
                "registry_cache_failed",
                namespace=namespace,
                dict_id=activation.dict_id,
                error=str(exc),
            )
            continue
        try:
            store.activate(
                namespace,
                activation.dict_id,
                action="rollback" if activation.action == "rollback" else "activate",
            )
        except ZdictError as exc:
            log.error(
                "registry_activation_failed",
                namespace=namespace,
                dict_id=activation.dict_id,
                error=str(exc),
            )
            continue
        changed.append(namespace)
        log.info(
            "dictionary_activated_from_registry",
            namespace=namespace,
            dict_id=activation.dict_id,
            action=activation.action,
            by=activation.by,
        )
    return changed


def _local_active_id(store: DictionaryStore, namespace: str) -> int | None:
    """The store's active id; None if its ACTIVE file is unreadable (the registry's replaces it)."""
    try:
        return store.active_id(namespace)
    except ZdictError as exc:
        log.warning("local_active_unreadable", namespace=namespace, error=str(exc))
        return None


def adopt_local(registry: Registry, store: DictionaryStore, namespace: str) -> Activation | None:
    """Publish a namespace's locally active dictionary when the registry has none for it.

    A store trained offline (`zdict-sidecar train --input`) thus becomes the registry's first
    dictionary of the namespace, under the same id, before any record references it. Raises
    `RegistryError` when the registry holds that id for another dictionary.
    """
    if namespace in registry.state.activations:
        return None
    local = store.active(namespace)
    if local is None:
        return None
    registry.publish_dictionary(local, keep_id=True)
    activation = registry.publish_activation(namespace, local.id, "adopt")
    log.info("dictionary_adopted", namespace=namespace, dict_id=local.id)
    return activation
