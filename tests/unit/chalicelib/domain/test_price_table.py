"""The stack's price table (`chalicelib.domain.price_table`) and the Price List's answers
(`chalicelib.aws.prices`'s pure parts): a GetProducts entry read, the spot median over zones, a table built
and read back with the committed one filling what it lacks, and when a refresh is due. No IO."""

from __future__ import annotations

import json

import pytest

from chalicelib.aws.prices import on_demand_usd, product_filters, quote_of
from chalicelib.domain import price_table
from chalicelib.domain.price_table import OnDemandQuote, SpotQuote, StoredPrices
from stratus.contract.prices import price_of

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
NOW = "2026-01-01T00:00:00.000Z"


def test_a_price_list_entry_gives_its_on_demand_hourly_price(price_product) -> None:
    product = price_product
    assert on_demand_usd(product("g5.xlarge", "1.0060000000")) == pytest.approx(1.006)
    assert on_demand_usd(json.dumps({"product": {}, "terms": {}})) is None
    assert quote_of([product("g5.xlarge", "1.0060000000")]) == OnDemandQuote(1.006, 1)
    # Several products left by the filters: the RunInstances one, then the cheapest; a free one is none.
    items = [
        product("m5.large", "0.2", gpu=None, operation="RunInstances:0g00"),
        product("m5.large", "0.096", gpu=None),
    ]
    assert quote_of(items) == OnDemandQuote(0.096, None)
    assert quote_of([product("m5.large", "0.0000000000")]) is None


def test_the_filters_name_the_plain_linux_product_of_the_region() -> None:
    fields = {f["Field"]: f["Value"] for f in product_filters("g5.xlarge", "eu-west-1")}
    assert fields == {
        "instanceType": "g5.xlarge",
        "location": "EU (Ireland)",
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
    }
    unmapped = {f["Field"]: f["Value"] for f in product_filters("g5.xlarge", "xx-new-1")}
    assert unmapped["regionCode"] == "xx-new-1" and "location" not in unmapped


def test_the_spot_price_is_the_median_over_zones_of_each_zones_latest() -> None:
    quotes = [
        SpotQuote("g5.xlarge", "us-east-1a", 0.50, "2026-01-01T00:10:00+00:00"),
        SpotQuote("g5.xlarge", "us-east-1a", 0.40, "2026-01-01T00:40:00+00:00"),  # 1a's latest
        SpotQuote("g5.xlarge", "us-east-1b", 0.30, "2026-01-01T00:20:00+00:00"),
        SpotQuote("g5.xlarge", "us-east-1c", 0.90, "2026-01-01T00:30:00+00:00"),
        SpotQuote("m5.large", "us-east-1a", 0.04, "2026-01-01T00:30:00+00:00"),
        SpotQuote("m5.large", "us-east-1b", 0.06, "2026-01-01T00:30:00+00:00"),
    ]
    assert price_table.spot_medians(quotes) == {
        "g5.xlarge": (pytest.approx(0.40), 3),
        "m5.large": (pytest.approx(0.05), 2),
    }


def test_a_table_keeps_what_aws_said_per_type_and_the_committed_table_fills_the_rest() -> None:
    stored = price_table.build(
        "us-east-1",
        NOW,
        ["g5.xlarge", "p5.48xlarge", "x9.huge", "g6.xlarge"],
        on_demand={"g5.xlarge": OnDemandQuote(1.1, 1), "x9.huge": OnDemandQuote(7.0)},
        spot=[
            SpotQuote("g5.xlarge", "us-east-1a", 0.44, NOW),
            SpotQuote("g6.xlarge", "us-east-1a", 0.30, NOW),
        ],
        errors=[],
    )
    assert stored.prices["g5.xlarge"]["sources"] == {
        "on_demand": "price-list",
        "spot": "spot-history, median of 1 zone",
    }
    assert "p5.48xlarge" not in stored.prices  # AWS said nothing of it
    table = price_table.to_table(price_table.parse(stored.to_json()))
    assert table is not None and table.as_of == "2026-01-01"
    assert price_of("g5.xlarge", False, table).usd_per_hour == 1.1
    assert price_of("g5.xlarge", True, table).usd_per_hour == 0.44
    assert price_of("x9.huge", False, table).source == "price-list 2026-01-01"
    assert price_of("x9.huge", True, table).source.endswith("spot estimated at 35%")
    # No on-demand price from the Price List, a spot price from EC2: each from where it is known.
    assert price_of("g6.xlarge", True, table).usd_per_hour == 0.30
    assert price_of("g6.xlarge", False, table).source == "committed 2025-06"
    assert price_of("p5.48xlarge", False, table).source == "committed 2025-06"
    unknown = price_of("y1.tiny", False, table)
    assert (unknown.usd_per_hour, unknown.known) == (0.0, False)


def test_a_failed_refresh_keeps_the_prices_it_had_and_says_why() -> None:
    before = price_table.build("us-east-1", NOW, ["g5.xlarge"], {"g5.xlarge": OnDemandQuote(1.1)}, [])
    later = "2026-01-02T00:00:00.000Z"
    failed = price_table.build("us-east-1", later, ["g5.xlarge"], {}, [], ["no permission"], before)
    assert failed.prices == before.prices and failed.error == "no permission"
    assert (failed.fetched_at, failed.checked_at) == (NOW, later)
    nothing = price_table.build("us-east-1", NOW, ["g5.xlarge"], {}, [], ["no network"])
    assert price_table.to_table(nothing) is None and nothing.fetched_at is None


def test_a_refresh_is_due_when_missing_a_day_old_of_another_region_or_an_hour_after_a_failure() -> None:
    fresh = StoredPrices("us-east-1", NOW, NOW)
    assert price_table.refresh_due(None, "us-east-1", T0)
    assert not price_table.refresh_due(fresh, "us-east-1", T0 + 23 * 3600)
    assert price_table.refresh_due(fresh, "us-east-1", T0 + 24 * 3600)
    assert price_table.refresh_due(fresh, "eu-west-1", T0)
    failed = StoredPrices("us-east-1", None, NOW, error="no permission")
    assert not price_table.refresh_due(failed, "us-east-1", T0 + 3599)
    assert price_table.refresh_due(failed, "us-east-1", T0 + 3600)


def test_a_malformed_stored_table_reads_as_none() -> None:
    assert price_table.parse(None) is None
    assert price_table.parse(b"{not json") is None
    assert price_table.parse(b'{"prices": [1]}') is None
    assert (
        price_table.to_table(price_table.parse(b'{"prices": {"g5.xlarge": {"on_demand": "x"}}}')) is not None
    )
