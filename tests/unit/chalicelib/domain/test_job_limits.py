"""`resources.max_slots` before a pass plans (`chalicelib.domain.job_limits`): which requests a job's
limit holds back, in queue order, counting what its runs hold; and the fair-share demand it caps."""

from __future__ import annotations

from chalicelib.domain.job_limits import JobLimits, capped_demand
from chalicelib.domain.scheduling import Holding, SlotRequest


def _request(run_id: str, job: str, slots: int = 1, max_slots: int = 0) -> SlotRequest:
    return SlotRequest(run_id, slots, 42, "2026-01-01T00:00:00Z", job_id=job, max_slots=max_slots)


def _holding(run_id: str, job: str, slots: int, *, stopping: bool = False) -> Holding:
    return Holding(run_id, job, slots, 42, {"a1": slots}, stopping=stopping)


def test_requests_within_the_limit_pass_in_order_and_the_rest_are_held_back_with_the_reason() -> None:
    requests = [_request(f"1.{i}", "1", max_slots=2) for i in (1, 2, 3)]
    admitted, held = JobLimits([]).split(requests)
    assert [r.run_id for r in admitted] == ["1.1", "1.2"]
    assert list(held) == ["1.3"]
    assert "may hold 2 at once (resources.max_slots) and 2 are taken" in held["1.3"]
    assert "det experiment set max-slots 1 N" in held["1.3"]


def test_what_the_job_holds_counts_stopping_runs_included_and_other_jobs_are_untouched() -> None:
    holdings = [_holding("1.1", "1", 2), _holding("1.2", "1", 1, stopping=True), _holding("2.1", "2", 4)]
    requests = [_request("1.3", "1", max_slots=4), _request("2.2", "2"), _request("1.4", "1", max_slots=4)]
    admitted, held = JobLimits(holdings).split(requests)
    assert [r.run_id for r in admitted] == ["1.3", "2.2"]  # 2 + 1 held, +1 = 4; then full
    assert list(held) == ["1.4"]


def test_a_bigger_request_held_back_does_not_stop_a_smaller_one_behind_it_that_fits() -> None:
    requests = [_request("1.1", "1", slots=4, max_slots=5), _request("1.2", "1", slots=2, max_slots=5)]
    admitted, held = JobLimits([_holding("1.0", "1", 2)]).split(requests)
    assert [r.run_id for r in admitted] == ["1.2"] and list(held) == ["1.1"]


def test_no_limit_lets_everything_through_and_the_state_carries_over_pages() -> None:
    limits = JobLimits([])
    assert limits.split([_request(f"1.{i}", "1") for i in range(50)])[1] == {}
    first, _ = limits.split([_request("2.1", "2", slots=3, max_slots=4)])
    later, held = limits.split([_request("2.2", "2", slots=2, max_slots=4)])  # the next page
    assert [r.run_id for r in first] == ["2.1"] and later == [] and list(held) == ["2.2"]


def test_fair_share_demand_is_capped_at_what_the_limit_still_allows() -> None:
    waiting = {"1": 10, "2": 6, "3": 3}
    requests = [_request("1.5", "1", max_slots=4), _request("2.1", "2")]
    holdings = [_holding("1.1", "1", 3), _holding("3.1", "3", 8)]
    assert capped_demand(waiting, requests, holdings) == {"1": 1, "2": 6, "3": 3}
    over = [_holding("1.1", "1", 6)]  # a limit lowered below what it holds: it wants nothing more
    assert capped_demand(waiting, requests, over)["1"] == 0
