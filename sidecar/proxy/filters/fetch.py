"""The Fetch filter: every Fetch answer is read whole (at most `proxy.max_fetch_bytes`) and its
records decoded (`fetch.FetchDecoding`, which also rewrites the broker addresses of its
`NodeEndpoints`), its output taken from the connection's budget as it grows.
"""

from __future__ import annotations

from collections.abc import Awaitable

from sidecar.errors import ProtocolError
from sidecar.proxy.fetch import FetchDecoding
from sidecar.proxy.filter import ANY_VERSION, Context, Keys, Response
from sidecar.proxy.filters.broker_addresses import Locate
from sidecar.proxy.versions import FETCH


class FetchFilter:
    """Decodes the records of Fetch answers (see module)."""

    def __init__(self, decoding: FetchDecoding, locate: Locate) -> None:
        self.decoding = decoding
        self.locate = locate
        self.response_keys: Keys = {FETCH: (0, ANY_VERSION)}

    def on_response(self, response: Response, context: Context) -> Awaitable[None]:
        return self._decode(response, context)

    async def _decode(self, response: Response, context: Context) -> None:
        host = context.host
        response.output = await self.decoding.rewrite(
            response.version,
            response.frame,
            client_id=context.client_id,
            free=context.room,
            hold=context.hold,
            locate=lambda nodes: self.locate(nodes, host),
            client=context.client_host,
        )

    def check_size(self, api_key: int, size: int) -> bool:
        if size > self.decoding.max_bytes:
            raise ProtocolError(
                f"upstream's Fetch response of {size} bytes is above "
                f"ZDICT_PROXY__MAX_FETCH_BYTES ({self.decoding.max_bytes}): the client's "
                "fetch.max.bytes must stay below it"
            )
        return True
