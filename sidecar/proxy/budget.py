"""The proxy's memory bound: bytes of frames held across every connection."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Budget:
    """Bytes held, at most `limit`: a connection takes what it is about to read (a chunk at a
    time, so a client sending only a size prefix holds one chunk, not its announced size),
    counts every byte it has read and not yet forwarded, and gives them back once forwarded, or
    when it ends. A connection that finds the budget used up stops reading and `wait`s."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        #: Callbacks of the connections waiting for bytes, in the order they began to wait.
        self._waiting: dict[Callable[[], None], None] = {}

    def take(self, size: int) -> bool:
        """Hold `size` more bytes if they fit; whether they did."""
        if self.used + size > self.limit:
            return False
        self.used += size
        return True

    def force(self, size: int) -> None:
        """Hold `size` bytes now, past the limit if need be: bytes already read, or a caller
        that sized what it builds to the free bytes (`limit - used`), which others may have
        taken meanwhile."""
        self.used += size

    def give(self, size: int) -> None:
        """Return `size` bytes taken before; the connections waiting are called back (soon,
        not from within this call) to try again."""
        if not size:
            return
        self.used -= size
        if self._waiting and self.used < self.limit:
            waiting, self._waiting = self._waiting, {}
            loop = asyncio.get_running_loop()
            for callback in waiting:
                loop.call_soon(callback)

    def wait(self, callback: Callable[[], None]) -> None:
        """Call `callback` once bytes are given back."""
        self._waiting[callback] = None

    def cancel(self, callback: Callable[[], None]) -> None:
        """`callback` no longer waits."""
        self._waiting.pop(callback, None)
