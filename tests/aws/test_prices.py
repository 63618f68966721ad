"""The stack's price table on a moto stack (`chalicelib.services.prices`, `chalicelib.aws.prices`): the
stack-wide sweep writes `prices/ec2.json` (moto has no Price List API: that part fails, is logged, and the
committed table prices on-demand time), and a run that ends is priced from the table in the bucket."""

from __future__ import annotations

import json
import logging

import pytest

from chalicelib import wiring
from chalicelib.aws import aws_ports
from chalicelib.domain.price_table import PRICES_KEY
from chalicelib.domain.usage import RunUsage
from chalicelib.services import runs, scheduler
from stratus.contract import messages

pytestmark = pytest.mark.aws

GPU_POOLS = [
    {"name": "default"},
    {"name": "gpu", "backend": "ec2", "provider": {"instance_types": ["g5.xlarge"], "group": "gpu-asg"}},
]


def said(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "chalicelib.services.prices"]


def test_the_stack_wide_sweep_writes_the_price_table_or_logs_why_not(stack, monkeypatch, caplog):
    monkeypatch.setenv("STRATUS_POOLS", json.dumps(GPU_POOLS))
    wiring.reset()
    p = aws_ports()
    with caplog.at_level(logging.WARNING, logger="chalicelib.services.prices"):
        scheduler.handle_message(p, messages.Sweep("*"))
    body = stack.client("s3").get_object(Bucket=stack.names.bucket, Key=PRICES_KEY)["Body"].read()
    stored = json.loads(body)
    assert stored["region"] == "us-east-1"
    g5 = stored["prices"]["g5.xlarge"]
    assert g5["spot"] > 0 and g5["sources"]["spot"].startswith("spot-history")  # moto's EC2 answers
    if g5["on_demand"] is None:  # moto has no Price List API: said once, and the committed table serves
        (warning,) = said(caplog)
        assert "on-demand prices" in warning.getMessage() and "g5.xlarge" in warning.getMessage()
        assert stored["error"].startswith("on-demand prices:")
    caplog.clear()
    scheduler.handle_message(p, messages.Sweep("*"))  # not due again: nothing fetched, nothing said
    assert not said(caplog)


def test_a_run_is_priced_from_the_table_in_the_bucket(stack):
    table = {
        "region": "us-east-1",
        "fetched_at": "2026-01-05T00:00:00.000Z",
        "checked_at": "2026-01-05T00:00:00.000Z",
        "prices": {"g5.xlarge": {"on_demand": 9.8765, "spot": None, "sources": {"on_demand": "price-list"}}},
    }
    stack.client("s3").put_object(Bucket=stack.names.bucket, Key=PRICES_KEY, Body=json.dumps(table).encode())
    p = stack.ports
    stack.submit_experiment()
    spec = stack.launch_on_agent()
    instance = {"type": "g5.xlarge", "spot": False, "gpus": 1, "slots": 1}
    runs.started(p, "agent-1", spec["run_id"], pid=123, instance=instance)
    runs.exited(p, "agent-1", spec["run_id"], 0, "exited with code 0")
    usage = RunUsage.of(p.trials.get(spec["trial_id"]).usage[spec["run_id"]])
    assert (usage.usd_per_hour, usage.price_source) == (9.8765, "price-list 2026-01-05")
