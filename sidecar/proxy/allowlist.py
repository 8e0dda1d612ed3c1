"""Which topics clients may produce to through the proxy.

The allow-list is `proxy.allowed_topics` (names, or patterns with `*` and `?` as in a shell),
by default the topics of `proxy.topics`. Never writable whatever it says: internal topics (a
name starting with `__`, such as `__consumer_offsets` and `__transaction_state`) and the
dictionary registry's topic, which every proxy and decoder trusts.
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import Final

#: Topic names whose verdict is remembered; past this the memory starts again (a client naming
#: many topics costs a pattern match per name, never more memory).
CACHED_TOPICS: Final = 4096
INTERNAL_PREFIX: Final = "__"


class TopicAllowList:
    """`allows(topic)`: whether a client may produce to `topic` (see module)."""

    def __init__(self, patterns: Iterable[str], never: Iterable[str] = ()) -> None:
        self.patterns = tuple(patterns)
        self.never = frozenset(never)
        self._verdicts: dict[str, bool] = {}

    def allows(self, topic: str) -> bool:
        verdict = self._verdicts.get(topic)
        if verdict is None:
            verdict = (
                not topic.startswith(INTERNAL_PREFIX)
                and topic not in self.never
                and any(fnmatchcase(topic, pattern) for pattern in self.patterns)
            )
            if len(self._verdicts) >= CACHED_TOPICS:
                self._verdicts.clear()
            self._verdicts[topic] = verdict
        return verdict
