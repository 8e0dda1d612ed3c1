"""The shop's products: categories (and their drifted taxonomy), price bands, a stable catalogue.

A product always has the same category and price within a stream; product views, orders and
access logs draw from the same catalogue, popular products most often.
"""

from collections.abc import Callable
from random import Random

from sidecar.bench.events.primitives import hash_unit, words, zipf

__all__ = ["CATALOGUE_SIZE", "CATEGORIES", "CATEGORIES_V2", "CATEGORY", "catalogue"]

CATEGORIES: tuple[str, ...] = words(
    "fashion electronics home beauty shoes sports toys books kitchen garden health jewelry "
    "video_games pet_supplies baby office automotive tools music grocery"
)
CATEGORY = zipf(CATEGORIES, shift=2.0)

# After a drift the catalogue uses a hierarchical taxonomy: a new enum value set.
CATEGORIES_V2: dict[str, tuple[str, ...]] = {
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
#: Popularity ranks of the products a stream's catalogue has.
CATALOGUE_SIZE = 60_000


def catalogue(rng: Random) -> Callable[[int], tuple[int, str, int]]:
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
        cat = CATEGORY.pick(hash_unit(pid ^ key))
        lo, hi = _PRICE_BAND[cat]
        f = hash_unit(pid + key)
        cents = lo + int((hi - lo) * f * f * f)  # cheap items dominate each band
        cache[rank] = hit = (pid, cat, cents)
        return hit

    return product
