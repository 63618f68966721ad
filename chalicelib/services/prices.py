"""The price table the stack keeps current: fetched from AWS once a day by the stack-wide sweep, kept in
its bucket (`prices/ec2.json`, `chalicelib.domain.price_table`), read when a run is priced.

- **Reading** (`stack_table`, from `chalicelib.services.costs` when a run ends): ``STRATUS_PRICES`` when
  the operator pinned a table (`Settings.prices`), else the stored table, read at most once an hour per
  Lambda container (`CACHE_S`); per type, what it lacks comes from the committed table
  (`stratus.contract.prices.price_of`). A table that cannot be read prices nothing wrong: the committed one serves.
- **Refreshing** (`refresh_if_due`, one call in the `Sweep("*")` fan-out of `chalicelib.services.scheduler`):
  when the stored table is missing, older than a day or of another region, the on-demand prices of the
  pools' instance types (the Price List API) and their spot prices (the last hour of EC2's spot price
  history, the median over zones) are fetched and stored. A refresh that fails (no permission, no Price
  List API on moto, no network) logs one warning, stores why, and tries again an hour later; the sweep
  goes on.

The port is `Ports.prices` (`chalicelib.services.price_source`; `chalicelib.aws.prices` in AWS,
`chalicelib.memory.MemoryPrices` in tests).
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass

from chalicelib.domain import price_table
from chalicelib.domain.price_table import OnDemandQuote, PriceFetchError, SpotQuote, StoredPrices
from chalicelib.services.ports import Ports
from chalicelib.services.price_source import PriceSource
from stratus.contract.prices import LOCAL, PriceTable

log = logging.getLogger(__name__)

#: The stored table is read again after this long (per Lambda container).
CACHE_S = 3600.0
#: Spot prices are the history of this last stretch.
SPOT_WINDOW_S = 3600.0


@dataclass
class _Read:
    at: float
    stored: StoredPrices | None


#: The stored table as last read, per price source (one per Lambda container and thread).
_cache: weakref.WeakKeyDictionary[PriceSource, _Read] = weakref.WeakKeyDictionary()


def stack_table(ports: Ports) -> PriceTable | None:
    """The table runs are priced from before the committed one; None: the committed one alone."""
    if ports.settings.prices is not None:
        return ports.settings.prices
    return price_table.to_table(_stored(ports))


def instance_types(ports: Ports) -> list[str]:
    """The instance types of the stack's pools (what the table is bounded to)."""
    kinds = {
        kind
        for pool in ports.settings.pools
        if pool.provider is not None
        for kind in pool.provider.instance_types
        if kind != LOCAL and not kind.startswith("ml.")  # SageMaker's types are not EC2's prices
    }
    return sorted(kinds)


def refresh_if_due(ports: Ports) -> bool:
    """Fetch and store the prices when the stored table is due (`price_table.refresh_due`); True when
    a table was written. Never raises for AWS's sake: the sweep that calls it must go on."""
    if ports.settings.prices is not None:
        return False
    region = ports.settings.region
    stored = _stored(ports)
    if not price_table.refresh_due(stored, region, ports.clock.now()):
        return False
    kinds = instance_types(ports)
    errors: list[str] = []
    on_demand: dict[str, OnDemandQuote] = {}
    spot: list[SpotQuote] = []
    if kinds:
        try:
            on_demand = ports.prices.on_demand(kinds)
        except PriceFetchError as e:
            errors.append(f"on-demand prices: {e}")
        try:
            spot = ports.prices.spot_history(kinds, ports.clock.now() - SPOT_WINDOW_S)
        except PriceFetchError as e:
            errors.append(f"spot prices: {e}")
    fresh = price_table.build(region, ports.clock.now_iso(), kinds, on_demand, spot, errors, stored)
    try:
        ports.prices.write(fresh.to_json())
    except PriceFetchError as e:
        errors.append(f"storing {price_table.PRICES_KEY}: {e}")
    if errors:
        log.warning(
            "prices for %s not all refreshed (%s); runs are priced from %s",
            ", ".join(kinds),
            "; ".join(errors),
            "what AWS answered, else the committed table" if fresh.prices else "the committed table",
        )
    _cache[ports.prices] = _Read(ports.clock.now(), fresh)
    return True


def _stored(ports: Ports) -> StoredPrices | None:
    now, cached = ports.clock.now(), _cache.get(ports.prices)
    if cached is not None and now - cached.at < CACHE_S:
        return cached.stored
    try:
        stored = price_table.parse(ports.prices.read())
    except PriceFetchError as e:
        log.warning("reading %s: %s; runs are priced from the committed table", price_table.PRICES_KEY, e)
        stored = None
    _cache[ports.prices] = _Read(now, stored)
    return stored
