"""A `GetProducts` PriceList entry written by hand in the shape AWS documents
(https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_pricing_GetProducts.html): each
product a JSON string with its attributes and its OnDemand and Reserved terms."""

from __future__ import annotations

import json


def product(instance_type: str, usd: str, *, gpu: str | None = "1", operation: str = "RunInstances") -> str:
    """One `GetProducts` PriceList entry, in the shape AWS documents (a JSON string per product)."""
    sku = "X3Q9ZB5HSVFWKMCB"
    attributes = {
        "servicecode": "AmazonEC2",
        "location": "US East (N. Virginia)",
        "locationType": "AWS Region",
        "regionCode": "us-east-1",
        "instanceType": instance_type,
        "instanceFamily": "GPU instance",
        "vcpu": "4",
        "memory": "16 GiB",
        "tenancy": "Shared",
        "operatingSystem": "Linux",
        "licenseModel": "No License required",
        "usagetype": f"BoxUsage:{instance_type}",
        "operation": operation,
        "capacitystatus": "Used",
        "preInstalledSw": "NA",
        "marketoption": "OnDemand",
    }
    if gpu is not None:
        attributes["gpu"] = gpu
    return json.dumps(
        {
            "product": {"productFamily": "Compute Instance", "attributes": attributes, "sku": sku},
            "serviceCode": "AmazonEC2",
            "terms": {
                "OnDemand": {
                    f"{sku}.JRTCKXETXF": {
                        "priceDimensions": {
                            f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                                "unit": "Hrs",
                                "endRange": "Inf",
                                "description": f"${usd} per On Demand Linux {instance_type} Instance Hour",
                                "appliesTo": [],
                                "rateCode": f"{sku}.JRTCKXETXF.6YS6EN2CT7",
                                "beginRange": "0",
                                "pricePerUnit": {"USD": usd},
                            }
                        },
                        "sku": sku,
                        "effectiveDate": "2025-12-01T00:00:00Z",
                        "offerTermCode": "JRTCKXETXF",
                        "termAttributes": {},
                    }
                },
                "Reserved": {
                    f"{sku}.4NA7Y494T4": {
                        "priceDimensions": {
                            f"{sku}.4NA7Y494T4.6YS6EN2CT7": {"unit": "Hrs", "pricePerUnit": {"USD": "0.4"}}
                        }
                    }
                },
            },
            "version": "20251201000000",
            "publicationDate": "2025-12-01T00:00:00Z",
        }
    )
