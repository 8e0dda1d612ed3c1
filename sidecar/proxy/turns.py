"""Turns on one shared resource (the Fetch decoder's thread), fair per client address rather
than per request: a client that opens many connections, or pipelines many requests, waits its
turn behind every other client that waits, one turn each, round robin, in the order the clients
first asked (the client that just had a turn last). Within one client address, turns go in the
order asked.

Waiters are futures of the event loop: a waiter cancelled (its connection ended) leaves the
queue, and a turn granted to a waiter cancelled meanwhile passes on to the next.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class FairTurns:
    """One turn at a time, round robin over client addresses (see module)."""

    def __init__(self) -> None:
        self._busy = False
        #: Client address -> its waiters, in the order they asked.
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}
        #: Client addresses with waiters, the next to get a turn first.
        self._order: deque[str] = deque()

    @asynccontextmanager
    async def turn(self, client: str) -> AsyncIterator[None]:
        """Hold the turn for `client` (its address) for the body of the `async with`."""
        if self._busy or self._order:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            queue = self._waiting.get(client)
            if queue is None:
                queue = self._waiting[client] = deque()
                self._order.append(client)
            queue.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._next(None)  # granted, then cancelled: the turn passes on
                raise
        else:
            self._busy = True
        try:
            yield
        finally:
            self._next(client)

    def _next(self, released: str | None) -> None:
        """Give the turn to the next client's first waiter still waiting; else it is free.
        The client that `released` it goes after the others waiting: it just had its turn."""
        if len(self._order) > 1 and self._order[0] == released:
            self._order.rotate(-1)
        while self._order:
            client = self._order.popleft()
            queue = self._waiting[client]
            waiter = queue.popleft()
            if queue:
                self._order.append(client)
            else:
                del self._waiting[client]
            if not waiter.done():
                waiter.set_result(None)
                return
        self._busy = False
