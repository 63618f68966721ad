"""The port to AWS's prices and the stack's stored price table (`chalicelib.services.prices` uses it;
`chalicelib.aws.prices` speaks to the Price List API, EC2 and S3; `chalicelib.memory` keeps what it is
given)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from chalicelib.domain.price_table import OnDemandQuote, SpotQuote


class PriceSource(Protocol):
    """AWS's prices for instance types, and the stack's stored table. Every method raises
    `PriceFetchError` when AWS does not answer."""

    def on_demand(self, instance_types: Sequence[str]) -> dict[str, OnDemandQuote]:
        """The Price List's on-demand Linux price of each type in the stack's region (types it does
        not know are left out)."""
        ...

    def spot_history(self, instance_types: Sequence[str], since: float) -> list[SpotQuote]:
        """EC2's Linux/UNIX spot price history of the types in the stack's region since `since` (epoch s)."""
        ...

    def read(self) -> bytes | None:
        """The stored table (`price_table.PRICES_KEY`); None when there is none."""
        ...

    def write(self, body: bytes) -> None: ...
