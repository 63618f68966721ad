"""The cost tables of `det experiment describe` and `det trial describe` (`det._cost`)."""

from __future__ import annotations

from det._cost import cost_table, duration, experiment_totals, trial_totals

LINE = {
    "instance_type": "g5.12xlarge",
    "lifecycle": "spot",
    "gpus": 4,
    "runs": 2,
    "instance_s": 3725.0,
    "training_s": 3000.0,
    "waste": {"startup_s": 125.0, "lost_s": 600.0, "idle_s": 0.0},
    "usd": 1.41812,
    "priced": True,
}
TRIAL = {
    "id": 7,
    "cost": {"total": {**LINE, "instance_type": "total", "lifecycle": None}, "by_instance": [LINE]},
}


def test_durations_are_h_mm_ss() -> None:
    assert [duration(s) for s in (0, 59.6, 3725, 90061)] == ["0:00:00", "0:01:00", "1:02:05", "25:01:01"]


def test_the_trial_cost_table_follows_det_tables() -> None:
    assert cost_table([TRIAL], trial_totals(TRIAL)).splitlines() == [
        " Trial ID   | Instance Type   | Lifecycle   |   GPUs |   Runs | Compute   | Training   | Startup   "
        "| Lost    | Idle    | Waste   |   Cost (USD)",
        "------------+-----------------+-------------+--------+--------+-----------+------------+-----------"
        "+---------+---------+---------+--------------",
        " 7          | g5.12xlarge     | spot        |      4 |      2 | 1:02:05   | 0:50:00    | 0:02:05   "
        "| 0:10:00 | 0:00:00 | 0:12:05 |       1.4181",
        " total      |                 |             |      4 |      2 | 1:02:05   | 0:50:00    | 0:02:05   "
        "| 0:10:00 | 0:00:00 | 0:12:05 |       1.4181",
    ]


def test_an_unpriced_type_shows_unknown_and_nothing_recorded_says_so() -> None:
    unpriced = {"id": 3, "cost": {"by_instance": [{**LINE, "priced": False}]}}
    assert "unknown" in cost_table([unpriced], [], as_csv=True).splitlines()[1]
    assert cost_table([{"id": 3}], []).startswith("No compute time recorded yet")


def test_experiment_totals_are_labelled_per_experiment() -> None:
    answer = {"experiment": {"id": 4}, "cost": {"total": LINE}}
    assert [label for label, _ in experiment_totals([answer])] == ["total"]
    assert [label for label, _ in experiment_totals([answer, {**answer, "experiment": {"id": 5}}])] == [
        "total 4",
        "total 5",
    ]
