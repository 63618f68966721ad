"""What a run cost (`chalicelib.domain.usage`, `stratus.contract.prices`, `chalicelib.services.costs`): its share
of an instance, spot against on-demand, its waste split, a repeated exit not counted twice, and prices
of types no table knows."""

from __future__ import annotations

import pytest

from chalicelib.domain.usage import Instance, RunUsage, run_usage, summarize
from stratus.contract.prices import InstancePrice, PriceTable, price_of, table_from_json

T0 = "2026-01-01T00:00:00.000Z"


def at(seconds: int) -> str:
    return f"2026-01-01T{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}.000Z"


G5 = Instance("g5.12xlarge", gpus=4, slots=4)


def usage(*, slots=1, instance=G5, usd=5.672, clean=True, **times):
    defaults = {"assigned_at": T0, "started_at": at(300), "exited_at": at(3600), "last_checkpoint_at": None}
    return run_usage(
        "1.1",
        slots=slots,
        instance=instance,
        usd_per_hour=usd,
        price_source="t",
        clean=clean,
        **{**defaults, **times},
    )


def test_a_run_pays_its_share_of_the_instance() -> None:
    quarter = usage(slots=1)
    assert quarter.share == 0.25
    assert quarter.seconds == pytest.approx(900)  # an hour on a 4-slot instance, 1 slot held
    assert quarter.usd == pytest.approx(5.672 / 4)
    whole = usage(slots=4)
    assert whole.usd == pytest.approx(5.672)
    two_nodes = usage(slots=8)  # a multi-node run holds two instances
    assert two_nodes.seconds == pytest.approx(7200)


def test_spot_and_on_demand_prices() -> None:
    assert price_of("g5.xlarge", spot=False).usd_per_hour == 1.006
    spot = price_of("g5.xlarge", spot=True)
    assert spot.usd_per_hour < 1.006 and "estimated" in spot.source
    stack = PriceTable({"g5.xlarge": InstancePrice(on_demand=1.0, spot=0.3)}, "price-list", "2026-01-05")
    assert price_of("g5.xlarge", spot=True, stack=stack).usd_per_hour == 0.3
    assert price_of("g5.xlarge", spot=False, stack=stack).source == "price-list 2026-01-05"
    assert price_of("local", spot=False).usd_per_hour == 0.0


def test_an_unknown_type_is_priced_at_nothing_and_says_so() -> None:
    price = price_of("x9.huge", spot=False)
    assert (price.usd_per_hour, price.known) == (0.0, False)
    assert "x9.huge" in price.source
    lines, total = summarize(
        [
            usage(usd=0.0, instance=Instance("x9.huge")).__class__(
                **{**usage(instance=Instance("x9.huge"), usd=0.0).to_item(), "priced": False}
            )
        ]
    )
    assert total.priced is False and total.seconds == pytest.approx(3600)


def test_a_malformed_stack_table_falls_back_to_the_committed_one() -> None:
    assert table_from_json("") is None
    assert table_from_json("{not json") is None
    assert table_from_json('{"prices": [1]}') is None
    table = PriceTable({"g5.xlarge": InstancePrice(1.1, 0.4, 1)}, "price-list", "2026-01-05")
    assert table_from_json(table.to_json()) == table


def test_waste_is_split_into_startup_lost_and_idle() -> None:
    clean = usage(slots=4, last_checkpoint_at=at(3500))
    assert (clean.startup_s, clean.lost_s, clean.idle_s) == (300, 0, 100)
    assert clean.training_s == pytest.approx(3200)
    preempted = usage(slots=4, clean=False, last_checkpoint_at=at(2400))
    assert (preempted.startup_s, preempted.lost_s, preempted.idle_s) == (300, 1200, 0)
    no_checkpoint = usage(slots=4, clean=False)
    assert no_checkpoint.lost_s == 3300  # everything since the start is redone
    old_checkpoint = usage(slots=4, clean=False, last_checkpoint_at=at(0))  # from an earlier run
    assert old_checkpoint.lost_s == 3300
    never_started = usage(slots=4, started_at=None, clean=False)
    assert (never_started.startup_s, never_started.training_s) == (3600, 0)


def test_totals_group_by_instance_type_and_lifecycle() -> None:
    a = usage(slots=4)
    b = usage(slots=4, instance=Instance("g5.12xlarge", spot=True, gpus=4, slots=4), usd=2.0)
    lines, total = summarize([a, b, RunUsage.of(a.to_item())])
    assert [(line.instance_type, line.spot, line.runs) for line in lines] == [
        ("g5.12xlarge", False, 2),
        ("g5.12xlarge", True, 1),
    ]
    assert total.usd == pytest.approx(2 * 5.672 + 2.0)
