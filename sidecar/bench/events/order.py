"""``order``: JSON orders, a ``customer`` record as the buyer and ``product_viewed`` products as
line items."""

import json
from collections.abc import Iterator
from random import Random

from sidecar.bench.events.customer import customer_events
from sidecar.bench.events.primitives import encode_json, weighted
from sidecar.bench.events.product_viewed import product_viewed_events

__all__ = ["order_events"]

_ORDER_STATUS = weighted([("placed", 0.86), ("paid", 0.09), ("pending_payment", 0.05)])
_SHIPPING = weighted([("standard", 0.7), ("express", 0.2), ("pickup", 0.1)])
# Fields of a product view that belong to the viewing, not to the product ordered.
_VIEW_ONLY = frozenset(("event_id", "ts", "s", "u", "d", "r", "cmp", "ab"))
_VIEW_ONLY_V2 = frozenset(("event", "event_id", "timestamp", "user", "context", "referrer"))


def order_events(rng: Random, n: int, drift_at: int) -> Iterator[bytes]:
    """Yield ``n`` orders: JSON, ~500 B mean: the buyer (a record as `customer` makes them) and
    one to four line items (products as `product_viewed` shows them, with a quantity).

    The buyer's id is the order's ``id`` (unique: customer ids are). After ``drift_at`` the
    buyer and the items have their v2 schemas."""
    rnd = rng.random
    buyers = customer_events(Random(rng.getrandbits(64)), n, drift_at)
    # Products drift with the order: the view stream switches once the orders have.
    views = product_viewed_events(Random(rng.getrandbits(64)), 4 * n, 4 * drift_at)
    decode = json.loads
    encode = encode_json
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
