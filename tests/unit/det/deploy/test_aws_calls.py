"""How `det deploy aws` hands CloudFormation its template: inline up to the 51,200-byte limit, else by
the URL of a copy in the stack's bucket, in the region's partition (the upload itself: tests/aws)."""

from __future__ import annotations

import argparse

import pytest

from det.deploy.aws_calls import TEMPLATE_BODY_MAX, AwsCalls


@pytest.fixture(autouse=True)
def _credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials in the environment: boto3 looks nowhere else (no instance metadata, no network)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


def _calls(region: str) -> AwsCalls:
    return AwsCalls(argparse.Namespace(region=region, profile=None))


def test_a_template_that_fits_goes_inline_and_a_bigger_one_needs_the_bucket() -> None:
    calls = _calls("eu-west-1")
    fits = "x" * TEMPLATE_BODY_MAX
    assert calls.template_source(None, fits) == {"TemplateBody": fits}
    assert calls.template_source(None, fits + "x") is None  # no bucket yet: it cannot be handed over
    assert calls.template_source(None, "é" * (TEMPLATE_BODY_MAX // 2 + 1)) is None  # bytes, not characters


@pytest.mark.parametrize(
    ("region", "url"),
    [
        ("eu-west-1", "https://b.s3.eu-west-1.amazonaws.com/deploy/t.json"),
        ("cn-north-1", "https://b.s3.cn-north-1.amazonaws.com.cn/deploy/t.json"),
        ("us-gov-west-1", "https://b.s3.us-gov-west-1.amazonaws.com/deploy/t.json"),
    ],
)
def test_the_templates_url_is_in_the_regions_partition(region: str, url: str) -> None:
    assert _calls(region).object_url("b", "deploy/t.json") == url
