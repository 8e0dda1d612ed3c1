"""``customer``: JSON customer sign-ups (name, e-mail, phone, address, tier, consents, tags)."""

from collections.abc import Iterator
from random import Random

from sidecar.bench.events.people import COUNTRIES, COUNTRY, email_address, house
from sidecar.bench.events.primitives import (
    Rnd,
    clock,
    encode_json,
    ids,
    iso_ms,
    iso_s,
    weighted,
    words,
    zipf,
)

__all__ = ["customer_events"]

_TIERS = weighted([("standard", 48), ("silver", 26), ("gold", 15), ("platinum", 8), ("diamond", 3)])
_TIERS_V2 = {
    "standard": "basic",
    "silver": "plus",
    "gold": "premium",
    "platinum": "elite",
    "diamond": "elite",
}

_TAGS = zipf(
    words(
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
_COMPANY_WORDS = words(
    "Nordwind,Acme,Bluefield,Hansen & Co,Orbital,Greenleaf,Brightline,Delta Logistics,Studio Nove,"
    "Atlas,Kite Digital",
    ",",
)


def _tags(rnd: Rnd) -> list[str]:
    """A customer's tags: none for a third, up to a handful, each at most once."""
    u = rnd()
    n_tags = 0 if u < 0.35 else 1 if u < 0.68 else 2 if u < 0.86 else 3 + int((u - 0.86) * 30)
    tags: list[str] = []
    for _ in range(n_tags):
        tag = _TAGS.pick(rnd())
        if tag not in tags:
            tags.append(tag)
    return tags


def customer_events(rng: Random, n: int, drift_at: int) -> Iterator[bytes]:
    """Yield ``n`` customer records: JSON, ~320 B mean before ``drift_at``, in sign-up order."""
    rnd = rng.random
    bits = rng.getrandbits
    tick = clock(rng, mean_gap_ms=45_000.0)  # sign-ups, one every ~45 s
    uid_hi = ids(rng, 64)
    encode = encode_json
    for i in range(n):
        created_ms = tick()
        hi = f"{uid_hi(i):016x}"
        lo = f"{bits(60):015x}"
        cid = f"{hi[:8]}-{hi[8:12]}-4{lo[:3]}-{'89ab'[int(rnd() * 4)]}{lo[3:6]}-{hi[12:]}{lo[6:14]}"
        country = COUNTRIES[int(COUNTRY.pick(rnd()))]
        first = country.first.pick(rnd())
        last = country.last.pick(rnd())
        birth_year = 1950 + int((rnd() + rnd()) * 27)  # triangular around the mid-1970s
        email = email_address(rnd, first, last, country, birth_year)
        if rnd() < 0.08:
            email = email.capitalize()  # some people type their address capitalised
        city, prefix = country.cities.pick(rnd()).split("|")
        street = country.street(country.streets.pick(rnd()), house(rnd), rnd)
        apartment = country.apartment(rnd)
        postal = country.postal(prefix, rnd)
        phone = country.phone(rnd) if rnd() < 0.62 else None
        tier = _TIERS.pick(rnd())
        tags = _tags(rnd)
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
            rec["created_at"] = iso_s(created_ms)
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
                "createdAt": iso_ms(created_ms),
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
