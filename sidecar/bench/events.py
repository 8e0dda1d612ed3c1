"""Deterministic generator of realistic small event messages.

The demo, the tests and the benchmarks measure per-message zstd dictionary compression on this
data, so it imitates the variety of real telemetry rather than one template with a counter:
random hex and numeric ids, ISO-8601 timestamps advancing irregularly, enums with skewed
(Zipf-like) frequencies, prices of varying magnitude in several currencies, a pool of ~40 real
user agents, locales, countries, referrer URLs, optional fields present only sometimes and
values of varied length. Entities recur the way they do in production (sessions emit several
events, popular products are viewed often, a product always has the same category and price).

Determinism: the only source of randomness is one `random.Random(seed)` per stream, and only
its `random()` and `getrandbits()` are used, combined with integer and IEEE-754 ``+ - * /``
arithmetic (no libm transcendental functions, no clock, no `uuid4`), so the same
``(kind, n, seed, drift_at)`` yields byte-identical output on any machine and CPython ≥ 3.11.
A stream of ``n`` events is a prefix of the stream of ``m > n`` events with the same seed.

Every event embeds an id unique within its stream (`event_id` in ``product_viewed``, `id` in
``customer``, a 32-hex request id in ``access_log``): its bits are a bijective mix of the event's
index and a per-stream random key, so uniqueness is guaranteed, not merely probable.
`extract_id` recovers it from an encoded event, before or after a drift.
"""

import json
import re
from bisect import bisect
from collections.abc import Callable, Iterator, Sequence
from datetime import date, timedelta
from functools import lru_cache
from random import Random

from sidecar.errors import InputError

__all__ = ["KINDS", "extract_id", "generate"]

KINDS: tuple[str, ...] = ("product_viewed", "customer", "access_log", "order")
"""The event kinds `generate` knows, in documentation order."""

# --------------------------------------------------------------------------------------------
# Primitives: skewed enums, bijective id mixing, timestamps
# --------------------------------------------------------------------------------------------


class _Enum:
    """A finite distribution over strings; `pick(u)` maps a uniform ``u ∈ [0, 1)`` to a value."""

    __slots__ = ("_cum", "_hi", "_total", "values")

    def __init__(self, values: Sequence[str], weights: Sequence[float]) -> None:
        if len(values) != len(weights) or not values:
            raise ValueError("values and weights must be non-empty and of equal length")
        self.values: tuple[str, ...] = tuple(values)
        cum: list[float] = []
        acc = 0.0
        for w in weights:
            acc += w
            cum.append(acc)
        self._cum = cum
        self._total = acc
        self._hi = len(cum) - 1

    def pick(self, u: float) -> str:
        """Return the value whose cumulative-weight slot contains ``u × total``."""
        return self.values[bisect(self._cum, u * self._total, 0, self._hi)]


def _zipf(values: Sequence[str], shift: float = 1.0) -> _Enum:
    """Zipf–Mandelbrot weights ``1 / (rank + shift)``, most frequent value first.

    Plain division (no `pow`) keeps the weights bit-identical on every platform.
    """
    return _Enum(values, [1.0 / (rank + shift) for rank in range(1, len(values) + 1)])


def _words(text: str, sep: str | None = None) -> tuple[str, ...]:
    """The words of ``text`` split on ``sep`` (default whitespace): compact vocabularies."""
    return tuple(text.split(sep))


def _weighted(pairs: Sequence[tuple[str, float]]) -> _Enum:
    """An `_Enum` from explicit ``(value, weight)`` pairs."""
    return _Enum([v for v, _ in pairs], [w for _, w in pairs])


def _make_json_encoder() -> Callable[[object], bytes]:
    """Return ``obj ↦ json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()``.

    Same bytes as `json.dumps` (a unit test checks), but the C encoder is built once instead of
    on every call, which is a third of the cost of a ~100-byte event.
    """
    reference = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
    make: Callable[..., Callable[[object, int], list[str]]] | None = getattr(
        json.encoder, "c_make_encoder", None
    )
    c_encode = None
    if make is not None:
        try:
            c_encode = make(
                None,
                reference.default,
                json.encoder.encode_basestring,
                None,
                ":",
                ",",
                False,
                False,
                True,
            )
        except TypeError:  # a future CPython changed the private signature
            c_encode = None
    if c_encode is None:
        return lambda obj: reference.encode(obj).encode()
    join = "".join
    fast = c_encode

    def encode(obj: object) -> bytes:
        return join(fast(obj, 0)).encode()

    return encode


_json = _make_json_encoder()


def _mix(x: int, bits: int) -> int:
    """Bijective scrambling of a ``bits``-bit integer (``bits`` ≥ 16), a MurmurHash3 finaliser.

    Each step (``x ^= x >> s``, multiplication by an odd constant) is invertible modulo
    ``2**bits``, so distinct inputs below ``2**bits`` always give distinct outputs.
    """
    mask = (1 << bits) - 1
    shift = bits // 2 + 1
    x &= mask
    x ^= x >> shift
    x = (x * (0xFF51AFD7ED558CCD & mask | 1)) & mask
    x ^= x >> shift
    x = (x * (0xC4CEB9FE1A85EC53 & mask | 1)) & mask
    x ^= x >> shift
    return x


def _hash_unit(x: int) -> float:
    """A stable pseudo-random float in ``[0, 1)`` derived from integer ``x``."""
    return (_mix(x, 64) >> 11) * (1.0 / (1 << 53))


_Rnd = Callable[[], float]
"""A source of uniform floats in [0, 1): a bound `Random.random`."""

_EPOCH = date(1970, 1, 1)
_MS_PER_DAY = 86_400_000
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


@lru_cache(maxsize=4096)
def _iso_day(day: int) -> str:
    """``YYYY-MM-DD`` of ``day`` days after 1970-01-01."""
    return (_EPOCH + timedelta(days=day)).isoformat()


@lru_cache(maxsize=4096)
def _clf_day(day: int) -> str:
    """``DD/Mon/YYYY`` (common log format) of ``day`` days after 1970-01-01."""
    d = _EPOCH + timedelta(days=day)
    return f"{d.day:02d}/{_MONTHS[d.month - 1]}/{d.year}"


def _iso_s(ms: int) -> str:
    """ISO-8601 UTC timestamp with second precision, e.g. ``2024-03-07T14:02:11Z``."""
    day, rem = divmod(ms, _MS_PER_DAY)
    s = rem // 1000
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{_iso_day(day)}T{h:02d}:{m:02d}:{s:02d}Z"


def _iso_ms(ms: int) -> str:
    """ISO-8601 timestamp with millisecond precision and offset, ``…T14:02:11.482+00:00``."""
    day, rem = divmod(ms, _MS_PER_DAY)
    s, milli = divmod(rem, 1000)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{_iso_day(day)}T{h:02d}:{m:02d}:{s:02d}.{milli:03d}+00:00"


def _clf_time(ms: int) -> str:
    """Common-log-format time, ``07/Mar/2024:14:02:11 +0000``."""
    day, rem = divmod(ms, _MS_PER_DAY)
    s = rem // 1000
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{_clf_day(day)}:{h:02d}:{m:02d}:{s:02d} +0000"


# 2024-03-04T00:00:00Z in ms since the epoch; each stream starts at a seed-dependent offset
# within the following year.
_BASE_MS = 1_709_510_400_000
_YEAR_MS = 365 * _MS_PER_DAY


def _clock(rng: Random, mean_gap_ms: float) -> Callable[[], int]:
    """A clock (ms since the epoch) advancing by irregular, bursty gaps of mean ~``mean_gap_ms``.

    Most gaps are short (``u² × 3 × mean`` has mean ``mean``), with an occasional lull of up to
    ~25 × mean, as in real traffic.
    """
    rnd = rng.random
    now = _BASE_MS + int(rnd() * _YEAR_MS)
    scale = 3.0 * mean_gap_ms * 0.9
    lull = 25.0 * mean_gap_ms

    def tick() -> int:
        nonlocal now
        u = rnd()
        gap = u * u * scale
        if u > 0.99:
            gap += rnd() * lull
        now += int(gap) + 1
        return now

    return tick


