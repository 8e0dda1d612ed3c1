"""The web traffic product views and access logs share: user agents, search terms, referrers."""

from sidecar.bench.events.primitives import words, zipf

__all__ = [
    "EXTERNAL_REFERRER",
    "EXTERNAL_REFERRERS",
    "SEARCH_TERM",
    "SEARCH_TERMS",
    "USER_AGENT",
    "USER_AGENTS",
]

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
USER_AGENT = zipf(USER_AGENTS, shift=1.5)

SEARCH_TERMS: tuple[str, ...] = words(
    "sneakers running+shoes iphone+15+case air+fryer lego usb-c+kabel bluetooth+kopfh%C3%B6rer "
    "robe+d%27%C3%A9t%C3%A9 gaming+chair yoga+mat winter+jacket standing+desk nintendo+switch "
    "coffee+grinder zapatillas+mujer smartwatch backpack led+strip mechanical+keyboard dog+bed "
    "sunglasses bettw%C3%A4sche 4k+monitor perfume cast+iron+pan phone+charger jeans+men "
    "baby+stroller garden+hose vitamin+d tenda+campeggio wireless+earbuds"
)
SEARCH_TERM = zipf(SEARCH_TERMS, shift=2.0)

EXTERNAL_REFERRERS: tuple[str, ...] = words(
    "https://www.google.com/ https://www.google.de/ https://l.instagram.com/ https://www.bing.com/ "
    "https://t.co/ https://www.facebook.com/ https://duckduckgo.com/ "
    "android-app://com.google.android.gm/ https://www.google.co.uk/ https://www.pinterest.com/ "
    "https://www.google.fr/ https://search.yahoo.com/ https://www.reddit.com/ "
    "https://lm.facebook.com/ https://www.youtube.com/ https://www.idealo.de/ "
    "https://www.ecosia.org/ https://news.ycombinator.com/"
)
EXTERNAL_REFERRER = zipf(EXTERNAL_REFERRERS, shift=1.0)
