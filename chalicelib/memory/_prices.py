"""AWS's prices in memory (`chalicelib.services.prices.PriceSource`): the prices a test sets, the calls
made, and the stored table's bytes. `unreachable` makes every AWS answer fail as a stack without the
Price List API (or its permission) fails."""

from __future__ import annotations

from collections.abc import Sequence

from chalicelib.domain.price_table import OnDemandQuote, PriceFetchError, SpotQuote


class MemoryPrices:
    def __init__(self) -> None:
        #: What the Price List answers, per instance type.
        self.on_demand_prices: dict[str, OnDemandQuote] = {}
        #: The spot price history (every quote; `spot_history` answers those of the types asked, since `since`).
        self.spot_quotes: list[SpotQuote] = []
        #: The stored table (`prices/ec2.json`), None until written.
        self.stored: bytes | None = None
        #: Why AWS does not answer (None: it does).
        self.unreachable: str | None = None
        #: Each call made: ("on_demand" | "spot_history" | "read" | "write", the types asked or ()).
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    def on_demand(self, instance_types: Sequence[str]) -> dict[str, OnDemandQuote]:
        self.calls.append(("on_demand", tuple(instance_types)))
        self._answer()
        return {k: self.on_demand_prices[k] for k in instance_types if k in self.on_demand_prices}

    def spot_history(self, instance_types: Sequence[str], since: float) -> list[SpotQuote]:
        self.calls.append(("spot_history", tuple(instance_types)))
        self._answer()
        return [q for q in self.spot_quotes if q.instance_type in instance_types]

    def read(self) -> bytes | None:
        self.calls.append(("read", ()))
        return self.stored

    def write(self, body: bytes) -> None:
        self.calls.append(("write", ()))
        self.stored = body

    def _answer(self) -> None:
        if self.unreachable is not None:
            raise PriceFetchError(self.unreachable)
