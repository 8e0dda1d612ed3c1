"""Encoders that follow the registry: what a producer compressing in-process encodes with.

`FollowingEncoder` is the registry-side counterpart of `Encoder.from_store` (the codec itself
stays free of Kafka and of the registry): for each namespace it holds an `Encoder` of the
namespace's active dictionary, as the registry topic says, and swaps it when an activation
(a promotion, an operator's `activate` or `rollback`) is published.

* **Waits for what it serves, not for the registry's history.** The first read is the
  registry's index and the records after it (`Registry.catch_up`), then the prepared
  namespaces' dictionaries, one record each by offset; the constructor waits for that, at most
  `ready_timeout` (10 s), and returns as soon as it is done.
* **Never blocks the caller on a read.** The registry is read on a thread of its own;
  `encoder()` is a dictionary lookup. A namespace seen for the first time gets its encoder
  built on the spot when the registry already names its dictionary (its one record read by
  offset if not cached: milliseconds, once), else the no-dictionary encoder until the thread
  finds one.
* **Switches within `follow_interval` (1 s) of an activation**, plus the read itself; the
  encoder object is replaced whole, so a thread encoding with the old one finishes with it and
  every record names the dictionary it was compressed with.
* **Never trains.** Training belongs to one trainer per namespace (`zdict-sidecar train --topic
  T --publish`, or a relay's trainer), which publishes to the registry this class follows.
* **Without a known dictionary** (registry unreachable, topic missing, none trained yet) it
  compresses without one where that shrinks (values of 128 B or more) and passes the rest
  through, as the relay does; a `no_dictionary` log line says so once per namespace, and the
  producer's metrics show `dict_id="0"`.
* Every dictionary it encodes with was read from the registry, where it was acknowledged before
  its activation: a consumer that follows the same registry can decode every record.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Final, Protocol

from sidecar.codec import (
    DEFAULT_HEADER_KEY,
    DEFAULT_WIRE_FORMAT,
    Encoder,
    FrameOptions,
    WireFormat,
)
from sidecar.config import KafkaSettings, RegistrySettings, Settings
from sidecar.dictionaries.model import Dictionary
from sidecar.dictionaries.registry import DEFAULT_TOPIC, Registry, default_actor
from sidecar.dictionaries.registry_state import RegistryState
from sidecar.errors import ZdictError
from sidecar.logs import get_logger

log = get_logger(__name__)

#: Seconds between two reads of the registry: an activation is in use within this (and one read).
DEFAULT_FOLLOW_INTERVAL: Final = 1.0
#: Seconds the constructor waits at most for the first read (the index, the registry after it)
#: and the prepared namespaces' dictionaries, so that their first records already use them; the
#: wait ends as soon as they are there (or the read failed). The registry reader's own timeout.
DEFAULT_READY_TIMEOUT: Final = 10.0
#: Seconds one read may take. A read cut short goes on where it stopped at the next one.
DEFAULT_READ_TIMEOUT: Final = 5.0
#: While reads keep failing, one `registry_read_failed` line per this many seconds.
FAILURE_LOG_INTERVAL: Final = 60.0


class RegistryReader(Protocol):
    """What `FollowingEncoder` needs of a `Registry`: its state, reads, and the topic check."""

    topic: str
    state: RegistryState

    def ensure_topic(self) -> None: ...

    def catch_up(self, timeout: float | None = None) -> None: ...

    def close(self) -> None: ...


def registry_client(
    properties: Mapping[str, str],
    *,
    topic: str = DEFAULT_TOPIC,
    timeout: float = 10.0,
    role: str = "producer",
) -> Registry:
    """A `Registry` over librdkafka `properties` (`_` read as `.`), not read yet.

    Unlike `Registry.connect`, nothing is contacted here: an application must start whether or
    not the registry can be read. It never creates the registry topic (only trainers publish).
    """
    settings = Settings(
        kafka=KafkaSettings.model_validate(dict(properties)),
        registry=RegistrySettings(topic=topic, timeout=timeout, create=False),
    )
    return Registry(settings, actor=default_actor(role))


class FollowingEncoder:
    """Per namespace, an `Encoder` of its active dictionary in the registry (see the module).

    Thread-safe: any number of producing threads may call `encoder()` while the follow thread
    swaps encoders. `close()` stops following and closes the registry's clients.
    """

    def __init__(
        self,
        registry: RegistryReader,
        *,
        namespaces: Iterable[str] = (),
        follow_interval: float = DEFAULT_FOLLOW_INTERVAL,
        ready_timeout: float = DEFAULT_READY_TIMEOUT,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        level: int | None = None,
        min_size: int | None = None,
        header_key: str = DEFAULT_HEADER_KEY,
        wire: WireFormat = DEFAULT_WIRE_FORMAT,
        frame: FrameOptions | None = None,
        on_read: Callable[[bool], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Start following `registry` (this object closes it).

        Args:
            namespaces: prepared before this returns (when the registry answers within
                `ready_timeout` seconds: their dictionaries read); others on first use.
            follow_interval: seconds between two reads of the registry.
            ready_timeout: seconds to wait at most for the first read and the prepared
                namespaces' dictionaries (0: do not wait); that read may take this long.
            read_timeout: seconds one read may take.
            level, min_size, header_key, wire, frame: as `Encoder` takes them (level and
                min_size default to the dictionary's own; frame to `FrameOptions()`).
            on_read: told whether each read succeeded (the producer's metrics).
            clock: monotonic seconds (the failure log's pace).
        """
        if follow_interval <= 0 or read_timeout <= 0 or ready_timeout < 0:
            raise ValueError("follow_interval and read_timeout must be > 0 s, ready_timeout >= 0 s")
        self.registry = registry
        self.follow_interval = follow_interval
        self.read_timeout = read_timeout
        self._first_timeout = max(read_timeout, ready_timeout)
        self._options = {"level": level, "min_size": min_size}
        self.header_key = header_key
        self.wire: WireFormat = wire
        self.frame = frame if frame is not None else FrameOptions()
        self._on_read = on_read
        self._clock = clock
        self._plain = self._build(None)
        self._encoders: dict[str, Encoder] = {}
        #: Namespace -> its encoder now, for the namespaces used so far: the live mapping (never
        #: replaced, updated on a switch), for callers on a per-record path; `encoder()` makes
        #: a namespace's first one.
        self.encoders: Mapping[str, Encoder] = self._encoders
        self._lock = threading.Lock()
        self._wanted: set[str] = set(namespaces)
        self._topic_checked = False
        self._last_error: str | None = None
        self._read_once = False
        self._ready_timeout = ready_timeout
        self._failures_logged_at: float | None = None
        self._failures_held_back = 0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._first_read = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="zdict-following", daemon=True)
        self._thread.start()
        if ready_timeout:
            self._first_read.wait(ready_timeout)
        for namespace in sorted(self._wanted):
            self.encoder(namespace)

    @classmethod
    def connect(
        cls,
        bootstrap: str | None = None,
        *,
        topic: str = DEFAULT_TOPIC,
        namespaces: Iterable[str] = (),
        follow_interval: float = DEFAULT_FOLLOW_INTERVAL,
        ready_timeout: float = DEFAULT_READY_TIMEOUT,
        level: int | None = None,
        min_size: int | None = None,
        header_key: str = DEFAULT_HEADER_KEY,
        wire: WireFormat = DEFAULT_WIRE_FORMAT,
        on_read: Callable[[bool], None] | None = None,
        **properties: str,
    ) -> FollowingEncoder:
        """The registry-following equivalent of `Encoder.from_store`: a `FollowingEncoder` over
        the registry topic `topic` of the cluster at `bootstrap`.

        `properties` are librdkafka properties with `_` for `.` (e.g.
        `security_protocol="SASL_SSL"`). Returns once the registry has been read, or after
        `ready_timeout` seconds without raising: an unreachable registry only means records
        are compressed without a dictionary until it answers.
        """
        props = dict(properties)
        if bootstrap is not None:
            props["bootstrap.servers"] = bootstrap
        return cls(
            registry_client(props, topic=topic),
            namespaces=namespaces,
            follow_interval=follow_interval,
            ready_timeout=ready_timeout,
            level=level,
            min_size=min_size,
            header_key=header_key,
            wire=wire,
            on_read=on_read,
        )

    # -- the caller's side ---------------------------------------------------------------------

    def encoder(self, namespace: str) -> Encoder:
        """The encoder of `namespace`'s active dictionary now (the no-dictionary one while
        none is known). Never waits for a registry read; a namespace's first call may wait
        for its dictionary's one record (read by offset, once)."""
        encoder = self._encoders.get(namespace)
        if encoder is None:
            encoder = self._first_use(namespace)
        return encoder

    def dictionary(self, namespace: str) -> Dictionary | None:
        """The dictionary `namespace` is encoded with now (None: none)."""
        return self.encoder(namespace).dictionary

    def _first_use(self, namespace: str) -> Encoder:
        with self._lock:
            encoder = self._encoders.get(namespace)
            if encoder is not None:
                return encoder
            self._wanted.add(namespace)
        problem: str | None = None
        try:
            # Its one record read by offset if not cached yet (once per namespace), outside
            # the lock: other namespaces' first records do not wait for it.
            dictionary = self.registry.state.active(namespace)
        except ZdictError as exc:
            dictionary, problem = None, str(exc)
        built = self._plain if dictionary is None else self._build(dictionary)
        with self._lock:
            encoder = self._encoders.setdefault(namespace, built)
        if encoder is not built:
            return encoder  # another thread, or the follow thread, was first
        if dictionary is None:
            self._wake.set()  # the follow thread looks at the new namespace at once
            log.warning(
                "no_dictionary",
                namespace=namespace,
                registry_topic=self.registry.topic,
                reason=problem or self._why_none(),
                detail="compressing without a dictionary (zd=0) where that still shrinks, "
                "until the registry names one",
            )
        else:
            self._announce(namespace, None, dictionary)
        return encoder

    def _why_none(self) -> str:
        if self._last_error is not None:
            return f"the registry cannot be read: {self._last_error}"
        if not self._first_read.is_set():
            return f"the registry was not read within ready_timeout ({self._ready_timeout:g} s)"
        return "no dictionary is active for this namespace in the registry yet"

    def _build(self, dictionary: Dictionary | None) -> Encoder:
        return Encoder(
            dictionary,
            level=self._options["level"],
            min_size=self._options["min_size"],
            header_key=self.header_key,
            frame=self.frame,
            wire=self.wire,
        )

    # -- the follow thread ---------------------------------------------------------------------

    def _follow(self) -> None:
        while not self._stop.is_set():
            try:
                self._switch()  # a namespace just asked for, from what is known already
                self._read()
                self._switch()
            except Exception:  # a bug must not stop following: logged with its traceback
                log.exception("registry_follow_failed", registry_topic=self.registry.topic)
            self._first_read.set()
            self._wake.wait(self.follow_interval)
            self._wake.clear()

    def _read(self) -> None:
        try:
            if not self._topic_checked:
                # Once, for the start: it fails at once when the topic does not exist (nothing
                # trained yet), where a read waits for the topic until its timeout. Later reads
                # wait in this thread, and find the topic as soon as a trainer creates it.
                self._topic_checked = True
                self.registry.ensure_topic()
            timeout = self.read_timeout if self._read_once else self._first_timeout
            self.registry.catch_up(timeout)
        except ZdictError as exc:
            self._read_failed(str(exc))
            return
        if self._last_error is not None:
            log.info(
                "registry_read_recovered",
                registry_topic=self.registry.topic,
                failed_reads=self._failures_held_back + 1,
            )
        self._last_error = None
        self._read_once = True
        self._failures_logged_at = None
        self._failures_held_back = 0
        if self._on_read is not None:
            self._on_read(True)

    def _read_failed(self, error: str) -> None:
        self._last_error = error
        if self._on_read is not None:
            self._on_read(False)
        now = self._clock()
        if (
            self._failures_logged_at is not None
            and now - self._failures_logged_at < FAILURE_LOG_INTERVAL
        ):
            self._failures_held_back += 1
            return
        log.warning(
            "registry_read_failed",
            registry_topic=self.registry.topic,
            error=error,
            repeated=self._failures_held_back,
            detail="records go on with the dictionaries known so far (none: compressed without)",
        )
        self._failures_logged_at = now
        self._failures_held_back = 0

    def _switch(self) -> None:
        """Swap in the encoder of every wanted namespace whose active dictionary changed."""
        with self._lock:
            wanted = sorted(self._wanted)
        state = self.registry.state
        for namespace in wanted:
            try:
                target = state.active(namespace)
            except ZdictError as exc:  # its record not read this time: the next read tries again
                log.warning(
                    "dictionary_not_read",
                    namespace=namespace,
                    registry_topic=self.registry.topic,
                    error=str(exc),
                )
                continue
            current = self._encoders.get(namespace)
            if target is None or (current is not None and current.dict_id == target.id):
                continue  # nothing (new) to use; an activation is never withdrawn
            encoder = self._build(target)  # outside the lock: callers never wait for it
            with self._lock:
                previous = self._encoders.get(namespace)
                self._encoders[namespace] = encoder
            self._announce(namespace, previous.dictionary if previous else None, target)

    def _announce(self, namespace: str, previous: Dictionary | None, new: Dictionary) -> None:
        log.info(
            "dictionary_switched",
            namespace=namespace,
            dict_id=new.id,
            version=new.meta.version,
            previous_dict_id=previous.id if previous else 0,
            heldout_ratio=new.meta.heldout_ratio,
            registry_topic=self.registry.topic,
        )

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop following and close the registry's clients; idempotent. Encoders already handed
        out keep working."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(self.read_timeout + 10.0)
        self.registry.close()

    def __enter__(self) -> FollowingEncoder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
