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

Modules: `primitives` (skewed choices, ids, clocks, timestamps, the JSON encoder), `web`
(user agents, search terms, referrers), `catalogue` (products), `people` (names, addresses,
phones by country), and one per kind: `product_viewed`, `customer`, `order`, `access_log`.
"""

import json
import re
from collections.abc import Callable, Iterator
from random import Random

from sidecar.bench.events.access_log import access_log_events
from sidecar.bench.events.customer import customer_events
from sidecar.bench.events.order import order_events
from sidecar.bench.events.product_viewed import product_viewed_events
from sidecar.errors import InputError

__all__ = ["KINDS", "extract_id", "generate"]

KINDS: tuple[str, ...] = ("product_viewed", "customer", "access_log", "order")
"""The event kinds `generate` knows, in documentation order."""

_GENERATORS: dict[str, Callable[[Random, int, int], Iterator[bytes]]] = {
    "product_viewed": product_viewed_events,
    "customer": customer_events,
    "access_log": access_log_events,
    "order": order_events,
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
