"""``access_log``: nginx access-log lines of a shop, from browsers, the app, scripts and bots.

Before a drift: NCSA combined log format followed by the 32-hex request id in quotes
(nginx ``... "$http_user_agent" "$request_id"``). After it: ISO-8601 times with milliseconds,
timing and cache fields, and a JSON tail carrying the request id.
"""

from collections.abc import Callable, Iterator
from random import Random

from sidecar.bench.events.catalogue import CATALOGUE_SIZE, CATEGORY, catalogue
from sidecar.bench.events.primitives import Rnd, clf_time, clock, ids, iso_ms, mix, words, zipf
from sidecar.bench.events.web import EXTERNAL_REFERRER, SEARCH_TERM, USER_AGENT, USER_AGENTS

__all__ = ["access_log_events"]

_SITE = "https://shop.example"
_BOT_MARKERS = ("bot", "Bot", "spider", "externalhit", "Bytespider")
_SCRIPT_MARKERS = ("curl/", "python-requests", "Go-http-client", "Apache-HttpClient")
_APP_MARKERS = ("ShopApp/", "okhttp/", "Dalvik/")
# Plausible first octets of consumer, mobile and cloud address space.
_OCTETS = tuple(
    int(x)
    for x in words(
        "24 31 37 46 47 62 66 68 71 73 76 77 79 80 81 82 84 85 86 87 88 89 90 91 92 93 94 95 98 99 "
        "104 108 109 141 151 173 174 176 178 185 188 193 194 195 212 213 217"
    )
)
_V6_PREFIXES = words("2a02:8109 2a01:cb00 2003:e8 2a00:23c5 2600:1700 2a01:e0a 2001:1c00")
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
_ADJECTIVES = words(
    "classic ultra slim wireless organic vintage pro mini premium waterproof everyday compact soft "
    "smart retro"
)
_NOUNS = words(
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
_ASSET = zipf([str(i) for i in range(len(_ASSETS))], shift=1.0)
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
_APP_UA = zipf([ua for ua in USER_AGENTS if ua.startswith(_APP_MARKERS)], shift=1.0)
_API = zipf([str(i) for i in range(len(_API_CALLS))], shift=1.0)
_SCANS = words(
    "/wp-login.php /.env /admin/config.php /xmlrpc.php /.git/config "
    "/vendor/phpunit/phpunit/src/Util/PHP/eval-stdin.php /cgi-bin/luci"
)


class _Client:
    """One client address and user agent issuing a run of requests."""

    __slots__ = ("ip", "kind", "page", "proto", "ua", "user", "xff")

    def __init__(self, rnd: Rnd) -> None:
        # The native app is a third of origin traffic; everything else follows the UA pool.
        self.ua = ua = _APP_UA.pick(rnd()) if rnd() < 0.3 else USER_AGENT.pick(rnd())
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
    h = mix(pid, 64)
    return f"{_ADJECTIVES[h % len(_ADJECTIVES)]}-{_NOUNS[(h >> 8) % len(_NOUNS)]}-{pid}"


_Product = Callable[[int], tuple[int, str, int]]
"""A stream's catalogue: popularity rank → (product id, category, USD price in cents)."""
_Request = tuple[str, str, int, int, str]
"""What one line records of a request: method, path, status, response bytes, referrer."""


def access_log_events(rng: Random, n: int, drift_at: int) -> Iterator[bytes]:
    """Yield ``n`` access-log lines, ~200 B mean before ``drift_at`` (formats: module docstring)."""
    rnd = rng.random
    bits = rng.getrandbits
    tick = clock(rng, mean_gap_ms=60.0)
    rid_hi = ids(rng, 64)
    product = catalogue(rng)
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
        request = _request(c, rnd, bits, product)
        rid = f"{rid_hi(i):016x}{bits(64):016x}"
        if ts_ms // 1000 != last_sec:
            last_sec = ts_ms // 1000
            when = clf_time(ts_ms)
        if i < drift_at:
            method, path, status, size, referrer = request
            line = (
                f'{c.ip} - {c.user} [{when}] "{method} {path} {c.proto}" {status} {size} '
                f'"{referrer}" "{c.ua}" "{rid}"'
            )
        else:
            line = _drifted_line(c, request, ts_ms, rid, rnd)
        yield line.encode()


def _request(c: _Client, rnd: Rnd, bits: Callable[[int], int], product: _Product) -> _Request:
    """The next request of client ``c``: what its kind (probe, script, app, browser, bot) asks."""
    v = rnd()
    kind = c.kind
    if kind == "probe":
        return "GET", "/healthz", 200, 2, "-"
    if kind == "script" and v < 0.3:
        path = _SCANS[int(v * (len(_SCANS) / 0.3))]
        size = 548 + int(rnd() * 3) * 11
        return ("POST" if path == "/xmlrpc.php" else "GET"), path, 404, size, "-"
    if kind in ("app", "script") or (kind == "browser" and c.page is not None and v < 0.2):
        return _api_call(c, rnd, bits, product)
    if kind == "browser" and c.page is not None and v < 0.4:  # most assets hit the CDN
        return _asset(c, rnd, product)
    return _page_view(c, rnd, product)


def _api_call(c: _Client, rnd: Rnd, bits: Callable[[int], int], product: _Product) -> _Request:
    """A JSON API call: the app's and scripts' traffic, and a browser page's own requests."""
    method, template, lo, hi = _API_CALLS[int(_API.pick(rnd()))]
    w = rnd()
    path = template.format(
        pid=product(int(w * w * w * 20_000))[0],
        q=SEARCH_TERM.pick(rnd()),
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
    referrer = (c.page or "-") if c.kind == "browser" else "-"
    return method, path, status, size, referrer


def _asset(c: _Client, rnd: Rnd, product: _Product) -> _Request:
    """A static asset or product image of the page the browser ``c`` viewed last."""
    a_path, a_size = _ASSETS[int(_ASSET.pick(rnd()))]
    if a_path.startswith("/static/img") or a_path == "/favicon.ico" or rnd() < 0.2:
        pid = product(int(rnd() * rnd() * 20_000))[0]
        a_path = f"/images/products/{pid}_{(320, 640, 1080)[pid % 3]}.webp"
        a_size = 6_000 + pid % 170_000
    revisit = rnd() < 0.35
    status, size = (304, 0) if revisit else (200, a_size)
    return "GET", a_path, status, size, c.page or "-"


def _page_view(c: _Client, rnd: Rnd, product: _Product) -> _Request:
    """A page: product, category, search, home, account; a browser remembers it as its page."""
    path = _page_path(c.kind, rnd, product)
    status, size = _page_status(c.kind, rnd)
    if path == "/robots.txt" and status == 200:
        size = 98
    referrer = "-"
    if c.kind == "browser":
        referrer = c.page or (EXTERNAL_REFERRER.pick(rnd()) if rnd() < 0.6 else "-")
        c.page = _SITE + path
    return "GET", path, status, size, referrer


def _page_path(kind: str, rnd: Rnd, product: _Product) -> str:
    """The path of a page a client of `kind` asks for."""
    w = rnd()
    if w < 0.5:
        pid = product(int(w * w * 4 * CATALOGUE_SIZE) % CATALOGUE_SIZE)[0]
        path = f"/products/{_slug(pid)}"
    elif w < 0.68:
        path = f"/c/{CATEGORY.pick((w - 0.5) / 0.18)}"
        if rnd() < 0.3:
            path += f"?sort={('price_asc', 'newest', 'rating')[int(rnd() * 3)]}"
    elif w < 0.82:
        path = f"/search?q={SEARCH_TERM.pick(rnd())}"
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
    return path


def _page_status(kind: str, rnd: Rnd) -> tuple[int, int]:
    """A page's (status, response bytes): mostly 200, some redirects, 404s and 5xx."""
    s = rnd()
    if s < 0.92:
        return 200, 18_000 + int(rnd() * rnd() * 90_000)
    if s < 0.95:
        return 301 if kind == "bot" else 302, 162
    if s < 0.99:
        return 404, 3_147 + int(rnd() * 400)
    return 503 if s < 0.995 else 500, 497


def _drifted_line(c: _Client, request: _Request, ts_ms: int, rid: str, rnd: Rnd) -> str:
    """The line after the drift: millisecond time, timings, cache status and a JSON tail."""
    method, path, status, size, referrer = request
    t = rnd()
    rt = t * t * (2.5 if path.startswith("/api/v2/search") else 0.6)
    cached = path.startswith(("/static", "/images", "/favicon"))
    upstream = "-" if cached or c.kind == "probe" else f"{rt * 0.97:.3f}"
    cache = ("HIT" if rnd() < 0.9 else "MISS") if cached else "-"
    tls = "TLSv1.3" if rnd() < 0.8 else "TLSv1.2"
    return (
        f'{c.ip} - {c.user} [{iso_ms(ts_ms)}] "{method} {path} {c.proto}" {status} '
        f'{size} "{referrer}" "{c.ua}" rt={rt:.3f} urt={upstream} cache={cache} '
        f'{{"rid":"{rid}","host":"shop.example","tls":"{tls}","xff":"{c.xff}"}}'
    )
