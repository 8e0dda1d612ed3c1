"""The namespaces a proxy serves and their dictionary lifecycle, as `run` has it: per topic a
route (encoder with its active dictionary, a reservoir sampling what was written, metrics),
one trainer for them all, and the election of who trains what. Records go upstream to the topic
the client names.

The proxies of a topic (one per producer pod) join one consumer group on the topic
(`proxy.group_id`) without reading anything (`Elector`): as in `run`, the member holding
partition 0 trains and publishes to the registry; every proxy follows the registry and switches
encoders. Topics named in `proxy.topics` are set up before the proxy listens; others when a
client first produces to them (they compress without a dictionary until one is active), up to
`proxy.max_topics` topics in all: a namespace is never dropped, so a client producing to ever
new topics the allow-list's patterns match would otherwise grow memory and metric series without
bound. A Produce to one more is refused (POLICY_VIOLATION).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from confluent_kafka import Consumer, TopicPartition
from kio.schema.errors import ErrorCode

from sidecar.config import Settings
from sidecar.dictionaries.lifecycle import adopt_local, sync_store
from sidecar.dictionaries.registry import Registry
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import ProduceRefused, ZdictError
from sidecar.kafka import make_consumer
from sidecar.logs import get_logger
from sidecar.metrics import Metrics
from sidecar.namespaces import Namespace, Namespaces, encoder_factory
from sidecar.training.trainer import Trainer

log = get_logger("sidecar.proxy")  # the name these lines have always logged under

#: The refusal's kind (a metrics label and log key, `produce`).
TOO_MANY_TOPICS: Final = "too_many_topics"


@dataclass(frozen=True, slots=True)
class Route:
    """How records produced to one topic are encoded."""

    #: The topic as the client names it: its namespace (encoder, sample, metrics).
    namespace: Namespace

    @property
    def topic(self) -> str:
        return self.namespace.topic


class Elector:
    """Who trains what: a consumer in the proxies' group, subscribed to the topics,
    reading nothing (every partition is paused as it is assigned). The member holding a
    topic's partition 0 trains its namespace, as in `run`."""

    def __init__(
        self,
        settings: Settings,
        namespace_of: Callable[[str], str | None],
        on_assignment: Callable[[set[tuple[str, int]]], None],
    ) -> None:
        self._consumer: Consumer = make_consumer(settings, group_id=settings.proxy.group_id)
        self._namespace_of = namespace_of
        self._on_assignment = on_assignment
        self._held: set[tuple[str, int]] = set()
        self._wanted: list[str] = []
        self._subscribed: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="zdict-elector", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def subscribe(self, topics: Iterable[str]) -> None:
        """Join the group for these topics (thread-safe; applied on the thread)."""
        with self._lock:
            self._wanted = sorted(set(topics))

    @property
    def held(self) -> set[tuple[str, int]]:
        """(namespace, partition) pairs this proxy holds now."""
        return set(self._held)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30.0)
        self._consumer.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                wanted = list(self._wanted)
            if wanted != self._subscribed and wanted:
                self._consumer.subscribe(
                    wanted, on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked
                )
                self._subscribed = wanted
            if self._subscribed:
                self._consumer.poll(0.5)  # serves the rebalance callbacks; returns nothing
            else:
                self._stop.wait(0.5)

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.assign(partitions)
        consumer.pause(partitions)  # nothing is ever fetched
        self._held |= self._pairs(partitions)
        self._on_assignment(set(self._held))

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._held -= self._pairs(partitions)
        self._on_assignment(set(self._held))

    def _pairs(self, partitions: list[TopicPartition]) -> set[tuple[str, int]]:
        pairs = set()
        for tp in partitions:
            namespace = self._namespace_of(tp.topic)
            if namespace is not None:
                pairs.add((namespace, tp.partition))
        return pairs


