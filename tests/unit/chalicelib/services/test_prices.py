"""The price table the stack keeps current (`chalicelib.services.prices`) on the in-memory twin: the
stack-wide sweep fetches it once a day, a failing fetch warns once and leaves the committed table in use,
and a run that ends is priced from the stored table (read once an hour per container)."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import pytest

from chalicelib.domain.price_table import OnDemandQuote, SpotQuote
from chalicelib.domain.usage import RunUsage
from chalicelib.memory import MemoryPorts, memory_ports, memory_settings
from chalicelib.services import prices, runs, scheduler
from stratus.contract import messages
from stratus.contract.pools import PoolSpec, Provider
from stratus.contract.prices import InstancePrice, PriceTable

POOLS = (
    PoolSpec(name="default"),
    PoolSpec(
        name="gpu", backend="ec2", provider=Provider(instance_types=("g5.xlarge", "g5.12xlarge"), gpus=1)
    ),
    PoolSpec(name="jobs", backend="sagemaker", provider=Provider(instance_types=("ml.g5.xlarge",))),
)
G5 = {"type": "g5.xlarge", "spot": True, "gpus": 1, "slots": 1}


@pytest.fixture
def ports() -> MemoryPorts:
    return memory_ports(memory_settings(pools=POOLS))


def sweep_every_pool(ports: MemoryPorts) -> None:
    scheduler.handle_message(ports, messages.Sweep("*", at=ports.clock.now_iso()))


def test_the_stack_wide_sweep_fetches_the_pools_prices_once_a_day(ports) -> None:
    ports.prices.on_demand_prices = {"g5.xlarge": OnDemandQuote(1.25, 1)}
    ports.prices.spot_quotes = [
        SpotQuote("g5.xlarge", "us-east-1a", 0.5, "2026-01-01T00:00:00Z"),
        SpotQuote("g5.xlarge", "us-east-1b", 0.7, "2026-01-01T00:00:00Z"),
        SpotQuote("g5.xlarge", "us-east-1c", 0.6, "2026-01-01T00:00:00Z"),
    ]
    sweep_every_pool(ports)
    asked = [call for call in ports.prices.calls if call[0] in ("on_demand", "spot_history")]
    assert asked == [
        ("on_demand", ("g5.12xlarge", "g5.xlarge")),
        ("spot_history", ("g5.12xlarge", "g5.xlarge")),
    ]
    stored = json.loads(ports.prices.stored or b"")
    assert stored["region"] == "us-east-1" and stored["fetched_at"] == ports.clock.now_iso()
    assert stored["prices"]["g5.xlarge"]["on_demand"] == 1.25
    assert stored["prices"]["g5.xlarge"]["spot"] == 0.6
    assert "g5.12xlarge" not in stored["prices"]  # AWS said nothing: the committed table prices it

    ports.prices.calls.clear()
    ports.clock.advance(23 * 3600)
    sweep_every_pool(ports)
    sweep_every_pool(ports)
    assert not [c for c in ports.prices.calls if c[0] != "read"]  # not due yet
    ports.clock.advance(3600)
    sweep_every_pool(ports)
    assert ("on_demand", ("g5.12xlarge", "g5.xlarge")) in ports.prices.calls

    ports.prices.calls.clear()
    scheduler.handle_message(ports, messages.Sweep("default"))  # a pool's own sweep never fetches prices
    assert not [c for c in ports.prices.calls if c[0] in ("on_demand", "spot_history")]


def test_a_refresh_that_fails_warns_once_and_the_committed_table_prices_runs(ports, flow, caplog) -> None:
    ports.prices.unreachable = "AccessDeniedException: not authorized to perform pricing:GetProducts"
    with caplog.at_level(logging.WARNING, logger="chalicelib.services.prices"):
        sweep_every_pool(ports)
        sweep_every_pool(ports)  # retried an hour later, not at every sweep
    (warning,) = caplog.records
    assert "pricing:GetProducts" in warning.getMessage() and "committed table" in warning.getMessage()
    assert json.loads(ports.prices.stored or b"")["error"].startswith("on-demand prices: AccessDenied")
    assert priced_run(ports, flow).price_source.startswith("committed 2025-06 spot")
    ports.clock.advance(3600)
    with caplog.at_level(logging.WARNING, logger="chalicelib.services.prices"):
        sweep_every_pool(ports)
    assert len(caplog.records) == 2


def priced_run(ports: MemoryPorts, flow) -> RunUsage:
    """A 10-minute run on a spot g5.xlarge, ended: its usage as recorded."""
    (trial_id,) = flow.trial_ids(flow.submit().id)
    spec = flow.place(trial_id)
    runs.started(ports, "agent-1", spec["run_id"], pid=7, instance=G5)
    ports.clock.advance(600)
    runs.exited(ports, "agent-1", spec["run_id"], 0, "exited with code 0")
    return RunUsage.of(ports.trials.get(trial_id).usage[spec["run_id"]])


def test_a_run_is_priced_from_the_stored_table_read_once_an_hour(ports, flow) -> None:
    table = {
        "region": "us-east-1",
        "fetched_at": "2026-01-01T00:00:00.000Z",
        "checked_at": "2026-01-01T00:00:00.000Z",
    }
    ports.prices.stored = json.dumps(
        {**table, "prices": {"g5.xlarge": {"on_demand": 2.0, "spot": 0.777}}}
    ).encode()
    usage = priced_run(ports, flow)
    assert (usage.usd_per_hour, usage.price_source) == (0.777, "price-list 2026-01-01 spot")
    assert usage.usd == pytest.approx(0.777 / 6)
    reads = [c for c in ports.prices.calls if c[0] == "read"]
    ports.prices.stored = json.dumps({**table, "prices": {"g5.xlarge": {"spot": 0.5}}}).encode()
    assert priced_run(ports, flow).usd_per_hour == 0.777  # the container's copy, less than an hour old
    assert [c for c in ports.prices.calls if c[0] == "read"] == reads
    ports.clock.advance(3600)
    assert priced_run(ports, flow).usd_per_hour == 0.5


def test_a_pinned_table_replaces_the_stored_one_and_stops_the_refresh() -> None:
    pinned = PriceTable({"g5.xlarge": InstancePrice(3.0, 0.9)}, "operator", "2026-01")
    ports = memory_ports(replace(memory_settings(pools=POOLS), prices=pinned))
    ports.prices.stored = b'{"region": "us-east-1", "prices": {"g5.xlarge": {"spot": 0.1}}}'
    sweep_every_pool(ports)
    assert not [c for c in ports.prices.calls if c[0] != "read"]
    assert prices.stack_table(ports) is pinned
