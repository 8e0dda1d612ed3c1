"""Dictionary lookups of the proxy's Fetch decoder: ids the registry does not have cost a
registry read at most once per interval, whatever the clients fetch.

`RegistryResolver` reads the registry to its end at every id it does not know (and waits up to
`registry.timeout` when it does not answer). Records naming made-up ids, each a different one,
would each cost such a read, on the one thread that decodes for every client. (An id the
registry knows costs at most one record read by its offset, the first time: not throttled.)
Here an id the registry's state does not hold is looked up (the registry read) only when no
lookup was made within `interval` seconds, across all ids and clients; in between it is:

* **unknown** (`UnknownDictionary`: the record is sent as stored) if it was first asked for
  before the last read began: that read would have found it, as a record is produced only
  after the registry acknowledged its dictionary;
* **not looked up yet** (`RegistryUnavailable`: the batch is held back and fetched again) if it
  is newer than the last read, so that a dictionary published since is found by the next one
  (or by the registry's own follower) rather than taken for unknown.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

from sidecar.dictionaries.model import Dictionary
from sidecar.dictionaries.registry import RegistryResolver
from sidecar.errors import RegistryUnavailable, UnknownDictionary

#: Ids waiting for a lookup remembered at most; past that (a stream of made-up ids) the oldest
#: are forgotten, which only delays their verdict.
MAX_WAITING_IDS: Final = 4096


class ThrottledLookups:
    """A resolver over `inner` that reads the registry for unknown ids at most once per
    `interval` seconds (see module). Thread-safe."""

    def __init__(
        self,
        inner: RegistryResolver,
        interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        #: When the last lookup (a registry read) began; -inf: none yet.
        self._read_at = float("-inf")
        #: Ids not found -> when they were first asked for.
        self._waiting: dict[int, float] = {}
        #: Registry reads made for unknown ids.
        self.reads = 0

    def get(self, dict_id: int) -> Dictionary:
        dictionary = self.inner.registry.state.dictionaries.get(dict_id)
        if dictionary is not None:
            return dictionary
        with self._lock:
            now = self._clock()
            first = self._waiting.get(dict_id)
            if first is None:
                if len(self._waiting) >= MAX_WAITING_IDS:
                    del self._waiting[next(iter(self._waiting))]
                first = self._waiting[dict_id] = now
            if first < self._read_at:
                raise UnknownDictionary(
                    f"unknown dictionary id {dict_id}: not in registry topic "
                    f"{self.inner.registry.topic} when it was last read; the record was not "
                    "produced by zdict-sidecar with this registry, or its entry was deleted"
                )
            if now - self._read_at < self.interval:
                raise RegistryUnavailable(
                    f"dictionary id {dict_id} is not in registry topic {self.inner.registry.topic} "
                    f"as last read; it is looked up within {self.interval:g} s "
                    "(ZDICT_REGISTRY__FOLLOW_INTERVAL)"
                )
            self._read_at = now
            self.reads += 1
            dictionary = self.inner.get(dict_id)  # reads the registry to its end
            del self._waiting[dict_id]
            return dictionary

    def describe(self) -> str:
        return self.inner.describe()

    def close(self) -> None:
        self.inner.close()