class ProxyRoutes:
    """Every namespace the proxy serves: its route (the per-topic core, `Namespaces`), and the
    trainer of them all."""

    def __init__(
        self,
        settings: Settings,
        store: DictionaryStore,
        registry: Registry | None,
        metrics: Metrics,
    ) -> None:
        self.settings = settings
        self.store = store
        self.registry = registry
        self.metrics = metrics
        self._training = settings.training.enabled and settings.proxy.compress
        self.namespaces = Namespaces(
            store,
            encoder_factory(settings.codec, compress=settings.proxy.compress),
            metrics,
            settings.sampling if self._training else None,
            compress=settings.proxy.compress,
        )
        self._routes: dict[str, Route] = {}
        self._trainer: Trainer | None = None
        self._trained: set[str] = set()
        self._elector: Elector | None = None
        self._setup = threading.Lock()
        self._closed = False

    # -- routes (the event loop) ---------------------------------------------------------------

    def namespace_of(self, topic: str) -> str | None:
        return topic if topic in self._routes else None

    def route(self, topic: str) -> Route:
        """The route of `topic`, set up on first use (its trainer in the background).

        Raises:
            ProduceRefused: `topic` would be one more than `proxy.max_topics`.
        """
        route = self._routes.get(topic)
        if route is None:
            if len(self._routes) >= self.settings.proxy.max_topics:
                # Not retriable: the proxy's topics are only ever added to, so a retry fails.
                raise ProduceRefused(
                    ErrorCode.policy_violation,
                    TOO_MANY_TOPICS,
                    f"the proxy serves {len(self._routes)} topics already, its most "
                    "(ZDICT_PROXY__MAX_TOPICS): raise it, or narrow ZDICT_PROXY__ALLOWED_TOPICS "
                    "to the topics this application produces to",
                )
            route = self._add(topic)
            threading.Thread(
                target=self._set_up_training, name="zdict-proxy-setup", daemon=True
            ).start()
        return route

    def _add(self, topic: str) -> Route:
        route = Route(self.namespaces.add(topic))
        self._routes[topic] = route
        return route

    def tick(self) -> None:
        """Switch encoders whose active dictionary changed (see `Namespaces.refresh_if_due`)."""
        self.namespaces.refresh_if_due()

    # -- training (worker threads) -------------------------------------------------------------

    def set_up(self, topics: Iterable[str]) -> None:
        """Set up `topics` now (at start, before listening): routes, registry, trainer."""
        for topic in topics:
            if topic not in self._routes:
                self._add(topic)
        self._set_up_training()

    def _set_up_training(self) -> None:
        """Give the trainer every namespace: a new trainer when namespaces were added (the old
        one stopped first, so that one thread at a time reads the registry)."""
        with self._setup:
            topics = sorted(self._routes)
            if self._closed or set(topics) == self._trained:
                return
            if self._trainer is not None:
                self._trainer.stop()
            new = [t for t in topics if t not in self._trained]
            if self.registry is not None:
                for topic in new:
                    try:
                        adopt_local(self.registry, self.store, topic)
                    except ZdictError as exc:
                        log.warning("dictionary_not_adopted", namespace=topic, error=str(exc))
                sync_store(self.registry, self.store, new)
            self._trainer = Trainer(
                settings=self.settings,
                store=self.store,
                registry=self.registry,
                metrics=self.metrics,
                reservoirs=self.namespaces.reservoirs(),
                topics=topics,
                encoder_stats=self.namespaces.encoder_stats,
                dictionaries_changed=self.namespaces.request_refresh,
            )
            self._trained = set(topics)
            if self._elector is not None:
                self._trainer.on_assignment(self._elector.held)
            self._trainer.start()
            self.namespaces.request_refresh()
            if self._elector is not None:
                self._elector.subscribe(topics)
            log.info("namespaces_set_up", namespaces=topics)

    def elect(self) -> None:
        """Join the proxies' group so that one proxy per topic trains it."""
        if not self._training:
            return
        self._elector = Elector(self.settings, self.namespace_of, self._assigned)
        self._elector.subscribe(self._routes)
        self._elector.start()

    def _assigned(self, held: set[tuple[str, int]]) -> None:
        self.metrics.set_assigned_partitions(len(held))
        trainer = self._trainer
        if trainer is not None:
            trainer.on_assignment(held)

    def close(self) -> None:
        with self._setup:
            self._closed = True
            if self._trainer is not None:
                self._trainer.stop()
        if self._elector is not None:
            self._elector.stop()
