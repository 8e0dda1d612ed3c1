"""A log line let through once an interval, with how many were held back: for events a client
can repeat within milliseconds (refused connections, clients' SASL requests), so that the log
stays readable and bounded whatever a client does."""

from __future__ import annotations

import time
from collections.abc import Callable


class Throttle:
    """Lets one event through every `interval` seconds; counts the others held back."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self._last: float | None = None
        self._held = 0

    def admit(self) -> int | None:
        """None: hold this one back; else how many were held back since the last let through."""
        now = self.clock()
        if self._last is not None and now - self._last < self.interval:
            self._held += 1
            return None
        held, self._held, self._last = self._held, 0, now
        return held
