"""The primitives every event kind draws with: skewed choices, bijective ids, clocks, timestamps.

Determinism rests here: only `Random.random` and `Random.getrandbits` are drawn, combined with
integer and IEEE-754 ``+ - * /`` arithmetic (no libm transcendental functions, no wall clock), so
a stream depends on its seed alone, on any machine and CPython ≥ 3.11.
"""

import json
from bisect import bisect
from collections.abc import Callable, Sequence
from datetime import date, timedelta
from functools import lru_cache
from random import Random

__all__ = [
    "Distribution",
    "Rnd",
    "clf_time",
    "clock",
    "encode_json",
    "hash_unit",
    "ids",
    "iso_ms",
    "iso_s",
    "mix",
    "weighted",
    "words",
    "zipf",
]


class Distribution:
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


def zipf(values: Sequence[str], shift: float = 1.0) -> Distribution:
    """Zipf–Mandelbrot weights ``1 / (rank + shift)``, most frequent value first.

    Plain division (no `pow`) keeps the weights bit-identical on every platform.
    """
    return Distribution(values, [1.0 / (rank + shift) for rank in range(1, len(values) + 1)])


def words(text: str, sep: str | None = None) -> tuple[str, ...]:
    """The words of ``text`` split on ``sep`` (default whitespace): compact vocabularies."""
    return tuple(text.split(sep))


def weighted(pairs: Sequence[tuple[str, float]]) -> Distribution:
    """A `Distribution` from explicit ``(value, weight)`` pairs."""
    return Distribution([v for v, _ in pairs], [w for _, w in pairs])


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


encode_json = _make_json_encoder()


def mix(x: int, bits: int) -> int:
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


def hash_unit(x: int) -> float:
    """A stable pseudo-random float in ``[0, 1)`` derived from integer ``x``."""
    return (mix(x, 64) >> 11) * (1.0 / (1 << 53))


Rnd = Callable[[], float]
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


def iso_s(ms: int) -> str:
    """ISO-8601 UTC timestamp with second precision, e.g. ``2024-03-07T14:02:11Z``."""
    day, rem = divmod(ms, _MS_PER_DAY)
    s = rem // 1000
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{_iso_day(day)}T{h:02d}:{m:02d}:{s:02d}Z"


def iso_ms(ms: int) -> str:
    """ISO-8601 timestamp with millisecond precision and offset, ``…T14:02:11.482+00:00``."""
    day, rem = divmod(ms, _MS_PER_DAY)
    s, milli = divmod(rem, 1000)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{_iso_day(day)}T{h:02d}:{m:02d}:{s:02d}.{milli:03d}+00:00"


def clf_time(ms: int) -> str:
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


def clock(rng: Random, mean_gap_ms: float) -> Callable[[], int]:
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


def ids(rng: Random, bits: int) -> Callable[[int], int]:
    """Map event index ``i`` to a ``bits``-bit id, unique for every ``i < 2**bits``."""
    key = rng.getrandbits(bits)
    mask = (1 << bits) - 1

    def ident(i: int) -> int:
        return mix((i + key) & mask, bits)

    return ident
