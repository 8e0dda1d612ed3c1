"""The proxy's filters, one module each, and their order (`proxy_filters`): made once at start
from the settings and what the service built, every dependency given, none global.

Requests, in order: client SASL (answered locally), ApiVersions (asked in v0 above the proxy's
versions), the served versions (the rest refused), topics (admin APIs and protected topics
answered locally), Produce (rewritten). Responses, in order: Fetch (decoded), topics (hidden),
ApiVersions (intersected), broker addresses (rewritten). Adding an API version or a policy is a
change in the one filter keyed to it.
"""

from __future__ import annotations

from sidecar.config import ProxySettings
from sidecar.proxy.access import RequestAccess
from sidecar.proxy.chain import Filters
from sidecar.proxy.fetch import FetchDecoding
from sidecar.proxy.filter import RequestFilter, ResponseFilter
from sidecar.proxy.filters.api_versions import ApiVersionsFilter, ServedVersions
from sidecar.proxy.filters.broker_addresses import BrokerAddressFilter, Locate
from sidecar.proxy.filters.client_sasl import ClientSaslFilter
from sidecar.proxy.filters.fetch import FetchFilter
from sidecar.proxy.filters.produce import ProduceFilter, RewritesProduce
from sidecar.proxy.filters.topics import TopicFilter
from sidecar.proxy.metrics import ForwardMetrics
from sidecar.proxy.topics import TopicView


def proxy_filters(
    settings: ProxySettings,
    metrics: ForwardMetrics,
    locate: Locate,
    *,
    produce: RewritesProduce | None = None,
    fetch: FetchDecoding | None = None,
    topics: TopicView | None = None,
) -> Filters:
    """The proxy's filters (see module). `locate`: the local listener of each upstream node;
    `produce` rewrites Produce requests, `fetch` decodes Fetch answers and `topics` filters
    listings (None: as they came)."""
    access = RequestAccess(
        topics or TopicView(None),
        metrics,
        admin=settings.admin_apis,
        max_metadata_topics=settings.max_metadata_topics,
    )
    produce_filter = ProduceFilter(produce, settings.produce_slice_ms / 1000)
    served = ServedVersions(caps=produce_filter.request_keys)
    api_versions = ApiVersionsFilter(served.served, access.refused_apis)
    topic_filter = TopicFilter(access, topics)
    requests: list[RequestFilter] = [
        ClientSaslFilter(),
        api_versions,
        served,
        topic_filter,
        produce_filter,
    ]
    responses: list[ResponseFilter] = []
    if fetch is not None:
        responses.append(FetchFilter(fetch, locate))
    responses += [topic_filter, api_versions, BrokerAddressFilter(locate)]
    return Filters(requests, responses, metrics=metrics, max_frame_bytes=settings.max_request_bytes)