def _ids(rng: Random, bits: int) -> Callable[[int], int]:
    """Map event index ``i`` to a ``bits``-bit id, unique for every ``i < 2**bits``."""
    key = rng.getrandbits(bits)
    mask = (1 << bits) - 1

    def ident(i: int) -> int:
        return _mix((i + key) & mask, bits)

    return ident


# --------------------------------------------------------------------------------------------
# Shared vocabularies
# --------------------------------------------------------------------------------------------

# Real user agents, most frequent first (Zipf-distributed): browsers, in-app browsers, the shop's
# own app, HTTP libraries, crawlers and probes.
USER_AGENTS: tuple[str, ...] = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/122.0.0.0 Safari/537.36",
    "ShopApp/5.12.1 (iPhone; iOS 17.3.1; Scale/3.00)",
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_3_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, "
    "like Gecko) Version/17.3.1 Mobile/15E148 Safari/604.1",
    "ShopApp/5.12.0 (Android 14; SM-S918B; Build/UP1A.231005.007)",
    "okhttp/4.12.0",
    "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/122.0.0.0 Mobile Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/122.0.0.0 Safari/537.36",
    "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) "
    "Version/17.3.1 Safari/605.1.15",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/122.0.0.0 Safari/537.36 Edg/122.0.0.0",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:123.0) Gecko/20100101 Firefox/123.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 16_6 like Mac OS X) AppleWebKit/605.1.15 (KHTML, "
    "like Gecko) Version/16.6 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (Linux; Android 13; SM-A536B) AppleWebKit/537.36 (KHTML, like Gecko) "
    "SamsungBrowser/23.0 Chrome/115.0.0.0 Mobile Safari/537.36",
    "Mozilla/5.0 (iPad; CPU OS 17_3 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
    "Version/17.3 Mobile/15E148 Safari/604.1",
    "kube-probe/1.29",
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/121.0.0.0 Safari/537.36",
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/122.0.6261.105 Mobile Safari/537.36",
    "curl/8.4.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_3_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, "
    "like Gecko) CriOS/122.0.6261.89 Mobile/15E148 Safari/604.1",
    "python-requests/2.31.0",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14.3; rv:123.0) Gecko/20100101 Firefox/123.0",
    "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_3_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, "
    "like Gecko) Mobile/15E148 Instagram 319.0.2.19.108 (iPhone15,3; iOS 17_3_1; en_US; en; "
    "scale=3.00; 1290x2796; 560291540)",
    "Mozilla/5.0 (compatible; YandexBot/3.0; +http://yandex.com/bots)",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/121.0.0.0 Safari/537.36 OPR/107.0.0.0",
    "Go-http-client/2.0",
    "Mozilla/5.0 (Linux; Android 12; M2101K6G) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/120.0.6099.230 Mobile Safari/537.36",
    "Mozilla/5.0 (compatible; AhrefsBot/7.0; +http://ahrefs.com/robot/)",
    "ShopApp/5.11.4 (iPad; iOS 16.7.5; Scale/2.00)",
    "Mozilla/5.0 (Windows NT 6.1; Win64; x64; Trident/7.0; rv:11.0) like Gecko",
    "Dalvik/2.1.0 (Linux; U; Android 11; Redmi Note 8 Pro Build/RP1A.200720.011)",
    "Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:122.0) Gecko/20100101 Firefox/122.0",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) "
    "HeadlessChrome/122.0.6261.94 Safari/537.36",
    "Twitterbot/1.0",
    "Mozilla/5.0 (Linux; Android 14; SM-G991B) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/122.0.0.0 Mobile Safari/537.36 EdgA/122.0.2365.86",
    "Apache-HttpClient/4.5.14 (Java/17.0.10)",
    "Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/121.0.0.0 Safari/537.36",
    "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)",
    "Mozilla/5.0 (Windows NT 10.0; WOW64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/109.0.0.0 Safari/537.36",
    "Mozilla/5.0 (compatible; Bytespider; spider-feedback@bytedance.com) AppleWebKit/537.36 "
    "(KHTML, like Gecko) Chrome/70.0.0.0 Safari/537.36",
)
_UA = _zipf(USER_AGENTS, shift=1.5)

_SEARCH_TERMS: tuple[str, ...] = _words(
    "sneakers running+shoes iphone+15+case air+fryer lego usb-c+kabel bluetooth+kopfh%C3%B6rer "
    "robe+d%27%C3%A9t%C3%A9 gaming+chair yoga+mat winter+jacket standing+desk nintendo+switch "
    "coffee+grinder zapatillas+mujer smartwatch backpack led+strip mechanical+keyboard dog+bed "
    "sunglasses bettw%C3%A4sche 4k+monitor perfume cast+iron+pan phone+charger jeans+men "
    "baby+stroller garden+hose vitamin+d tenda+campeggio wireless+earbuds"
)
_SEARCH = _zipf(_SEARCH_TERMS, shift=2.0)

_EXTERNAL_REFERRERS: tuple[str, ...] = _words(
    "https://www.google.com/ https://www.google.de/ https://l.instagram.com/ https://www.bing.com/ "
    "https://t.co/ https://www.facebook.com/ https://duckduckgo.com/ "
    "android-app://com.google.android.gm/ https://www.google.co.uk/ https://www.pinterest.com/ "
    "https://www.google.fr/ https://search.yahoo.com/ https://www.reddit.com/ "
    "https://lm.facebook.com/ https://www.youtube.com/ https://www.idealo.de/ "
    "https://www.ecosia.org/ https://news.ycombinator.com/"
)
_EXT_REF = _zipf(_EXTERNAL_REFERRERS, shift=1.0)

# --------------------------------------------------------------------------------------------
# product_viewed
# --------------------------------------------------------------------------------------------

_CATEGORIES: tuple[str, ...] = _words(
    "fashion electronics home beauty shoes sports toys books kitchen garden health jewelry "
    "video_games pet_supplies baby office automotive tools music grocery"
)
_CATEGORY = _zipf(_CATEGORIES, shift=2.0)

# After a drift the catalogue uses a hierarchical taxonomy: a new enum value set.
_CATEGORIES_V2: dict[str, tuple[str, ...]] = {
    "fashion": ("apparel/women/dresses", "apparel/men/jackets", "apparel/women/tops"),
    "electronics": ("electronics/phones", "electronics/audio/headphones", "electronics/tv"),
    "home": ("home/bedding", "home/decor/lighting", "home/furniture"),
    "beauty": ("beauty/skincare", "beauty/fragrance"),
    "shoes": ("apparel/shoes/sneakers", "apparel/shoes/boots"),
    "sports": ("sports/fitness", "sports/outdoor/camping", "sports/cycling"),
    "toys": ("toys/building-sets", "toys/dolls"),
    "books": ("media/books/fiction", "media/books/non-fiction"),
    "kitchen": ("home/kitchen/cookware", "home/kitchen/appliances"),
    "garden": ("home/garden/tools", "home/garden/furniture"),
    "health": ("health/vitamins", "health/personal-care"),
    "jewelry": ("accessories/jewelry", "accessories/watches"),
    "video_games": ("media/games/console", "media/games/pc"),
    "pet_supplies": ("pets/dogs", "pets/cats"),
    "baby": ("baby/strollers", "baby/clothing"),
    "office": ("office/supplies", "office/furniture"),
    "automotive": ("automotive/accessories", "automotive/parts"),
    "tools": ("diy/power-tools", "diy/hand-tools"),
    "music": ("media/music/instruments", "media/music/vinyl"),
    "grocery": ("grocery/snacks", "grocery/beverages"),
}

# Typical USD price band per category, in cents.
_PRICE_BAND: dict[str, tuple[int, int]] = {
    "fashion": (999, 14999),
    "electronics": (1499, 189999),
    "home": (799, 59999),
    "beauty": (499, 12999),
    "shoes": (2999, 24999),
    "sports": (999, 79999),
    "toys": (599, 19999),
    "books": (499, 4999),
    "kitchen": (899, 49999),
    "garden": (999, 99999),
    "health": (399, 5999),
    "jewelry": (1999, 249999),
    "video_games": (999, 69999),
    "pet_supplies": (499, 8999),
    "baby": (799, 89999),
    "office": (199, 39999),
    "automotive": (999, 59999),
    "tools": (999, 49999),
    "music": (999, 129999),
    "grocery": (149, 2999),
}
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
_MARKET = _zipf([str(i) for i in range(len(_MARKETS))], shift=0.2)

