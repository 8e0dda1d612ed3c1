"""Where brokers are: a host and port, and the local port of each upstream broker.

The port map: upstream node id N is served at local port `proxy.broker_port_base` + N. A fixed
map, not ports handed out as brokers are first seen: a client keeps the addresses of its last
metadata across a proxy restart (and a pod declares its ports), so node N must be at the same
port in the next process. Node ids of a cluster are small (KRaft's default ids are 1, 2, 3...);
one whose port would be above 65535 is left out of the responses, as a broker without a
listener is (clients retry, and the proxy logs it). Responses naming brokers are rewritten to
these ports by `node_addresses`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

_HIGHEST_PORT: Final = 65535


@dataclass(frozen=True, slots=True)
class Address:
    """A host and port (upstream, or where clients reach the proxy)."""

    host: str
    port: int


@dataclass(frozen=True, slots=True)
class PortMap:
    """Upstream node id -> the local port that serves it (see module)."""

    base: int

    def port(self, node_id: int) -> int | None:
        """The local port of `node_id`; None when it falls outside 1-65535."""
        port = self.base + node_id
        return port if 0 < port <= _HIGHEST_PORT else None
