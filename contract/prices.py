"""What an instance-hour costs: the committed price table, the stack's own table and how to read both.

The control plane prices each run's compute time (`chalicelib.services.costs`) from the stack's table
when it has one, else from the table committed here. The stack keeps its own table current
(`chalicelib.services.prices`): once a day its sweep asks the AWS Price List API (`pricing:GetProducts`,
whose endpoint is in us-east-1) for the on-demand price of each instance type of the stack's pools, and
EC2 `DescribeSpotPriceHistory` for their spot price in the stack's region, and writes them to
`prices/ec2.json` in its bucket; where AWS does not answer, the committed table is used. ``STRATUS_PRICES``
(JSON, `table_from_json`) pins a table instead, for an operator who wants to.

An unknown instance type is priced at nothing and says so (`Price.known` is False): its time still
counts, its cost shows as unknown rather than as a guess.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

#: The instance type of a local agent (the embedded stack, a laptop): its time counts, at no price.
LOCAL = "local"
#: The committed table's date (us-east-1 Linux on-demand list prices, USD per hour).
COMMITTED_AS_OF = "2025-06"
#: With no spot price known, spot is estimated at this share of on-demand (EC2's spot discounts run 60-90%).
SPOT_ESTIMATE = 0.35

#: instance type: (on-demand USD per hour, GPUs). SageMaker's `ml.` types are priced as SageMaker sells them.
COMMITTED: dict[str, tuple[float, int]] = {
    LOCAL: (0.0, 0),
    "t3.medium": (0.0416, 0),
    "t3.large": (0.0832, 0),
    "m5.large": (0.096, 0),
    "m5.xlarge": (0.192, 0),
    "m5.2xlarge": (0.384, 0),
    "c5.xlarge": (0.17, 0),
    "c5.2xlarge": (0.34, 0),
    "g4dn.xlarge": (0.526, 1),
    "g4dn.2xlarge": (0.752, 1),
    "g4dn.12xlarge": (3.912, 4),
    "g5.xlarge": (1.006, 1),
    "g5.2xlarge": (1.212, 1),
    "g5.12xlarge": (5.672, 4),
    "g5.48xlarge": (16.288, 8),
    "g6.xlarge": (0.8048, 1),
    "g6.12xlarge": (4.6016, 4),
    "p3.2xlarge": (3.06, 1),
    "p3.8xlarge": (12.24, 4),
    "p3.16xlarge": (24.48, 8),
    "p4d.24xlarge": (32.7726, 8),
    "p5.48xlarge": (55.04, 8),
    "ml.m5.xlarge": (0.23, 0),
    "ml.g4dn.xlarge": (0.7364, 1),
    "ml.g5.xlarge": (1.408, 1),
    "ml.g5.2xlarge": (1.515, 1),
    "ml.p3.2xlarge": (3.825, 1),
    "ml.p4d.24xlarge": (37.688, 8),
}


@dataclass(frozen=True)
class InstancePrice:
    """One instance type in a price table: on-demand and spot USD per hour (None: not known)."""

    on_demand: float | None
    spot: float | None = None
    gpus: int | None = None


@dataclass(frozen=True)
class PriceTable:
    """A stack's prices, where they came from and when (`source`: "price-list" or "committed")."""

    prices: dict[str, InstancePrice]
    source: str = "committed"
    as_of: str = COMMITTED_AS_OF

    def to_json(self) -> str:
        body = {
            "source": self.source,
            "as_of": self.as_of,
            "prices": {
                name: {k: v for k, v in vars(p).items() if v is not None} for name, p in self.prices.items()
            },
        }
        return json.dumps(body, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Price:
    """What an instance-hour of one type costs a run, and where the number came from."""

    usd_per_hour: float
    source: str
    known: bool = True


def committed_table() -> PriceTable:
    return PriceTable({name: InstancePrice(usd, gpus=gpus) for name, (usd, gpus) in COMMITTED.items()})


def table_from_json(text: str) -> PriceTable | None:
    """The stack's table as `PriceTable.to_json` wrote it; None for an empty or malformed one (the
    committed table then serves: a bad table must not stop runs from ending)."""
    try:
        body = json.loads(text) if text.strip() else None
        if not isinstance(body, dict) or not isinstance(body.get("prices"), dict):
            return None
        prices = {}
        for name, entry in body["prices"].items():
            prices[str(name)] = InstancePrice(
                on_demand=_number(entry.get("on_demand")),
                spot=_number(entry.get("spot")),
                gpus=int(entry["gpus"]) if isinstance(entry.get("gpus"), int) else None,
            )
        return PriceTable(prices, str(body.get("source") or "price-list"), str(body.get("as_of") or ""))
    except (ValueError, AttributeError, TypeError):
        return None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    number = float(value)
    return number if number >= 0 else None


def price_of(instance_type: str, spot: bool, stack: PriceTable | None = None) -> Price:
    """The price of an instance-hour: the stack's table first, then the committed one; spot from a
    table's spot price, else estimated from on-demand (`SPOT_ESTIMATE`, and the source says so). An
    unknown type costs 0 with ``known`` False, never an error."""
    for table in (stack, committed_table()):
        entry = table.prices.get(instance_type) if table is not None else None
        if entry is None:
            continue
        where = f"{table.source} {table.as_of}".strip()  # type: ignore[union-attr]
        if spot and entry.spot is not None:
            return Price(entry.spot, f"{where} spot")
        if entry.on_demand is None:
            continue
        if not spot:
            return Price(entry.on_demand, where)
        return Price(
            round(entry.on_demand * SPOT_ESTIMATE, 6), f"{where} spot estimated at {SPOT_ESTIMATE:.0%}"
        )
    return Price(0.0, f"unknown: no price for instance type {instance_type!r}", known=False)


def gpus_of(instance_type: str, stack: PriceTable | None = None) -> int | None:
    """The GPUs of an instance type, where a table knows them."""
    for table in (stack, committed_table()):
        entry = table.prices.get(instance_type) if table is not None else None
        if entry is not None and entry.gpus is not None:
            return entry.gpus
    return None