# (short device code, v2 os names, v2 app versions), weighted.
_DEVICES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("ios", ("iOS 17.3.1", "iOS 17.2", "iOS 16.7.5"), ("5.12.1", "5.12.0", "5.11.4")),
    ("android", ("Android 14", "Android 13", "Android 12", "Android 11"), ("5.12.0", "5.11.2")),
    ("web", ("Windows 10", "macOS 14.3", "Windows 11", "Linux", "ChromeOS"), ("web-2403.1",)),
    ("mweb", ("iOS 17.3.1", "Android 14", "Android 13"), ("web-2403.1",)),
    ("ipad", ("iPadOS 17.3", "iPadOS 16.7"), ("5.12.1", "5.11.4")),
)
_DEVICE = _Enum([str(i) for i in range(len(_DEVICES))], [34.0, 27.0, 24.0, 11.0, 4.0])

_CAMPAIGNS: tuple[str, ...] = _words(
    "spring_sale_24 nl_0307 retarget_fb brand_search pmax_shoes cart_abandon_2 ig_influencer_mia "
    "affiliate_idealo welcome_10 tiktok_q1 bf_earlybird"
)
_CAMPAIGN = _zipf(_CAMPAIGNS, shift=1.0)

_EXPERIMENTS: tuple[str, ...] = _words(
    "pdp42:B pdp42:A anchor:ctl reco7:on reco7:off shipbar:B chk1p:A rank:t2 pdp43:C"
)
_EXPERIMENT = _zipf(_EXPERIMENTS, shift=2.0)

_CATALOGUE_SIZE = 60_000


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
        self.ext_ref: str | None = _EXT_REF.pick(rnd()) if rnd() < 0.45 else None
        self.campaign: str | None = _CAMPAIGN.pick(rnd()) if rnd() < 0.12 else None
        self.experiment: str | None = _EXPERIMENT.pick(rnd()) if rnd() < 0.22 else None
        self.sid = f"{rng.getrandbits(32):08x}"
        self.events = 0


def _catalogue(rng: Random) -> Callable[[int], tuple[int, str, int]]:
    """Map a popularity rank to a stable ``(product id, category, USD price in cents)``."""
    key = rng.getrandbits(64)
    offset = int(rng.random() * 9_000_000)
    cache: dict[int, tuple[int, str, int]] = {}

    def product(rank: int) -> tuple[int, str, int]:
        hit = cache.get(rank)
        if hit is not None:
            return hit
        # 30 % legacy 5-digit ids, the rest 7-digit; both maps are injective on ranks.
        if rank % 10 < 3:
            pid = 10_000 + (rank * 7919 + offset) % 90_000
        else:
            pid = 1_000_000 + (rank * 7919 + offset) % 9_000_000
        cat = _CATEGORY.pick(_hash_unit(pid ^ key))
        lo, hi = _PRICE_BAND[cat]
        f = _hash_unit(pid + key)
        cents = lo + int((hi - lo) * f * f * f)  # cheap items dominate each band
        cache[rank] = hit = (pid, cat, cents)
        return hit

    return product


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


