"""The prices adapter (`chalicelib.aws.prices`): GetProducts against botocore's Stubber (moto has no Price
List API), DescribeSpotPriceHistory and the stored table against moto's EC2 and S3."""

from __future__ import annotations

from datetime import UTC, datetime

import boto3
import pytest
from botocore.stub import Stubber

from chalicelib.aws import clients
from chalicelib.aws.prices import AwsPrices, product_filters
from chalicelib.domain.price_table import OnDemandQuote, PriceFetchError


def test_on_demand_prices_come_from_get_products_in_us_east_1(aws, price_product) -> None:
    pricing = clients.client("pricing", region="us-east-1")
    assert pricing.meta.region_name == "us-east-1"  # the stack is in us-west-2; the API's endpoint is not
    with Stubber(pricing) as stub:
        for kind, answer in (("g5.xlarge", [price_product("g5.xlarge", "1.0060000000")]), ("x9.huge", [])):
            stub.add_response(
                "get_products",
                {"PriceList": answer, "FormatVersion": "aws_v1"},
                {
                    "ServiceCode": "AmazonEC2",
                    "Filters": product_filters(kind, "us-west-2"),
                    "FormatVersion": "aws_v1",
                },
            )
        assert AwsPrices().on_demand(["g5.xlarge", "x9.huge"]) == {"g5.xlarge": OnDemandQuote(1.006, 1)}
        stub.assert_no_pending_responses()
    assert {"Type": "TERM_MATCH", "Field": "location", "Value": "US West (Oregon)"} in product_filters(
        "g5.xlarge", "us-west-2"
    )


def test_a_price_list_that_refuses_is_a_price_fetch_error(aws) -> None:
    with Stubber(clients.client("pricing", region="us-east-1")) as stub:
        stub.add_client_error("get_products", "AccessDeniedException", "not authorized: pricing:GetProducts")
        with pytest.raises(PriceFetchError, match="pricing:GetProducts"):
            AwsPrices().on_demand(["g5.xlarge"])


def test_spot_prices_come_from_the_spot_price_history_of_every_zone(aws) -> None:
    since = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    quotes = AwsPrices().spot_history(["m5.large"], since)
    zones = {q.zone for q in quotes}
    assert len(zones) >= 2 and all(z.startswith("us-west-2") for z in zones)  # moto: one entry per zone
    assert {q.instance_type for q in quotes} == {"m5.large"} and all(q.usd_per_hour > 0 for q in quotes)


def test_the_stored_table_is_read_and_written_in_the_stacks_bucket(aws) -> None:
    boto3.client("s3").create_bucket(
        Bucket="prices-bucket", CreateBucketConfiguration={"LocationConstraint": "us-west-2"}
    )
    prices = AwsPrices()
    assert prices.read() is None
    prices.write(b'{"prices": {}}')
    assert prices.read() == b'{"prices": {}}'
    assert boto3.client("s3").get_object(Bucket="prices-bucket", Key="prices/ec2.json")["Body"].read()


def test_a_bucket_that_cannot_be_read_is_a_price_fetch_error(aws) -> None:
    with pytest.raises(PriceFetchError, match="s3://prices-bucket/prices/ec2.json"):
        AwsPrices().read()  # no such bucket
