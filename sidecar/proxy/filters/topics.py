"""The topics filter: what clients may do and see of the cluster's topics.

Requests: an admin API, a request naming a protected topic (internal topics and the registry
topic) and a Metadata naming too many topics are answered by the proxy, nothing forwarded
(`access.RequestAccess`). Responses: the listings (Metadata, DescribeTopicPartitions,
DescribeLogDirs) leave out the topics hidden from clients (`topics.TopicView`), and the answers
that can name a protected topic leave it out (`hiding`), unless `proxy.show_internal_topics`.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Iterator, Mapping

from kio.schema.index import api_key_map

from sidecar.proxy.access import RequestAccess
from sidecar.proxy.filter import ANY_VERSION, Answer, Context, Keys, Request, Response
from sidecar.proxy.hiding import ResponseHiding, hides
from sidecar.proxy.topics import LISTING, TopicView
from sidecar.proxy.versions import kio_versions


class TopicFilter:
    """Refuses requests the proxy does not forward, hides topics in responses (see module)."""

    request_keys: Keys | None = None

    def __init__(self, access: RequestAccess, view: TopicView | None) -> None:
        """`view`: the topics clients see (None: responses as they came)."""
        self.access = access
        self.view = view
        self._hiding: ResponseHiding | None = None
        keys: dict[int, tuple[int, int]] = {}
        if view is not None:
            keys.update((api_key, (0, ANY_VERSION)) for api_key in LISTING)
            if not view.show_internal:
                self._hiding = ResponseHiding(view)
        self.response_keys: Keys = keys if self._hiding is None else _Hidden(keys)

    def on_request(self, request: Request, context: Context) -> Answer | None:
        refusal = self.access.refusal(request.frame, request.header)
        return None if refusal is None else Answer(refusal)

    def on_response(self, response: Response, context: Context) -> Awaitable[None] | None:
        api_key = response.api_key
        if api_key in LISTING:
            assert self.view is not None  # listings are keyed with a view only
            response.replace(self.view.filter(api_key, response.body()))
        elif self._hiding is not None:
            hidden = self._hiding.hide(api_key, response.body())
            if hidden is not None:
                response.replace(hidden)
        return None

    def check_size(self, api_key: int, size: int) -> bool:
        return False


class _Hidden(Mapping[int, tuple[int, int]]):
    """`listing` and the versions of every API whose answers can name a topic (`hidden_keys`),
    each API's worked out when first asked for (walking every schema takes seconds)."""

    def __init__(self, listing: Mapping[int, tuple[int, int]]) -> None:
        self._listing = listing

    def __getitem__(self, api_key: int) -> tuple[int, int]:
        versions = self._listing.get(api_key) or hidden_versions(api_key)
        if versions is None:
            raise KeyError(api_key)
        return versions

    def __iter__(self) -> Iterator[int]:
        return iter(sorted({*self._listing, *hidden_keys()}))

    def __len__(self) -> int:
        return len({*self._listing, *hidden_keys()})


@functools.cache
def hidden_versions(api_key: int) -> tuple[int, int] | None:
    """The versions of `api_key` whose answers can name a topic and are walked (`hiding.hides`):
    a contiguous range for each API (tests/unit/test_forward_hiding.py); None: none."""
    known = kio_versions(api_key)
    if known is None:
        return None
    versions = [v for v in range(known[0], known[1] + 1) if hides(api_key, v)]
    return (versions[0], versions[-1]) if versions else None


def hidden_keys() -> dict[int, tuple[int, int]]:
    """`hidden_versions` of every API kio knows that has some."""
    keys = {}
    for api_key in api_key_map:
        versions = hidden_versions(api_key)
        if versions is not None:
            keys[api_key] = versions
    return keys
