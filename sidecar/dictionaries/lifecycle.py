"""Registry entries into stored, active dictionaries: the local store follows the registry, and a
store trained offline becomes the registry's first dictionary of its namespace.

The order is the guarantee: a dictionary is acknowledged by the registry before its activation
is published, and both before the local store switches to it; the relay only ever encodes with
what the local store holds. So no record references a dictionary that a reader of the registry
cannot find. A training run's dictionary takes the same order: `sidecar.training.promotion`.
"""

from __future__ import annotations

from collections.abc import Iterable

from sidecar.dictionaries.registry import Registry
from sidecar.dictionaries.registry_state import Activation
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import ZdictError
from sidecar.logs import get_logger

log = get_logger(__name__)


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
