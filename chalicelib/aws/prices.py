"""AWS's prices (`chalicelib.services.prices.PriceSource`): on-demand from the Price List API, spot from
EC2's spot price history, and the stack's table in its bucket.

The Price List API (`pricing`) has endpoints in us-east-1, eu-central-1 and ap-south-1 only, and serves
every region's prices from each: the client is always us-east-1's. `GetProducts` answers each product as
a JSON *string* (not an object) in ``PriceList``; its on-demand price is
``terms.OnDemand.<offer>.priceDimensions.<rate>.pricePerUnit.USD`` (`on_demand_usd`). The filters narrow
an instance type to the plain Linux product (shared tenancy, no pre-installed software, capacity
"Used" rather than a reservation's), so one product per type is expected; where several remain, the
`RunInstances` one, then the cheapest, is taken.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.aws import clients
from chalicelib.domain.price_table import PRICES_KEY, OnDemandQuote, PriceFetchError, SpotQuote
from chalicelib.settings import get_settings

#: The Price List's `location` of each commercial region (its filters name regions so); a region not
#: here is filtered by `regionCode` instead.
LOCATIONS = {
    "us-east-1": "US East (N. Virginia)",
    "us-east-2": "US East (Ohio)",
    "us-west-1": "US West (N. California)",
    "us-west-2": "US West (Oregon)",
    "ca-central-1": "Canada (Central)",
    "eu-west-1": "EU (Ireland)",
    "eu-west-2": "EU (London)",
    "eu-west-3": "EU (Paris)",
    "eu-central-1": "EU (Frankfurt)",
    "eu-central-2": "EU (Zurich)",
    "eu-north-1": "EU (Stockholm)",
    "eu-south-1": "EU (Milan)",
    "eu-south-2": "EU (Spain)",
    "ap-south-1": "Asia Pacific (Mumbai)",
    "ap-northeast-1": "Asia Pacific (Tokyo)",
    "ap-northeast-2": "Asia Pacific (Seoul)",
    "ap-northeast-3": "Asia Pacific (Osaka)",
    "ap-southeast-1": "Asia Pacific (Singapore)",
    "ap-southeast-2": "Asia Pacific (Sydney)",
    "ap-east-1": "Asia Pacific (Hong Kong)",
    "sa-east-1": "South America (Sao Paulo)",
    "me-south-1": "Middle East (Bahrain)",
    "af-south-1": "Africa (Cape Town)",
}
PRICING_REGION = "us-east-1"
#: Spot price history's product description of Linux (the VPC variant is what EC2 reports today).
LINUX_SPOT = ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"]


def product_filters(instance_type: str, region: str) -> list[dict[str, str]]:
    where = (
        {"Field": "location", "Value": LOCATIONS[region]}
        if region in LOCATIONS
        else {"Field": "regionCode", "Value": region}
    )
    fields = [
        {"Field": "instanceType", "Value": instance_type},
        where,
        {"Field": "operatingSystem", "Value": "Linux"},
        {"Field": "tenancy", "Value": "Shared"},
        {"Field": "preInstalledSw", "Value": "NA"},
        {"Field": "capacitystatus", "Value": "Used"},
    ]
    return [{"Type": "TERM_MATCH", **f} for f in fields]


def on_demand_usd(item: str | dict[str, Any]) -> float | None:
    """The hourly on-demand USD price of one `GetProducts` PriceList entry; None when it has none."""
    product = json.loads(item) if isinstance(item, str) else item
    for term in (product.get("terms", {}).get("OnDemand") or {}).values():
        for dimension in (term.get("priceDimensions") or {}).values():
            usd = (dimension.get("pricePerUnit") or {}).get("USD")
            if usd is not None and dimension.get("unit", "Hrs") in ("Hrs", "Hours"):
                return float(usd)
    return None


def quote_of(items: Sequence[str | dict[str, Any]]) -> OnDemandQuote | None:
    """The on-demand quote of an instance type from its `GetProducts` entries (see the module's docstring)."""
    found: list[tuple[bool, float, int | None]] = []
    for item in items:
        product = json.loads(item) if isinstance(item, str) else item
        usd = on_demand_usd(product)
        if usd is None or usd <= 0:
            continue
        attributes = product.get("product", {}).get("attributes", {})
        gpu = str(attributes.get("gpu", "")).strip()
        gpus = int(gpu) if gpu.isdigit() else None
        found.append((attributes.get("operation") != "RunInstances", usd, gpus))
    if not found:
        return None
    _, usd, gpus = min(found, key=lambda f: (f[0], f[1]))
    return OnDemandQuote(usd, gpus)


class AwsPrices:
    def __init__(self) -> None:
        settings = get_settings()
        self._region, self._bucket = settings.region, settings.bucket

    def on_demand(self, instance_types: Sequence[str]) -> dict[str, OnDemandQuote]:
        pricing = clients.client("pricing", region=PRICING_REGION)
        quotes: dict[str, OnDemandQuote] = {}
        try:
            for kind in instance_types:
                items: list[str] = []
                pages = pricing.get_paginator("get_products").paginate(
                    ServiceCode="AmazonEC2",
                    Filters=product_filters(kind, self._region),
                    FormatVersion="aws_v1",
                )
                for page in pages:
                    items += page.get("PriceList", [])
                quote = quote_of(items)
                if quote is not None:
                    quotes[kind] = quote
        except (ClientError, BotoCoreError, ValueError, KeyError) as e:
            raise PriceFetchError(f"the AWS Price List API did not answer: {e}") from e
        return quotes

    def spot_history(self, instance_types: Sequence[str], since: float) -> list[SpotQuote]:
        ec2 = clients.client("ec2")
        try:
            return list(self._spot_pages(ec2, instance_types, since))
        except (ClientError, BotoCoreError, ValueError, KeyError) as e:
            raise PriceFetchError(f"EC2 DescribeSpotPriceHistory did not answer: {e}") from e

    def _spot_pages(self, ec2: Any, instance_types: Sequence[str], since: float) -> Iterator[SpotQuote]:
        pages = ec2.get_paginator("describe_spot_price_history").paginate(
            InstanceTypes=list(instance_types),
            ProductDescriptions=LINUX_SPOT,
            StartTime=datetime.fromtimestamp(since, UTC),
        )
        for page in pages:
            for entry in page.get("SpotPriceHistory", []):
                at = entry.get("Timestamp")
                yield SpotQuote(
                    instance_type=str(entry["InstanceType"]),
                    zone=str(entry.get("AvailabilityZone", "")),
                    usd_per_hour=float(entry["SpotPrice"]),
                    at=at.isoformat() if isinstance(at, datetime) else str(at or ""),
                )

    def read(self) -> bytes | None:
        try:
            body = clients.client("s3").get_object(Bucket=self._bucket, Key=PRICES_KEY)["Body"]
            data: bytes = body.read()
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise PriceFetchError(f"s3://{self._bucket}/{PRICES_KEY} could not be read: {e}") from e
        except BotoCoreError as e:
            raise PriceFetchError(f"s3://{self._bucket}/{PRICES_KEY} could not be read: {e}") from e
        return data

    def write(self, body: bytes) -> None:
        try:
            clients.client("s3").put_object(
                Bucket=self._bucket, Key=PRICES_KEY, Body=body, ContentType="application/json"
            )
        except (ClientError, BotoCoreError) as e:
            raise PriceFetchError(f"s3://{self._bucket}/{PRICES_KEY} could not be written: {e}") from e
