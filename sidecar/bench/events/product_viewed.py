"""``product_viewed``: compact JSON product views from browsing sessions in 18 markets.

Sessions (`_Visit`) emit several events each; a view carries the product's price in the
session's currency, and sometimes its device, referrer, campaign and A/B bucket.
"""

from collections.abc import Callable, Iterator
from random import Random

from sidecar.bench.events.catalogue import CATALOGUE_SIZE, CATEGORIES_V2, CATEGORY, catalogue
from sidecar.bench.events.primitives import (
    Distribution,
    Rnd,
    clock,
    encode_json,
    ids,
    iso_ms,
    iso_s,
    words,
    zipf,
)
from sidecar.bench.events.web import EXTERNAL_REFERRER, SEARCH_TERM

__all__ = ["product_viewed_events"]

# The cents a shelf price ends in, chosen by product id: …99 most often.
_PRICE_ENDINGS = (99, 99, 99, 95, 90, 49, 0, 0)

# Markets: (country, locale, currency, USD→currency factor, whole-unit prices?), with weights.
_MARKETS: tuple[tuple[str, str, str, float, bool], ...] = (
    ("US", "en-US", "USD", 1.0, False),
    ("DE", "de-DE", "EUR", 0.92, False),
    ("GB", "en-GB", "GBP", 0.79, False),
    ("FR", "fr-FR", "EUR", 0.92, False),
    ("ES", "es-ES", "EUR", 0.92, False),
    ("IT", "it-IT", "EUR", 0.92, False),
    ("NL", "nl-NL", "EUR", 0.92, False),
    ("CA", "en-CA", "CAD", 1.36, False),
    ("JP", "ja-JP", "JPY", 150.0, True),
    ("PL", "pl-PL", "PLN", 3.98, False),
    ("BR", "pt-BR", "BRL", 4.97, False),
    ("SE", "sv-SE", "SEK", 10.4, True),
    ("AU", "en-AU", "AUD", 1.53, False),
    ("CH", "de-CH", "CHF", 0.88, False),
    ("AT", "de-AT", "EUR", 0.92, False),
    ("BE", "nl-BE", "EUR", 0.92, False),
    ("MX", "es-MX", "MXN", 17.1, True),
    ("IN", "en-IN", "INR", 83.0, True),
)
_MARKET = zipf([str(i) for i in range(len(_MARKETS))], shift=0.2)

# (short device code, v2 os names, v2 app versions), weighted.
_DEVICES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("ios", ("iOS 17.3.1", "iOS 17.2", "iOS 16.7.5"), ("5.12.1", "5.12.0", "5.11.4")),
    ("android", ("Android 14", "Android 13", "Android 12", "Android 11"), ("5.12.0", "5.11.2")),
    ("web", ("Windows 10", "macOS 14.3", "Windows 11", "Linux", "ChromeOS"), ("web-2403.1",)),
    ("mweb", ("iOS 17.3.1", "Android 14", "Android 13"), ("web-2403.1",)),
    ("ipad", ("iPadOS 17.3", "iPadOS 16.7"), ("5.12.1", "5.11.4")),
)
_DEVICE = Distribution([str(i) for i in range(len(_DEVICES))], [34.0, 27.0, 24.0, 11.0, 4.0])

_CAMPAIGNS: tuple[str, ...] = words(
    "spring_sale_24 nl_0307 retarget_fb brand_search pmax_shoes cart_abandon_2 ig_influencer_mia "
    "affiliate_idealo welcome_10 tiktok_q1 bf_earlybird"
)
_CAMPAIGN = zipf(_CAMPAIGNS, shift=1.0)

_EXPERIMENTS: tuple[str, ...] = words(
    "pdp42:B pdp42:A anchor:ctl reco7:on reco7:off shipbar:B chk1p:A rank:t2 pdp43:C"
)
_EXPERIMENT = zipf(_EXPERIMENTS, shift=2.0)

#: A popularity rank to (product id, category, USD price in cents): `catalogue()`.
_Product = Callable[[int], tuple[int, str, int]]


class _Visit:
    """One browsing session: the attributes its events share."""

    __slots__ = (
        "app",
        "campaign",
        "currency",
        "device",
        "events",
        "experiment",
        "ext_ref",
        "market",
        "os",
        "sid",
        "uid",
    )

    def __init__(self, rng: Random) -> None:
        rnd = rng.random
        self.market = _MARKETS[int(_MARKET.pick(rnd()))]
        self.currency = self.market[2]
        device = _DEVICES[int(_DEVICE.pick(rnd()))]
        self.device = device[0]
        self.os = device[1][int(rnd() * len(device[1]))]
        self.app = device[2][int(rnd() * len(device[2]))]
        # Logged-in visitors only; older accounts have smaller ids (4–8 digits, mostly 6–7).
        self.uid: int | None = 1000 + int(rnd() * rnd() * 12_000_000) if rnd() < 0.38 else None
        self.ext_ref: str | None = EXTERNAL_REFERRER.pick(rnd()) if rnd() < 0.45 else None
        self.campaign: str | None = _CAMPAIGN.pick(rnd()) if rnd() < 0.12 else None
        self.experiment: str | None = _EXPERIMENT.pick(rnd()) if rnd() < 0.22 else None
        self.sid = f"{rng.getrandbits(32):08x}"
        self.events = 0


