"""The stack's own price table (`prices/ec2.json` in its bucket): what AWS said an instance-hour of each
of the pools' instance types costs, when it said so and where each number came from. Pure: building the
document from what AWS answered, reading it back as a `stratus.contract.prices.PriceTable`, and deciding when it
is due for a refresh. `chalicelib.services.prices` fetches and stores it.

The document::

    {"region": "us-east-1", "fetched_at": "2026-01-05T00:00:00.000Z", "checked_at": "...", "error": null,
     "prices": {"g5.xlarge": {"on_demand": 1.006, "spot": 0.41, "gpus": 1,
                              "sources": {"on_demand": "price-list", "spot": "spot-history, median of 4 zones"}}}}

``fetched_at`` is when the prices were last fetched; ``checked_at`` when a refresh was last tried (a
failed one keeps the prices it had and says why in ``error``). A type AWS gave no on-demand price for has
``on_demand`` null: the committed table prices it (`stratus.contract.prices.price_of` reads the stack's table
first, then the committed one, then prices the type at 0 as unknown).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from chalicelib.errors import StratusError
from stratus.contract.prices import InstancePrice, PriceTable

#: Where the stack keeps its table, in its bucket.
PRICES_KEY = "prices/ec2.json"
#: A table this old is fetched again (from the stack-wide sweep).
REFRESH_AFTER_S = 24 * 3600.0
#: After a refresh that failed, the next try waits this long (not every sweep: one warning an hour at most).
RETRY_AFTER_S = 3600.0
#: The source of an on-demand price that came from the AWS Price List API.
PRICE_LIST = "price-list"


class PriceFetchError(StratusError):
    """AWS's prices could not be read (no permission, no endpoint, no network, an answer not understood).
    Never an API answer: the sweep catches it and the committed table serves."""

    code = "PricesUnavailable"
    status = 503


@dataclass(frozen=True)
class OnDemandQuote:
    """The Price List's on-demand Linux price of an instance type, and its GPUs where it says."""

    usd_per_hour: float
    gpus: int | None = None


@dataclass(frozen=True)
class SpotQuote:
    """One entry of EC2's spot price history: a type's price in one availability zone from `at` (ISO)."""

    instance_type: str
    zone: str
    usd_per_hour: float
    at: str


@dataclass(frozen=True)
class StoredPrices:
    """The document as read back (see the module's docstring)."""

    region: str
    fetched_at: str | None
    checked_at: str | None
    error: str | None = None
    prices: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> bytes:
        body = {
            "region": self.region,
            "fetched_at": self.fetched_at,
            "checked_at": self.checked_at,
            "error": self.error,
            "prices": self.prices,
        }
        return json.dumps(body, sort_keys=True, indent=1).encode()


def spot_medians(quotes: Iterable[SpotQuote]) -> dict[str, tuple[float, int]]:
    """Each type's spot price: the latest quote of each zone, then the median over the zones (with the
    number of zones). The history of the last hour holds several quotes per zone; the latest is the price."""
    latest: dict[tuple[str, str], SpotQuote] = {}
    for quote in quotes:
        key = (quote.instance_type, quote.zone)
        if key not in latest or _epoch(quote.at) >= _epoch(latest[key].at):
            latest[key] = quote
    by_type: dict[str, list[float]] = {}
    for (kind, _), quote in sorted(latest.items()):
        by_type.setdefault(kind, []).append(quote.usd_per_hour)
    return {kind: (statistics.median(usd), len(usd)) for kind, usd in by_type.items()}


def build(
    region: str,
    now_iso: str,
    instance_types: Iterable[str],
    on_demand: Mapping[str, OnDemandQuote],
    spot: Iterable[SpotQuote],
    errors: Iterable[str] = (),
    previous: StoredPrices | None = None,
) -> StoredPrices:
    """The document from what AWS answered now. A type neither answer priced keeps what ``previous``
    had for it; with nothing fetched at all, the document is ``previous`` (or an empty one) marked as
    checked now, with the errors."""
    medians = spot_medians(spot)
    why = "; ".join(errors) or None
    old = previous.prices if previous is not None and previous.region == region else {}
    prices: dict[str, dict[str, Any]] = {}
    for kind in sorted(set(instance_types)):
        quote, median = on_demand.get(kind), medians.get(kind)
        if quote is None and median is None:
            if kind in old:
                prices[kind] = old[kind]
            continue
        sources: dict[str, str] = {}
        entry: dict[str, Any] = {"on_demand": None, "spot": None, "sources": sources}
        if quote is not None:
            entry["on_demand"], sources["on_demand"] = quote.usd_per_hour, PRICE_LIST
            if quote.gpus is not None:
                entry["gpus"] = quote.gpus
        if median is not None:
            entry["spot"] = round(median[0], 6)
            sources["spot"] = f"spot-history, median of {median[1]} zone{'s' if median[1] != 1 else ''}"
        prices[kind] = entry
    fetched = bool(on_demand) or bool(medians)
    fetched_at = now_iso if fetched else (previous.fetched_at if previous is not None else None)
    return StoredPrices(region, fetched_at, now_iso, why, prices)


def parse(body: bytes | str | None) -> StoredPrices | None:
    """The document as `StoredPrices.to_json` wrote it; None when missing or malformed (the committed
    table then serves: a bad table must not stop a run from being priced)."""
    try:
        doc = json.loads(body) if body else None
        if not isinstance(doc, dict) or not isinstance(doc.get("prices"), dict):
            return None
        prices = {str(k): dict(v) for k, v in doc["prices"].items() if isinstance(v, dict)}
        return StoredPrices(
            region=str(doc.get("region") or ""),
            fetched_at=_text(doc.get("fetched_at")),
            checked_at=_text(doc.get("checked_at")),
            error=_text(doc.get("error")),
            prices=prices,
        )
    except (ValueError, TypeError, AttributeError):
        return None


def to_table(stored: StoredPrices | None) -> PriceTable | None:
    """The prices as `stratus.contract.prices.price_of` reads them ("price-list <date>"); None with none."""
    if stored is None or not stored.prices:
        return None
    prices = {
        kind: InstancePrice(
            on_demand=_usd(entry.get("on_demand")),
            spot=_usd(entry.get("spot")),
            gpus=entry["gpus"] if isinstance(entry.get("gpus"), int) else None,
        )
        for kind, entry in stored.prices.items()
    }
    return PriceTable(prices, PRICE_LIST, (stored.fetched_at or "")[:10])


def refresh_due(stored: StoredPrices | None, region: str, now: float) -> bool:
    """Whether the sweep fetches the prices again: none stored, another region's, or checked more than
    `REFRESH_AFTER_S` ago (`RETRY_AFTER_S` after a failed try)."""
    if stored is None or stored.region != region or not stored.checked_at:
        return True
    wait = RETRY_AFTER_S if stored.error else REFRESH_AFTER_S
    return now - _epoch(stored.checked_at) >= wait


def _epoch(iso: str) -> float:
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _text(value: object) -> str | None:
    return str(value) if value is not None else None


def _usd(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value >= 0 else None
