"""The proxy's Produce requests, read from its own /metrics (`bench proxy`).

The proxy counts every request frame a client sends it in `zdict_proxy_frames_total`
(`sidecar.proxy.metrics.ForwardMetrics`), by `api` and `direction`; the bench reads the Produce
requests' count before and after a timed part, so that records ÷ requests is the records a
Produce request carried. The proxy exports no count of the batches in those requests.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Final

from prometheus_client.parser import text_string_to_metric_families

from sidecar.errors import InputError
from sidecar.proxy.metrics import REQUEST
from sidecar.proxy.versions import PRODUCE as PRODUCE_KEY
from sidecar.proxy.versions import api_name

#: The counter's family, as `ForwardMetrics` names it, and its sample.
FRAMES: Final = "zdict_proxy_frames"
FRAMES_TOTAL: Final = f"{FRAMES}_total"
#: The `api` label of Produce requests.
PRODUCE: Final = api_name(PRODUCE_KEY)
#: Seconds one read of /metrics may take.
HTTP_TIMEOUT_S: Final = 5.0


def metrics_url(line: str) -> str:
    """The /metrics URL in the proxy's `metrics_listening` JSON log line.

    Raises:
        InputError: the line is not a JSON object with a `url`.
    """
    try:
        event = json.loads(line)
    except ValueError:
        event = None
    url = event.get("url") if isinstance(event, dict) else None
    if not isinstance(url, str) or not url.startswith("http://"):
        raise InputError(
            f"bench proxy: the proxy's metrics_listening log line names no http:// URL: {line!r}"
        )
    return url


def produce_requests(text: str, source: str) -> int:
    """Produce requests the proxy forwarded so far, from its Prometheus exposition `text`
    (read from `source`, named in errors); 0 before the first.

    Raises:
        InputError: `text` is not Prometheus text, or holds no `zdict_proxy_frames_total`.
    """
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as exc:
        raise InputError(
            f"bench proxy: {source} does not serve Prometheus metrics: {exc}"
        ) from None
    # A counter's family is named without `_total`; its samples are created on the first frame.
    frames = [f for f in families if f.name in (FRAMES, FRAMES_TOTAL)]
    if not frames:
        raise InputError(
            f"bench proxy: {source} exposes no {FRAMES_TOTAL}: is it a zdict-sidecar proxy's "
            "/metrics?"
        )
    return sum(
        int(sample.value)
        for family in frames
        for sample in family.samples
        if sample.name == FRAMES_TOTAL
        and sample.labels.get("api") == PRODUCE
        and sample.labels.get("direction") == REQUEST
    )


def read_produce_requests(url: str) -> int:
    """Produce requests the proxy serving /metrics at `url` forwarded so far.

    Raises:
        InputError: `url` cannot be read, or is not a proxy's /metrics.
    """
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
            text = response.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as exc:
        raise InputError(
            f"bench proxy: cannot read the proxy's metrics at {url}: "
            f"{getattr(exc, 'reason', exc)} (did the proxy stop? see its log)"
        ) from None
    return produce_requests(text, url)