def _product_viewed(rng: Random, n: int, drift_at: int) -> Iterator[bytes]:
    """Yield ``n`` product-view events: compact JSON, ~113 B mean before ``drift_at``."""
    rnd = rng.random
    tick = _clock(rng, mean_gap_ms=120.0)
    event_id = _ids(rng, 48)
    product = _catalogue(rng)
    encode = _json
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
            ts = _iso_s(ts_ms)
        u = rnd()
        if u < 0.09:
            s = visits[int(u * (max_visits / 0.09))] = _Visit(rng)
        else:  # recently active visits are the busiest
            s = visits[max_visits - 1 - int(u * u * (max_visits - 0.01))]
        count = s.events
        s.events = count + 1
        v = rnd()
        pid, cat, cents = product(int(v * v * v * _CATALOGUE_SIZE))
        market = s.market
        price = _local_price(cents, market, pid)
        # The landing event carries the external referrer; later ones sometimes the internal
        # page the visitor came from (search results, a category, another product).
        ref: str | None = None
        if count == 0:
            ref = s.ext_ref
        else:
            w = rnd()
            if w < 0.10:
                ref = "/search?q=" + _SEARCH.pick(w * (1 / 0.10))
            elif w < 0.17:
                ref = "/c/" + _CATEGORY.pick((w - 0.10) * (1 / 0.07))
            elif w < 0.21:
                ref = f"/p/{product(int(rnd() * 2000))[0]}"
        eid = f"{event_id(i):012x}"
        ev: dict[str, object]
        if i < drift_at:
            ev = {"event_id": eid, "ts": ts}
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
        else:
            # v2 schema: verbose names, millisecond timestamps with offset, nested user,
            # product and context objects, hierarchical categories, string SKUs.
            cats = _CATEGORIES_V2[cat]
            ctx: dict[str, object] = {"os": s.os, "app": s.app, "locale": market[1]}
            if s.experiment is not None:
                ctx["experiments"] = [s.experiment]
            ev = {
                "event": "product_viewed",
                "event_id": eid,
                "timestamp": _iso_ms(ts_ms),
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
        yield encode(ev)


# --------------------------------------------------------------------------------------------
# customer
# --------------------------------------------------------------------------------------------


def _digits(rnd: _Rnd, k: int) -> str:
    """``k`` uniformly random decimal digits, leading zeros kept."""
    return f"{int(rnd() * 10**k):0{k}d}"


def _letters(rnd: _Rnd, k: int) -> str:
    """``k`` random upper-case ASCII letters."""
    return "".join([chr(65 + int(rnd() * 26)) for _ in range(k)])


def _house(rnd: _Rnd) -> int:
    """A house number: mostly below 60, sometimes in the low hundreds."""
    u = rnd()
    return 1 + int(u * 80) if u < 0.75 else 1 + int((u - 0.75) * (u - 0.75) * 4000)


def _phone(cc: str, leads: str, groups: tuple[int, ...], trunk: str) -> Callable[[_Rnd], str]:
    """A mobile-number maker for one country; formats vary as in real sign-up forms.

    ``leads`` are comma-separated operator prefixes, ``groups`` the digit groups after them,
    ``trunk`` the national trunk prefix (``"0"`` or ``""``).
    """
    lead_values = leads.split(",")

    def phone(rnd: _Rnd) -> str:
        lead = lead_values[int(rnd() * len(lead_values))]
        parts = [_digits(rnd, g) for g in groups]
        u = rnd()
        if u < 0.5:
            return f"+{cc} {lead} {' '.join(parts)}"
        if u < 0.75:
            return f"+{cc}{lead}{''.join(parts)}"
        return f"{trunk}{lead} {' '.join(parts)}"

    return phone


def _us_phone(rnd: _Rnd) -> str:
    """A North American number in one of the three common spellings."""
    area, exchange, line = 201 + int(rnd() * 780), 200 + int(rnd() * 799), _digits(rnd, 4)
    u = rnd()
    if u < 0.45:
        return f"+1 {area}-{exchange}-{line}"
    if u < 0.8:
        return f"({area}) {exchange}-{line}"
    return f"+1{area}{exchange}{line}"


def _br_phone(rnd: _Rnd) -> str:
    """A Brazilian mobile number, ``+55 11 91234-5678``."""
    ddd = ("11", "21", "31", "41", "51", "61", "71", "81")[int(rnd() * 8)]
    return f"+55 {ddd} 9{_digits(rnd, 4)}-{_digits(rnd, 4)}"


class _Country:
    """Vocabulary and formats for customers living in one country."""

    __slots__ = (
        "apartment",
        "cities",
        "code",
        "domains",
        "first",
        "last",
        "locale",
        "phone",
        "postal",
        "street",
        "streets",
    )

    def __init__(
        self,
        code: str,
        locale: str,
        first: str,
        last: str,
        cities: str,
        streets: str,
        street: Callable[[str, int, _Rnd], str],
        postal: Callable[[str, _Rnd], str],
        phone: Callable[[_Rnd], str],
        domains: str,
        apartment: Callable[[_Rnd], str | None],
    ) -> None:
        self.code = code
        self.locale = locale
        self.first = _zipf(first.split(","), shift=4.0)
        self.last = _zipf(last.split(","), shift=4.0)
        self.cities = _zipf(cities.split(","), shift=1.0)  # "City|postal prefix"
        self.streets = _zipf(streets.split(","), shift=2.0)
        self.street = street
        self.postal = postal
        self.phone = phone
        self.domains = _zipf(domains.split(","), shift=0.5)
        self.apartment = apartment


_GB_INWARD = "ABDEFGHJLNPQRSTUWXYZ"  # letters allowed in the inward half of a UK postcode


def _no_apartment(rnd: _Rnd) -> str | None:
    return None


def _us_apartment(rnd: _Rnd) -> str | None:
    u = rnd()
    if u < 0.12:
        return f"Apt {1 + int(u * 150)}{'ABCDEF'[int(rnd() * 6)]}"
    return f"Suite {100 + int(rnd() * 900)}" if u < 0.16 else None


def _es_apartment(rnd: _Rnd) -> str | None:
    return f"{1 + int(rnd() * 9)}º {'ABCDI'[int(rnd() * 5)]}" if rnd() < 0.6 else None


def _br_apartment(rnd: _Rnd) -> str | None:
    return f"apto {1 + int(rnd() * 20)}{int(rnd() * 4) + 1}" if rnd() < 0.35 else None


_COUNTRIES: tuple[_Country, ...] = (
    _Country(
        "US",
        "en-US",
        "James,Mary,Michael,Jennifer,David,Emily,Daniel,Olivia,Christopher,Ashley,Jessica,"
        "Matthew,Sarah,Tyler,Madison,Brandon,Kayla,José,Aaliyah,Ethan,Megan,Kevin,Priya,Wei",
        "Smith,Johnson,Williams,Brown,Jones,Garcia,Miller,Davis,Rodriguez,Martinez,Wilson,"
        "Anderson,Taylor,Thomas,Nguyen,Lee,Patel,Kim,O'Brien,Hernandez,Washington,Cohen",
        "New York|100,Los Angeles|900,Chicago|606,Houston|770,Phoenix|850,Seattle|981,"
        "Austin|787,Denver|802,Boston|021,Atlanta|303,Portland|972,Columbus|432,San Diego|921,"
        "Minneapolis|554,Charlotte|282",
        "Main St,Oak Ave,Maple Dr,Cedar Ln,Elm St,Washington Blvd,Lake Shore Dr,Park Ave,"
        "Pine St,Sunset Blvd,Madison Ave,2nd St,5th Ave,Highland Rd,Broadway,Mill Creek Ct",
        lambda name, no, rnd: f"{no * 17 + int(rnd() * 17)} {name}",
        lambda prefix, rnd: (
            f"{prefix}{_digits(rnd, 2)}" + (f"-{_digits(rnd, 4)}" if rnd() < 0.1 else "")
        ),
        _us_phone,
        "gmail.com,yahoo.com,outlook.com,hotmail.com,icloud.com,aol.com,comcast.net,"
        "att.net,protonmail.com,me.com",
        _us_apartment,
    ),
    _Country(
        "DE",
        "de-DE",
        "Lukas,Anna,Maximilian,Sophie,Jonas,Marie,Felix,Lena,Leon,Hannah,Jürgen,Jörg,Sabine,"
        "Thomas,Katrin,Özlem,Mehmet,Ursula,Stefan,Birgit",
        "Müller,Schmidt,Schneider,Fischer,Weber,Meyer,Wagner,Becker,Schulz,Hoffmann,Schäfer,"
        "Koch,Bauer,Richter,Klein,Wolf,Yılmaz,Schröder,Neumann,Zimmermann",
        "Berlin|10,Hamburg|20,München|80,Köln|50,Frankfurt am Main|60,Stuttgart|70,"
        "Düsseldorf|40,Leipzig|04,Dresden|01,Hannover|30,Nürnberg|90,Bremen|28",
        "Hauptstraße,Bahnhofstraße,Schulweg,Gartenstraße,Lindenallee,Goethestraße,"
        "Schillerstraße,Am Markt,Friedrich-Ebert-Straße,Mozartweg,Kirchplatz,Bergstraße,"
        "Waldstraße,Ringstraße",
        lambda name, no, rnd: f"{name} {no}" + ("a" if rnd() < 0.07 else ""),
        lambda prefix, rnd: f"{prefix}{_digits(rnd, 3)}",
        _phone("49", "151,152,157,160,170,171,176,177,179", (8,), "0"),
        "gmail.com,web.de,gmx.de,t-online.de,outlook.de,yahoo.de,gmx.net,posteo.de",
        _no_apartment,
    ),
    _Country(
        "GB",
        "en-GB",
        "Oliver,Amelia,George,Isla,Harry,Ava,Jack,Mia,Charlie,Emily,Sophie,Thomas,Siobhan,"
        "Rhys,Aisha,Callum",
        "Smith,Jones,Taylor,Brown,Williams,Wilson,Johnson,Davies,Evans,Thomas,Roberts,Walker,"
        "Wright,Patel,Khan,McDonald",
        "London|SW,London|E,London|N,Manchester|M,Birmingham|B,Leeds|LS,Glasgow|G,"
        "Bristol|BS,Edinburgh|EH,Liverpool|L,Cardiff|CF,Sheffield|S",
        "High Street,Station Road,Church Lane,Victoria Road,Manor Close,Park Avenue,Queens Road,"
        "Kings Crescent,Mill Lane,The Green,Albert Gardens,Windsor Drive",
        lambda name, no, rnd: f"{no} {name}",
        lambda prefix, rnd: (
            f"{prefix}{1 + int(rnd() * 20)} {int(rnd() * 10)}"
            f"{_GB_INWARD[int(rnd() * 20)]}{_GB_INWARD[int(rnd() * 20)]}"
        ),
        _phone("44", "7700,7911,7481,7375,7412,7817", (6,), "0"),
        "gmail.com,hotmail.co.uk,yahoo.co.uk,outlook.com,btinternet.com,icloud.com,sky.com",
        _no_apartment,
    ),
    _Country(
        "FR",
        "fr-FR",
        "Jean,Marie,Pierre,Camille,Lucas,Léa,Hugo,Chloé,Louis,Manon,Élodie,François,Théo,Inès,"
        "Nathalie,Mathieu",
        "Martin,Bernard,Dubois,Thomas,Robert,Richard,Petit,Durand,Leroy,Moreau,Lefèvre,Girard,"
        "Fontaine,Rousseau,Benali,Garnier",
        "Paris|75,Marseille|13,Lyon|69,Toulouse|31,Nice|06,Nantes|44,Bordeaux|33,Lille|59,"
        "Strasbourg|67,Montpellier|34,Rennes|35",
        "rue de la République,avenue Victor Hugo,boulevard Jean Jaurès,rue de la Paix,"
        "impasse des Lilas,rue Pasteur,avenue du Général de Gaulle,place Voltaire,"
        "chemin des Vignes,rue Nationale",
        lambda name, no, rnd: f"{no}{' bis' if rnd() < 0.05 else ''} {name}",
        lambda prefix, rnd: f"{prefix}{_digits(rnd, 3)}",
        _phone("33", "6,7", (2, 2, 2, 2), "0"),
        "gmail.com,orange.fr,hotmail.fr,free.fr,laposte.net,yahoo.fr,sfr.fr,wanadoo.fr",
        _no_apartment,
    ),
    _Country(
        "ES",
        "es-ES",
        "María,José,Antonio,Lucía,Carmen,Javier,Pablo,Sofía,Alejandro,Paula,Sergio,Marta,"
        "Ángel,Nerea",
        "García,Fernández,González,Rodríguez,López,Martínez,Sánchez,Pérez,Gómez,Martín,Jiménez,"
        "Ruiz,Iglesias,Ortega",
        "Madrid|28,Barcelona|08,Valencia|46,Sevilla|41,Zaragoza|50,Málaga|29,Bilbao|48,"
        "Palma|07,Alicante|03",
        "Calle Mayor,Gran Vía,Calle de Alcalá,Calle Real,Avenida de la Constitución,"
        "Plaza del Sol,Calle San Juan,Calle de Serrano,Paseo de Gracia,Rambla de Catalunya",
        lambda name, no, rnd: f"{name}, {no}",
        lambda prefix, rnd: f"{prefix}{_digits(rnd, 3)}",
        _phone("34", "612,622,634,654,678,699,711", (3, 3), ""),
        "gmail.com,hotmail.com,yahoo.es,outlook.es,hotmail.es,telefonica.net",
        _es_apartment,
    ),
    _Country(
        "IT",
        "it-IT",
        "Giuseppe,Giulia,Marco,Francesca,Alessandro,Chiara,Luca,Sara,Matteo,Martina,Niccolò,"
        "Federica,Andrea",
        "Rossi,Russo,Ferrari,Esposito,Bianchi,Romano,Colombo,Ricci,Marino,Greco,Bruno,"
        "De Luca,Conti",
        "Roma|001,Milano|201,Napoli|801,Torino|101,Bologna|401,Firenze|501,Palermo|901,"
        "Genova|161,Verona|371",
        "Via Roma,Via Garibaldi,Corso Vittorio Emanuele II,Via Giuseppe Mazzini,Piazza Dante,"
        "Via Cavour,Viale dei Mille,Via Verdi,Via del Corso,Via Nazionale",
        lambda name, no, rnd: f"{name} {no}",
        lambda prefix, rnd: f"{prefix}{_digits(rnd, 2)}",
        _phone("39", "320,328,333,340,347,349,366,393", (3, 4), ""),
        "gmail.com,libero.it,hotmail.it,yahoo.it,virgilio.it,alice.it,outlook.it,tiscali.it",
        _no_apartment,
    ),
    _Country(
        "NL",
        "nl-NL",
        "Daan,Emma,Sem,Julia,Lucas,Mila,Bram,Sanne,Jeroen,Anouk,Femke,Thijs",
        "de Jong,Jansen,de Vries,van den Berg,van Dijk,Bakker,Visser,Smit,Meijer,de Boer,"
        "Mulder,Bos",
        "Amsterdam|10,Rotterdam|30,Den Haag|25,Utrecht|35,Eindhoven|56,Groningen|97,"
        "Haarlem|20,Nijmegen|65",
        "Kerkstraat,Dorpsstraat,Schoolstraat,Molenweg,Herengracht,Keizersgracht,Prinsengracht,"
        "Stationsweg,Julianalaan,Wilhelminastraat",
        lambda name, no, rnd: f"{name} {no}" + ("-2" if rnd() < 0.08 else ""),
        lambda prefix, rnd: f"{prefix}{_digits(rnd, 2)} {_letters(rnd, 2)}",
        _phone("31", "6", (8,), "0"),
        "gmail.com,hotmail.com,ziggo.nl,outlook.com,kpnmail.nl,live.nl,xs4all.nl",
        _no_apartment,
    ),
    _Country(
        "BR",
        "pt-BR",
        "João,Maria,Gabriel,Ana,Lucas,Júlia,Pedro,Beatriz,Mateus,Larissa,Thiago,Fernanda",
        "Silva,Santos,Oliveira,Souza,Rodrigues,Ferreira,Alves,Pereira,Lima,Gomes,Costa,Ribeiro",
        "São Paulo|01,Rio de Janeiro|20,Belo Horizonte|30,Brasília|70,Curitiba|80,"
        "Porto Alegre|90,Salvador|40,Recife|50",
        "Rua Augusta,Rua das Flores,Rua XV de Novembro,Avenida Paulista,Rua Sete de Setembro,"
        "Avenida Santos Dumont,Rua Tiradentes,Avenida Brasil,Rua da Consolação,Rua Oscar Freire",
        lambda name, no, rnd: f"{name}, {no * 10 + int(rnd() * 10)}",
        lambda prefix, rnd: f"{prefix}{_digits(rnd, 3)}-{_digits(rnd, 3)}",
        _br_phone,
        "gmail.com,hotmail.com,outlook.com,yahoo.com.br,uol.com.br,bol.com.br,terra.com.br",
        _br_apartment,
    ),
    _Country(
        "PL",
        "pl-PL",
        "Jakub,Zofia,Kacper,Julia,Szymon,Maja,Piotr,Agnieszka,Łukasz,Małgorzata,Tomasz,Anna",
        "Nowak,Kowalski,Wiśniewski,Wójcik,Kowalczyk,Kamiński,Lewandowski,Zieliński,Szymański,"
        "Woźniak,Dąbrowski,Mazur",
        "Warszawa|0,Kraków|3,Łódź|9,Wrocław|5,Poznań|6,Gdańsk|8,Szczecin|7,Lublin|2",
        "Marszałkowska,Długa,Polna,Kościuszki,Mickiewicza,Słowackiego,Piłsudskiego,Ogrodowa,"
        "Lipowa,Kwiatowa",
        lambda name, no, rnd: (
            f"ul. {name} {no}" + (f"/{1 + int(rnd() * 60)}" if rnd() < 0.45 else "")
        ),
        lambda prefix, rnd: f"{prefix}{_digits(rnd, 1)}-{_digits(rnd, 3)}",
        _phone("48", "500,512,533,601,667,692,721,798", (3, 3), ""),
        "gmail.com,wp.pl,onet.pl,o2.pl,interia.pl,op.pl,outlook.com",
        _no_apartment,
    ),
)
_COUNTRY = _Enum(
    [str(i) for i in range(len(_COUNTRIES))], [30.0, 16.0, 12.0, 9.0, 7.0, 6.0, 4.0, 5.0, 3.0]
)

# Diacritics folded the way sign-up forms and mail providers do it.
_FOLD = str.maketrans(
    {
        **str.maketrans("áàâãåąéèêëęíìîïıóòôõøúùûñńçćśşźżł", "aaaaaaeeeeeiiiiiooooouuunnccsszzl"),
        ord("ä"): "ae",
        ord("ö"): "oe",
        ord("ü"): "ue",
        ord("ß"): "ss",
        ord("'"): None,
        ord(" "): None,
        ord("-"): None,
    }
)

_HANDLES: tuple[str, ...] = _words(
    "sunny pixel rocket bluebird darkstar kitty gamer dreamer coolcat wanderer nightowl foxy tiger "
    "skater lucky shadow"
)

_TIERS = _weighted(
    [("standard", 48), ("silver", 26), ("gold", 15), ("platinum", 8), ("diamond", 3)]
)
_TIERS_V2 = {
    "standard": "basic",
    "silver": "plus",
    "gold": "premium",
    "platinum": "elite",
    "diamond": "elite",
}

_TAGS = _zipf(
    _words(
        "newsletter app_signup vip mobile_app high_value churn_risk b2b student gift_buyer "
        "early_adopter wholesale employee eco_friendly bulk_buyer support_escalation referral "
        "influencer fraud_review price_sensitive international"
    ),
    shift=1.5,
)

_COMPANY_SUFFIX = {
    "US": " Inc.",
    "DE": " GmbH",
    "GB": " Ltd",
    "FR": " SARL",
    "ES": " S.L.",
    "IT": " S.r.l.",
    "NL": " B.V.",
    "BR": " Ltda.",
    "PL": " sp. z o.o.",
}
_COMPANY_WORDS = _words(
    "Nordwind,Acme,Bluefield,Hansen & Co,Orbital,Greenleaf,Brightline,Delta Logistics,Studio Nove,"
    "Atlas,Kite Digital",
    ",",
)


def _email(rnd: _Rnd, first: str, last: str, country: _Country, birth_year: int) -> str:
    """An address built the way people pick them: name patterns, digits, handles."""
    f = first.lower().translate(_FOLD)
    la = last.lower().translate(_FOLD)
    u = rnd()
    if u < 0.30:
        local = f"{f}.{la}"
    elif u < 0.42:
        local = f + la
    elif u < 0.53:
        local = f[0] + la
    elif u < 0.63:
        local = f"{f}.{la}{birth_year % 100:02d}"
    elif u < 0.72:
        local = f + str(1 + int(rnd() * rnd() * 999))
    elif u < 0.77:
        local = f"{la}.{f}"
    elif u < 0.82:
        local = f"{f}_{la}"
    elif u < 0.88:
        local = f"{f}{la[0]}{birth_year}"
    else:
        local = _HANDLES[int(rnd() * len(_HANDLES))] + str(int(rnd() * 10_000))
    return f"{local}@{country.domains.pick(rnd())}"


def _customer(rng: Random, n: int, drift_at: int) -> Iterator[bytes]:
    """Yield ``n`` customer records: JSON, ~320 B mean before ``drift_at``, in sign-up order."""
    rnd = rng.random
    bits = rng.getrandbits
    tick = _clock(rng, mean_gap_ms=45_000.0)  # sign-ups, one every ~45 s
    uid_hi = _ids(rng, 64)
    encode = _json
    for i in range(n):
        created_ms = tick()
        hi = f"{uid_hi(i):016x}"
        lo = f"{bits(60):015x}"
        cid = f"{hi[:8]}-{hi[8:12]}-4{lo[:3]}-{'89ab'[int(rnd() * 4)]}{lo[3:6]}-{hi[12:]}{lo[6:14]}"
        country = _COUNTRIES[int(_COUNTRY.pick(rnd()))]
        first = country.first.pick(rnd())
        last = country.last.pick(rnd())
        birth_year = 1950 + int((rnd() + rnd()) * 27)  # triangular around the mid-1970s
        email = _email(rnd, first, last, country, birth_year)
        if rnd() < 0.08:
            email = email.capitalize()  # some people type their address capitalised
        city, prefix = country.cities.pick(rnd()).split("|")
        street = country.street(country.streets.pick(rnd()), _house(rnd), rnd)
        apartment = country.apartment(rnd)
        postal = country.postal(prefix, rnd)
        phone = country.phone(rnd) if rnd() < 0.62 else None
        tier = _TIERS.pick(rnd())
        u = rnd()
        n_tags = 0 if u < 0.35 else 1 if u < 0.68 else 2 if u < 0.86 else 3 + int((u - 0.86) * 30)
        tags: list[str] = []
        for _ in range(n_tags):
            tag = _TAGS.pick(rnd())
            if tag not in tags:
                tags.append(tag)
        email_ok = rnd() < 0.7
        sms_ok = rnd() < 0.25
        app_user = rnd() < 0.4
        push_ok = app_user and rnd() < 0.6
        birth = (
            f"{birth_year}-{1 + int(rnd() * 12):02d}-{1 + int(rnd() * 28):02d}"
            if rnd() < 0.25
            else None
        )
        company = (
            _COMPANY_WORDS[int(rnd() * len(_COMPANY_WORDS))] + _COMPANY_SUFFIX[country.code]
            if rnd() < 0.07
            else None
        )
        rec: dict[str, object]
        if i < drift_at:
            address: dict[str, object] = {"street": street}
            if apartment is not None:
                address["line2"] = apartment
            address["city"] = city
            address["zip"] = postal
            address["country"] = country.code
            rec = {"id": cid, "name": f"{first} {last}", "email": email}
            if phone is not None:
                rec["phone"] = phone
            rec["address"] = address
            if company is not None:
                rec["company"] = company
            if birth is not None:
                rec["birth_date"] = birth
            rec["locale"] = country.locale
            rec["created_at"] = _iso_s(created_ms)
            if tier != "standard":  # loyalty members only
                rec["tier"] = tier
            rec["marketing"] = [
                c for c, ok in (("email", email_ok), ("sms", sms_ok), ("push", push_ok)) if ok
            ]
            rec["tags"] = tags
        else:
            # v2: camelCase, split name, typed address and phone lists, a loyalty object with
            # a renamed tier set, consents as an object, an explicit schema version.
            addr2: dict[str, object] = {"type": "billing", "line1": street}
            if apartment is not None:
                addr2["line2"] = apartment
            addr2.update(city=city, postalCode=postal, countryCode=country.code)
            rec = {
                "id": cid,
                "firstName": first,
                "lastName": last,
                "email": email.lower(),
                "emailVerified": email_ok or rnd() < 0.5,
                "phones": [] if phone is None else [{"type": "mobile", "number": phone}],
                "addresses": [addr2],
                "preferredLocale": country.locale,
                "createdAt": _iso_ms(created_ms),
                "loyalty": {"tier": _TIERS_V2[tier], "points": int(rnd() * rnd() * 5000)},
                "consents": {"email": email_ok, "sms": sms_ok, "push": push_ok},
                "tags": tags,
                "schemaVersion": 2,
            }
            if company is not None:
                rec["companyName"] = company
            if birth is not None:
                rec["dateOfBirth"] = birth
        yield encode(rec)


# --------------------------------------------------------------------------------------------
# order
# --------------------------------------------------------------------------------------------

_ORDER_STATUS = _weighted([("placed", 0.86), ("paid", 0.09), ("pending_payment", 0.05)])
_SHIPPING = _weighted([("standard", 0.7), ("express", 0.2), ("pickup", 0.1)])
# Fields of a product view that belong to the viewing, not to the product ordered.
_VIEW_ONLY = frozenset(("event_id", "ts", "s", "u", "d", "r", "cmp", "ab"))
_VIEW_ONLY_V2 = frozenset(("event", "event_id", "timestamp", "user", "context", "referrer"))


def _order(rng: Random, n: int, drift_at: int) -> Iterator[bytes]:
    """Yield ``n`` orders: JSON, ~500 B mean: the buyer (a record as `customer` makes them) and
    one to four line items (products as `product_viewed` shows them, with a quantity).

    The buyer's id is the order's ``id`` (unique: customer ids are). After ``drift_at`` the
    buyer and the items have their v2 schemas."""
    rnd = rng.random
    buyers = _customer(Random(rng.getrandbits(64)), n, drift_at)
    # Products drift with the order: the view stream switches once the orders have.
    views = _product_viewed(Random(rng.getrandbits(64)), 4 * n, 4 * drift_at)
    decode = json.loads
    encode = _json
    for i in range(n):
        buyer = decode(next(buyers))
        oid = buyer.pop("id")
        drifted = i >= drift_at
        view_only = _VIEW_ONLY_V2 if drifted else _VIEW_ONLY
        items: list[dict[str, object]] = []
        for _ in range(1 + int(rnd() * 4)):
            view = decode(next(views))
            item = {k: v for k, v in view.items() if k not in view_only}
            item["q"] = 1 + int(rnd() * rnd() * 3)
            items.append(item)
        order: dict[str, object] = {
            "id": oid,
            "status": _ORDER_STATUS.pick(rnd()),
            "shipping": _SHIPPING.pick(rnd()),
            "buyer": buyer,
            "items": items,
        }
        if rnd() < 0.15:
            order["coupon"] = f"SAVE{5 * (1 + int(rnd() * 4))}"
        yield encode(order)


# --------------------------------------------------------------------------------------------
# access_log
# --------------------------------------------------------------------------------------------

_SITE = "https://shop.example"
_BOT_MARKERS = ("bot", "Bot", "spider", "externalhit", "Bytespider")
_SCRIPT_MARKERS = ("curl/", "python-requests", "Go-http-client", "Apache-HttpClient")
_APP_MARKERS = ("ShopApp/", "okhttp/", "Dalvik/")
# Plausible first octets of consumer, mobile and cloud address space.
_OCTETS = tuple(
    int(x)
    for x in _words(
        "24 31 37 46 47 62 66 68 71 73 76 77 79 80 81 82 84 85 86 87 88 89 90 91 92 93 94 95 98 99 "
        "104 108 109 141 151 173 174 176 178 185 188 193 194 195 212 213 217"
    )
)
_V6_PREFIXES = _words("2a02:8109 2a01:cb00 2003:e8 2a00:23c5 2600:1700 2a01:e0a 2001:1c00")
# Crawlers come from their operators' networks ("a.b." prefixes get a random third octet).
_BOT_NETS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Googlebot", ("66.249.66.", "66.249.79.")),
    ("bingbot", ("40.77.167.", "157.55.39.")),
    ("YandexBot", ("5.255.231.", "213.180.203.")),
    ("AhrefsBot", ("54.36.148.", "5.39.1.")),
    ("facebookexternalhit", ("31.13.127.", "69.171.250.")),
    ("Bytespider", ("47.128.",)),
    ("Twitterbot", ("199.16.157.",)),
    ("Slackbot", ("3.93.", "54.209.")),
)
_ADJECTIVES = _words(
    "classic ultra slim wireless organic vintage pro mini premium waterproof everyday compact soft "
    "smart retro"
)
_NOUNS = _words(
    "sneaker hoodie desk-lamp headphones backpack blender midi-dress watch sofa rain-jacket kettle "
    "yoga-mat t-shirt drill stroller phone-case duvet jeans speaker cookware-set"
)
_ASSETS: tuple[tuple[str, int], ...] = (  # (path, size in bytes), built once per release
    ("/static/js/app.3f9a1c7e.js", 412_337),
    ("/static/js/vendor.b81d2e04.js", 938_204),
    ("/static/css/main.5c0e9a21.css", 88_113),
    ("/static/js/runtime.0d4e6f1a.js", 3_911),
    ("/static/fonts/inter-var.woff2", 97_452),
    ("/favicon.ico", 15_086),
    ("/static/img/logo.svg", 4_391),
    ("/static/js/chunk-pdp.77ac03b9.js", 61_248),
)
_ASSET = _zipf([str(i) for i in range(len(_ASSETS))], shift=1.0)
_API_CALLS: tuple[tuple[str, str, int, int], ...] = (  # method, path template, min/max bytes
    ("GET", "/api/v2/recommendations?product={pid}&limit=12", 2_400, 9_800),
    ("GET", "/api/v2/products/{pid}", 900, 4_600),
    ("POST", "/api/v2/events", 0, 2),
    ("GET", "/api/v2/cart", 120, 3_100),
    ("POST", "/api/v2/cart/items", 180, 1_400),
    ("GET", "/api/v2/search?q={q}&page={page}", 3_000, 24_000),
    ("GET", "/api/v2/me", 300, 900),
    ("PUT", "/api/v2/cart/items/{item}", 150, 1_300),
    ("OPTIONS", "/api/v2/events", 0, 0),
    ("DELETE", "/api/v2/cart/items/{item}", 0, 0),
    ("GET", "/api/v2/stores?lat={lat}&lon={lon}", 800, 6_000),
)
_APP_UA = _zipf([ua for ua in USER_AGENTS if ua.startswith(_APP_MARKERS)], shift=1.0)
_API = _zipf([str(i) for i in range(len(_API_CALLS))], shift=1.0)
_SCANS = _words(
    "/wp-login.php /.env /admin/config.php /xmlrpc.php /.git/config "
    "/vendor/phpunit/phpunit/src/Util/PHP/eval-stdin.php /cgi-bin/luci"
)