def _local_price(
    cents_usd: int, market: tuple[str, str, str, float, bool], pid: int
) -> int | float:
    """A shelf price in the market's currency with a realistic ending (…9.99, …4.95, …0)."""
    ending = _PRICE_ENDINGS[pid % len(_PRICE_ENDINGS)]
    local = cents_usd * market[3] / 100
    units = int(local)
    if market[4]:  # whole-unit currencies: 2980, 12990, 499
        if units >= 100:
            return units - units % 10 + (9 if ending >= 90 else 0)
        return units
    return (units * 100 + ending) / 100


def _internal_referrer(rnd: Rnd, product: _Product) -> str | None:
    """The page a later event of a visit came from: search results, a category, another
    product, or none."""
    w = rnd()
    if w < 0.10:
        return "/search?q=" + SEARCH_TERM.pick(w * (1 / 0.10))
    if w < 0.17:
        return "/c/" + CATEGORY.pick((w - 0.10) * (1 / 0.07))
    if w < 0.21:
        return f"/p/{product(int(rnd() * 2000))[0]}"
    return None


def _v1_event(
    rnd: Rnd,
    s: _Visit,
    eid: str,
    ts: str,
    view: tuple[int, str, int | float],
    count: int,
    ref: str | None,
) -> dict[str, object]:
    """The compact schema before the drift; `view` is (product id, category, price)."""
    pid, cat, price = view
    ev: dict[str, object] = {"event_id": eid, "ts": ts}
    if s.uid is not None:
        ev["u"] = s.uid
    else:
        ev["s"] = s.sid
    ev["p"] = pid
    if rnd() < 0.35:
        ev["c"] = cat
    ev["pr"] = price
    if s.currency != "EUR":  # the shop's base currency is implied
        ev["cu"] = s.currency
    if count == 0:
        ev["d"] = s.device
    if ref is not None:
        ev["r"] = ref
    if s.campaign is not None and count < 3:
        ev["cmp"] = s.campaign
    if s.experiment is not None:
        ev["ab"] = s.experiment
    return ev


def _v2_event(
    s: _Visit,
    eid: str,
    ts_ms: int,
    view: tuple[int, str, int | float],
    count: int,
    ref: str | None,
) -> dict[str, object]:
    """The v2 schema after the drift: verbose names, millisecond timestamps with offset, nested
    user, product and context objects, hierarchical categories, string SKUs."""
    pid, cat, price = view
    cats = CATEGORIES_V2[cat]
    ctx: dict[str, object] = {"os": s.os, "app": s.app, "locale": s.market[1]}
    if s.experiment is not None:
        ctx["experiments"] = [s.experiment]
    ev: dict[str, object] = {
        "event": "product_viewed",
        "event_id": eid,
        "timestamp": iso_ms(ts_ms),
        "user": {"id": s.uid, "session_id": s.sid},
        "product": {
            "sku": f"SKU-{pid}",
            "category": cats[pid % len(cats)],
            "price": {"amount": price, "currency": s.currency},
        },
        "context": ctx,
    }
    if ref is not None:
        ev["referrer"] = ref
    if s.campaign is not None and count < 3:
        ev["utm_campaign"] = s.campaign
    ev["schema_version"] = 2
    return ev


def product_viewed_events(rng: Random, n: int, drift_at: int) -> Iterator[bytes]:
    """Yield ``n`` product-view events: compact JSON, ~113 B mean before ``drift_at``."""
    rnd = rng.random
    tick = clock(rng, mean_gap_ms=120.0)
    event_id = ids(rng, 48)
    product = catalogue(rng)
    encode = encode_json
    # The stream starts mid-traffic: a pool of visits already some events in.
    max_visits = 48
    visits = [_Visit(rng) for _ in range(max_visits)]
    for visit in visits:
        visit.events = int(rnd() * 8)
    last_sec = -1
    ts = ""

    for i in range(n):
        ts_ms = tick()
        if ts_ms // 1000 != last_sec:  # several events share a second; format it once
            last_sec = ts_ms // 1000
            ts = iso_s(ts_ms)
        u = rnd()
        if u < 0.09:
            s = visits[int(u * (max_visits / 0.09))] = _Visit(rng)
        else:  # recently active visits are the busiest
            s = visits[max_visits - 1 - int(u * u * (max_visits - 0.01))]
        count = s.events
        s.events = count + 1
        v = rnd()
        pid, cat, cents = product(int(v * v * v * CATALOGUE_SIZE))
        view = (pid, cat, _local_price(cents, s.market, pid))
        # The landing event carries the external referrer; later ones sometimes the internal
        # page the visitor came from.
        ref = s.ext_ref if count == 0 else _internal_referrer(rnd, product)
        eid = f"{event_id(i):012x}"
        if i < drift_at:
            yield encode(_v1_event(rnd, s, eid, ts, view, count, ref))
        else:
            yield encode(_v2_event(s, eid, ts_ms, view, count, ref))
