"""The forwarding proxy's memory bound: bytes of frames held across every connection."""

from __future__ import annotations

import asyncio


class Budget:
    """Bytes held, at most `limit`: a reader takes what it is about to read (a chunk at a
    time, so a client sending only a size prefix holds one chunk, not its announced size) and
    gives it back once forwarded, or when its connection ends."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._freed = asyncio.Condition()

    async def take(self, size: int) -> None:
        """Wait until `size` more bytes fit, then hold them."""
        async with self._freed:
            await self._freed.wait_for(lambda: self.used + size <= self.limit)
            self.used += size

    async def give(self, size: int) -> None:
        """Return `size` bytes taken before."""
        if size:
            async with self._freed:
                self.used -= size
                self._freed.notify_all()

    def force(self, size: int) -> None:
        """Hold `size` bytes now, past the limit if need be: a caller that sized what it
        builds to the free bytes (`limit - used`), which others may have taken meanwhile."""
        self.used += size