class _Client:
    """One client address and user agent issuing a run of requests."""

    __slots__ = ("ip", "kind", "page", "proto", "ua", "user", "xff")

    def __init__(self, rnd: _Rnd) -> None:
        # The native app is a third of origin traffic; everything else follows the UA pool.
        self.ua = ua = _APP_UA.pick(rnd()) if rnd() < 0.3 else _UA.pick(rnd())
        if ua.startswith("kube-probe"):
            self.kind = "probe"
            self.ip = f"10.{int(rnd() * 4)}.{int(rnd() * 256)}.{1 + int(rnd() * 254)}"
        elif any(m in ua for m in _BOT_MARKERS):
            self.kind = "bot"
            nets = next((v for k, v in _BOT_NETS if k in ua), ("3.81.", "44.192."))
            net = nets[int(rnd() * len(nets))]
            if net.count(".") == 2:
                net += f"{int(rnd() * 256)}."
            self.ip = net + str(1 + int(rnd() * 254))
        else:
            self.kind = (
                "script"
                if any(m in ua for m in _SCRIPT_MARKERS)
                else "app"
                if any(m in ua for m in _APP_MARKERS)
                else "browser"
            )
            if rnd() < 0.06:
                prefix = _V6_PREFIXES[int(rnd() * len(_V6_PREFIXES))]
                self.ip = ":".join([prefix, *(f"{int(rnd() * 65536):x}" for _ in range(6))])
            else:
                self.ip = (
                    f"{_OCTETS[int(rnd() * len(_OCTETS))]}.{int(rnd() * 256)}."
                    f"{int(rnd() * 256)}.{1 + int(rnd() * 254)}"
                )
        # HTTP basic-auth users only show up for internal tooling.
        self.user = (
            ("jenkins", "deploy", "ops")[int(rnd() * 3)]
            if (self.kind == "script" and rnd() < 0.2)
            else "-"
        )
        self.page: str | None = None  # the page last viewed, the referrer of its assets
        self.proto = "HTTP/2.0" if self.kind == "browser" and rnd() < 0.7 else "HTTP/1.1"
        self.xff = "-" if rnd() < 0.7 else f"100.{64 + int(rnd() * 64)}.{int(rnd() * 256)}.1"


