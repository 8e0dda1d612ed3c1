"""Who holds the proxy's connection slots, and which connection gives way to a new one.

A slot is held from the moment a client connects (its upstream connection still opening) until
its connection ends. Idle connections must not lock everyone out (64 idle sockets held every
slot for the 10 minutes of the idle timeout), so a new connection is admitted past a bound by
closing one that loses nothing if closed (nothing under way: `Idle.idle_since`), and refused
only when none is:

- Past `per_client` connections of its own client address (when set), that address's longest
  idle connection gives way.
- Past `max_connections` in all, an idle connection of the addresses holding the most
  connections gives way: one that never sent a byte first (clients send their first request
  as they connect: such a socket is held for nothing), then the longest idle. A client
  holding many slots loses its own first.

A connection gives way only once idle for `min_idle` seconds: clients send their first request
as they connect, so a new connection does not push out one just made, and a client that
reconnects whatever is closed (idle sockets held on purpose) cannot make the slots churn faster
than that.

Pure bookkeeping: no socket, no clock; the listeners close the connection chosen.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Final, Generic, Protocol, TypeVar

#: Seconds a connection must have been idle before it gives way (see module).
MIN_IDLE: Final = 1.0


class Idle(Protocol):
    """A connection that can tell whether closing it loses nothing
    (`sidecar.proxy.connection.Connection`)."""

    def idle_since(self) -> float | None:
        """The clock's time it became idle (None: something is under way, or it ended)."""
        ...

    def sent_a_byte(self) -> bool:
        """Whether its client ever sent anything."""
        ...


K = TypeVar("K", bound=Hashable)
C = TypeVar("C", bound=Idle)


class Slots(Generic[K, C]):
    """The slots held, by key (one per client connection), and their client addresses."""

    def __init__(
        self, max_connections: int, per_client: int = 0, min_idle: float = MIN_IDLE
    ) -> None:
        """`per_client`: connections one client address may hold (0: no bound but
        `max_connections`); `min_idle`: seconds idle before a connection gives way."""
        self.max_connections = max_connections
        self.per_client = per_client
        self.min_idle = min_idle
        self._hosts: dict[K, str] = {}
        self._counts: dict[str, int] = {}
        self._served: dict[K, C] = {}

    def __len__(self) -> int:
        return len(self._hosts)

    def held_by(self, host: str) -> int:
        """Slots client address `host` holds."""
        return self._counts.get(host, 0)

    def connections(self) -> Iterator[C]:
        """The connections being served (their upstream connection open)."""
        return iter(list(self._served.values()))

    def room(self, host: str, now: float) -> tuple[bool, K | None]:
        """Whether a new connection from `host` may have a slot at time `now` (the clock of
        `Idle.idle_since`), and the key of the connection to close first to make room for it
        (None: there is room)."""
        if self.per_client and self.held_by(host) >= self.per_client:
            victim = self._longest_idle(host, now)
            return victim is not None, victim
        if len(self._hosts) >= self.max_connections:
            victim = self._longest_idle(None, now)
            return victim is not None, victim
        return True, None

    def hold(self, key: K, host: str) -> None:
        """A slot for `key`, a connection from `host`."""
        self._hosts[key] = host
        self._counts[host] = self.held_by(host) + 1

    def serve(self, key: K, connection: C) -> None:
        """`key`'s connection is served: it may give way to a new one once idle."""
        if key in self._hosts:
            self._served[key] = connection

    def release(self, key: K) -> C | None:
        """Free `key`'s slot (releasing it again does nothing); the connection it served."""
        host = self._hosts.pop(key, None)
        connection = self._served.pop(key, None)
        if host is not None:
            left = self._counts[host] - 1
            if left:
                self._counts[host] = left
            else:
                del self._counts[host]
        return connection

    def _longest_idle(self, host: str | None, now: float) -> K | None:
        """The idle connection to close (see module): of `host`, or of any address (None)."""
        best: tuple[int, bool, float] | None = None

        chosen: K | None = None
        for key, connection in self._served.items():
            owner = self._hosts[key]
            if host is not None and owner != host:
                continue
            since = connection.idle_since()
            if since is None or now - since < self.min_idle:
                continue

            rank = (-self._counts[owner], connection.sent_a_byte(), since)
            if best is None or rank < best:
                best, chosen = rank, key
        return chosen
