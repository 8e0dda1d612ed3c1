"""The broker address filter: the responses that name brokers (Metadata, FindCoordinator,
DescribeCluster, and Produce from v10 on and Fetch from v16 on, whose `NodeEndpoints` name new
leaders) are parsed and written again with each broker's address replaced by the proxy's
listener for it (`node_addresses`; started on first use by `Locate`). A Produce response naming no
broker (no leader moved) is passed as it came (`produce_response`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from sidecar.proxy.addresses import Address
from sidecar.proxy.filter import ANY_VERSION, Context, Keys, Response
from sidecar.proxy.node_addresses import REWRITTEN_FROM, rewrite, upstream_nodes
from sidecar.proxy.produce_response import names_no_broker

#: Upstream nodes a response names -> their local addresses (None: no listener), for a client
#: that reached the proxy at the given host.
Locate = Callable[[Mapping[int, Address], str], Awaitable[dict[int, Address | None]]]


class BrokerAddressFilter:
    """Rewrites the broker addresses of the responses that name brokers (see module)."""

    def __init__(self, locate: Locate) -> None:
        """`locate`: the local listener of each upstream node a response names."""
        self.locate = locate
        self.response_keys: Keys = {
            api_key: (first, ANY_VERSION) for api_key, first in REWRITTEN_FROM.items()
        }

    def on_response(self, response: Response, context: Context) -> Awaitable[None] | None:
        if names_no_broker(response.api_key, response.version, response.frame):
            return None
        return self._rewrite(response, response.body(), context.host)

    async def _rewrite(self, response: Response, body: Any, host: str) -> None:
        local = await self.locate(upstream_nodes(response.api_key, body), host)
        response.replace(rewrite(response.api_key, body, local))

    def check_size(self, api_key: int, size: int) -> bool:
        return False