def _slug(pid: int) -> str:
    """A stable human-readable product URL slug."""
    h = _mix(pid, 64)
    return f"{_ADJECTIVES[h % len(_ADJECTIVES)]}-{_NOUNS[(h >> 8) % len(_NOUNS)]}-{pid}"


def _access_log(rng: Random, n: int, drift_at: int) -> Iterator[bytes]:
    """Yield ``n`` access-log lines, ~200 B mean before ``drift_at``.

    Before the drift: NCSA combined log format followed by the 32-hex request id in quotes
    (nginx ``... "$http_user_agent" "$request_id"``). After it: ISO-8601 times with
    milliseconds, timing and cache fields, and a JSON tail carrying the request id.
    """
    rnd = rng.random
    bits = rng.getrandbits
    tick = _clock(rng, mean_gap_ms=60.0)
    rid_hi = _ids(rng, 64)
    product = _catalogue(rng)
    max_clients = 40
    clients = [_Client(rnd) for _ in range(max_clients)]
    last_sec = -1
    when = ""

    for i in range(n):
        ts_ms = tick()
        u = rnd()
        if u < 0.07:
            c = clients[int(u * (max_clients / 0.07))] = _Client(rnd)
        else:
            c = clients[max_clients - 1 - int(u * u * (max_clients - 0.01))]
        method = "GET"
        referrer = "-"
        v = rnd()
        kind = c.kind
        if kind == "probe":
            path, status, size = "/healthz", 200, 2
        elif kind == "script" and v < 0.3:
            path = _SCANS[int(v * (len(_SCANS) / 0.3))]
            status, size = 404, 548 + int(rnd() * 3) * 11
            method = "POST" if path == "/xmlrpc.php" else "GET"
        elif kind in ("app", "script") or (kind == "browser" and c.page is not None and v < 0.2):
            m, template, lo, hi = _API_CALLS[int(_API.pick(rnd()))]
            method = m
            w = rnd()
            path = template.format(
                pid=product(int(w * w * w * 20_000))[0],
                q=_SEARCH.pick(rnd()),
                page=1 + int(w * w * 6),
                item=bits(24),
                lat=f"{47 + w * 8:.4f}",
                lon=f"{5 + rnd() * 10:.4f}",
            )
            size = lo + int(w * (hi - lo))
            s = rnd()
            status = (
                (204 if hi <= 2 else 200)
                if s < 0.93
                else (401 if s < 0.955 else 422 if s < 0.975 else 499 if s < 0.99 else 502)
            )
            if status in (401, 422):
                size = 96 + int(w * 60)
            elif status >= 499:
                size = 0 if status == 499 else 157
            if kind == "browser":
                referrer = c.page or "-"
        elif kind == "browser" and c.page is not None and v < 0.4:  # most assets hit the CDN
            a_path, a_size = _ASSETS[int(_ASSET.pick(rnd()))]
            if a_path.startswith("/static/img") or a_path == "/favicon.ico" or rnd() < 0.2:
                pid = product(int(rnd() * rnd() * 20_000))[0]
                a_path = f"/images/products/{pid}_{(320, 640, 1080)[pid % 3]}.webp"
                a_size = 6_000 + pid % 170_000
            path = a_path
            revisit = rnd() < 0.35
            status, size = (304, 0) if revisit else (200, a_size)
            referrer = c.page
        else:  # a page view
            w = rnd()
            if w < 0.5:
                pid = product(int(w * w * 4 * _CATALOGUE_SIZE) % _CATALOGUE_SIZE)[0]
                path = f"/products/{_slug(pid)}"
            elif w < 0.68:
                path = f"/c/{_CATEGORY.pick((w - 0.5) / 0.18)}"
                if rnd() < 0.3:
                    path += f"?sort={('price_asc', 'newest', 'rating')[int(rnd() * 3)]}"
            elif w < 0.82:
                path = f"/search?q={_SEARCH.pick(rnd())}"
                if rnd() < 0.25:
                    path += f"&page={2 + int(rnd() * 5)}"
            elif w < 0.9:
                path = "/"
            elif w < 0.94:
                path = ("/cart", "/checkout", "/account/orders", "/login")[int(rnd() * 4)]
            elif kind == "bot":
                path = "/robots.txt" if rnd() < 0.5 else "/sitemap.xml"
            else:
                path = f"/account/orders/{100_000_000 + int(rnd() * 900_000_000)}"
            s = rnd()
            if s < 0.92:
                status, size = 200, 18_000 + int(rnd() * rnd() * 90_000)
            elif s < 0.95:
                status, size = 301 if kind == "bot" else 302, 162
            elif s < 0.99:
                status, size = 404, 3_147 + int(rnd() * 400)
            else:
                status, size = 503 if s < 0.995 else 500, 497
            if path == "/robots.txt" and status == 200:
                size = 98
            if kind == "browser":
                referrer = c.page or (_EXT_REF.pick(rnd()) if rnd() < 0.6 else "-")
                c.page = _SITE + path
        rid = f"{rid_hi(i):016x}{bits(64):016x}"
        if ts_ms // 1000 != last_sec:
            last_sec = ts_ms // 1000
            when = _clf_time(ts_ms)
        if i < drift_at:
            line = (
                f'{c.ip} - {c.user} [{when}] "{method} {path} {c.proto}" {status} {size} '
                f'"{referrer}" "{c.ua}" "{rid}"'
            )
        else:
            t = rnd()
            rt = t * t * (2.5 if path.startswith("/api/v2/search") else 0.6)
            cached = path.startswith(("/static", "/images", "/favicon"))
            upstream = "-" if cached or kind == "probe" else f"{rt * 0.97:.3f}"
            cache = ("HIT" if rnd() < 0.9 else "MISS") if cached else "-"
            tls = "TLSv1.3" if rnd() < 0.8 else "TLSv1.2"
            line = (
                f'{c.ip} - {c.user} [{_iso_ms(ts_ms)}] "{method} {path} {c.proto}" {status} '
                f'{size} "{referrer}" "{c.ua}" rt={rt:.3f} urt={upstream} cache={cache} '
                f'{{"rid":"{rid}","host":"shop.example","tls":"{tls}","xff":"{c.xff}"}}'
            )
        yield line.encode()


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------

_GENERATORS: dict[str, Callable[[Random, int, int], Iterator[bytes]]] = {
    "product_viewed": _product_viewed,
    "customer": _customer,
    "access_log": _access_log,
    "order": _order,
}


def _check_count(name: str, value: object) -> int:
    """Return ``value`` if it is a non-negative int, else raise `InputError` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{name} must be an integer, got {value!r}")
    if value < 0:
        raise InputError(f"{name} must be ≥ 0, got {value}")
    return value


def generate(kind: str, n: int, seed: int = 0, drift_at: int | None = None) -> Iterator[bytes]:
    """Yield ``n`` encoded events of ``kind`` (UTF-8 bytes, no trailing newline).

    Kinds (see `KINDS`):

    * ``product_viewed`` — compact JSON product views, ~113 B mean (≈ 85–200 B): ``event_id``
      (12 hex), ``ts`` (ISO-8601, s), session ``s`` or user ``u``, product ``p``, sometimes
      category ``c``, price ``pr`` with currency ``cu`` (omitted for the base currency EUR), and
      on some events device ``d``, referrer ``r``, campaign ``cmp``, A/B bucket ``ab``.
    * ``customer`` — JSON customer sign-ups, ~320 B mean (≈ 250–470 B): ``id`` (UUID), name,
      email, phone, address, locale, ``created_at``, tier, marketing opt-ins, tags, …
    * ``access_log`` — NCSA combined-format lines plus a quoted 32-hex request id, ~230 B mean
      (≈ 125–430 B).
    * ``order`` — JSON orders, ~500 B mean: ``id``, ``status``, ``shipping``, the ``buyer`` (a
      ``customer`` record without its id), one to four ``items`` (a ``product_viewed`` event's
      product fields and a quantity ``q``), sometimes a ``coupon``.

    The output depends only on the arguments: the same ``(kind, n, seed, drift_at)`` gives
    byte-identical events on any machine, and the first ``k`` events do not depend on ``n``.
    Each event carries an id unique within the stream (see `extract_id`).

    :param kind: one of `KINDS`.
    :param n: number of events to yield, ≥ 0.
    :param seed: any int; different seeds give different, independent streams.
    :param drift_at: if given, events with index ≥ ``drift_at`` (0-based; i.e. after the
        ``drift_at``-th event) use a changed schema — renamed and nested fields, new enum
        values, for access logs another log format — so that a dictionary trained on earlier
        events compresses them worse. Events before it are identical to the no-drift stream.
    :raises InputError: unknown ``kind``; ``n`` or ``drift_at`` negative or not an int.
    """
    try:
        make = _GENERATORS[kind]
    except (KeyError, TypeError):
        raise InputError(f"unknown event kind {kind!r}; valid kinds: {', '.join(KINDS)}") from None
    count = _check_count("n", n)
    drift = count if drift_at is None else min(_check_count("drift_at", drift_at), count)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InputError(f"seed must be an integer, got {seed!r}")
    # `Random` seeds with abs(seed), so fold negatives onto odd numbers first; mixing in the
    # kind keeps the three streams of one seed unrelated.
    folded = 2 * seed if seed >= 0 else -2 * seed - 1
    if kind in _FIRST_KINDS:
        return make(Random(folded * len(_FIRST_KINDS) + _FIRST_KINDS.index(kind)), count, drift)
    # Kinds added later seed from a string: the streams of the first three stay as they were.
    return make(Random(f"{kind}/{folded}"), count, drift)


#: The kinds whose seeds are mixed as integers (their streams are pinned by digests).
_FIRST_KINDS: tuple[str, ...] = ("product_viewed", "customer", "access_log")

_REQUEST_ID = re.compile(rb'"([0-9a-f]{32})"')


def extract_id(kind: str, event: bytes) -> str:
    """Return the unique id embedded in an ``event`` produced by `generate` for ``kind``.

    ``product_viewed``: the ``event_id`` field; ``customer`` and ``order``: the ``id`` field;
    ``access_log``:
    the 32-hex request id (the quoted last field, or ``"rid"`` in the JSON tail after a drift).

    :raises InputError: unknown ``kind``, or no id found in ``event``.
    """
    if kind not in _GENERATORS:
        raise InputError(f"unknown event kind {kind!r}; valid kinds: {', '.join(KINDS)}")
    if kind == "access_log":
        m = _REQUEST_ID.search(event)
        if m is None:
            raise InputError(f"no request id in access_log line {event[:80]!r}")
        return m.group(1).decode()
    field = "event_id" if kind == "product_viewed" else "id"
    try:
        value = json.loads(event)[field]
    except (ValueError, TypeError, KeyError) as exc:
        raise InputError(f"no {field!r} in {kind} event {event[:80]!r}") from exc
    if not isinstance(value, str):
        raise InputError(f"{field!r} of {kind} event is not a string: {value!r}")
    return value
