"""`resources.max_slots` on the in-memory twin: the scheduler never lets a job's trials hold more slots
than its limit, under either policy, without holding up other jobs or growing the pool for it; `det
experiment set max-slots` (`experiment_edits`) changes the limit of a running experiment and the next
pass follows it. With the other fields of `PATCH /experiments/{id}`: name, description, labels."""

from __future__ import annotations

import dataclasses

import pytest

from chalicelib.config.errors import ConfigInvalidError
from chalicelib.domain.states import ExperimentState, RunState
from chalicelib.errors import BadRequestError, ConflictError, NotFoundError
from chalicelib.memory import MemoryExperiments, MemoryPorts, memory_ports, memory_settings
from chalicelib.services import experiments, runs, scheduler
from chalicelib.services.experiment_edits import MAX_LABELS, ExperimentEdit, edit
from stratus.contract.pools import PoolSpec

POOLS = (PoolSpec("default"), PoolSpec("shared", scheduler="fair_share"))


@pytest.fixture
def ports() -> MemoryPorts:
    return memory_ports(settings=memory_settings(pools=POOLS))


def _grid(flow, trials: int, pool: str = "default", **resources) -> tuple[int, list[str]]:
    """A grid experiment of `trials` one-slot trials, each asking for slots: (its id, the run ids)."""
    config = {
        **flow.SINGLE,
        "searcher": {"name": "grid", "metric": "loss", "max_length": {"batches": 1}},
        "hyperparameters": {"x": {"type": "categorical", "vals": list(range(trials))}},
        "resources": {"resource_pool": pool, **resources},
    }
    experiment = flow.submit(config)
    flow.ports.clock.advance(1)
    return experiment.id, [flow.request_slots(t) for t in flow.trial_ids(experiment.id)]


def _granted(ports, pool: str, slots: int) -> set[str]:
    runs.heartbeat(ports, "agent-1", pool, slots, [])
    scheduler.schedule_pool(ports, pool)
    return {r.run_id for r in ports.runs.allocated(pool)}


@pytest.mark.parametrize("pool", ["default", "shared"])
def test_a_job_holds_at_most_its_max_slots_and_others_take_the_rest(ports, flow, pool, monkeypatch):
    capped, capped_runs = _grid(flow, 3, pool, max_slots=2)
    _other, (other_run,) = _grid(flow, 1, pool)
    asked = []  # from now on, with an agent of 4 slots
    monkeypatch.setattr(ports.compute, "set_demand", lambda pool, demand: asked.append(demand))
    held = _granted(ports, pool, 4)
    assert held == {*capped_runs[:2], other_run}  # one slot stays free: the limit, not the pool
    waiting = ports.runs.get(capped_runs[2])
    assert waiting.state == RunState.PENDING
    assert "its experiment may hold 2 at once (resources.max_slots)" in waiting.wait_reason
    assert f"det experiment set max-slots {capped} N" in waiting.wait_reason
    # A backend that scales is never asked to grow the pool for a request its job's limit holds back.
    assert asked == []


def test_the_limit_held_back_request_does_not_block_a_later_job_in_a_full_pool(ports, flow):
    _capped, capped_runs = _grid(flow, 3, max_slots=1)
    _other, other_runs = _grid(flow, 2)
    assert _granted(ports, "default", 3) == {capped_runs[0], *other_runs}


def test_raising_the_limit_of_a_running_experiment_starts_waiting_trials_at_the_next_pass(ports, flow):
    job, job_runs = _grid(flow, 3, max_slots=1)
    assert _granted(ports, "default", 4) == {job_runs[0]}
    ports.queues.take_scheduler()

    after = edit(ports, job, ExperimentEdit(max_slots=2))

    assert after.job_max_slots == 2 and ports.experiments.get(job).max_slots == 2
    assert {ports.runs.get(r).max_slots for r in job_runs} == {2}  # live runs carry it
    (sweep,) = ports.queues.take_scheduler()  # the pool is asked for a pass
    assert (sweep.pool, sweep.body["type"]) == ("default", "sweep")
    assert _granted(ports, "default", 4) == set(job_runs[:2])

    edit(ports, job, ExperimentEdit(max_slots=0))  # 0 clears it: the config's limit no longer applies
    assert ports.experiments.get(job).job_max_slots is None
    assert _granted(ports, "default", 4) == set(job_runs)


def test_a_lowered_limit_stops_no_running_trial_and_gives_no_more_slots(ports, flow):
    job, job_runs = _grid(flow, 4, max_slots=3)
    assert _granted(ports, "default", 4) == set(job_runs[:3])
    edit(ports, job, ExperimentEdit(max_slots=1))
    assert _granted(ports, "default", 4) == set(job_runs[:3])
    assert not any(r.preempt for r in ports.runs.allocated("default"))


def test_a_limit_below_slots_per_trial_is_refused_in_the_config_and_by_the_edit(ports, flow):
    with pytest.raises(ConfigInvalidError) as refused:
        experiments.validate({**flow.SINGLE, "resources": {"slots_per_trial": 4, "max_slots": 2}})
    assert "resources.max_slots: 2 is less than resources.slots_per_trial (4)" in str(refused.value)
    job = flow.submit(resources={"slots_per_trial": 2}).id
    with pytest.raises(BadRequestError, match=r"max_slots 1 is less than .*slots_per_trial \(2\)"):
        edit(ports, job, ExperimentEdit(max_slots=1))
    assert ports.experiments.get(job).max_slots is None  # nothing written


def test_an_ended_experiment_keeps_its_limit_but_may_be_renamed(ports, flow):
    job = flow.submit().id
    ports.experiments.transition(job, ExperimentState.COMPLETED)
    with pytest.raises(ConflictError, match="has not ended"):
        edit(ports, job, ExperimentEdit(max_slots=4))
    assert edit(ports, job, ExperimentEdit(name="renamed")).name == "renamed"


def test_name_description_and_labels_added_and_removed_by_name(ports, flow):
    job = flow.submit(labels=["a", "b"]).id
    after = edit(ports, job, ExperimentEdit(name="n2", description="d2", add_labels=["c", "a", "c"]))
    assert (after.name, after.description, after.labels) == ("n2", "d2", ["a", "b", "c"])
    version = ports.experiments.get(job).version
    same = edit(ports, job, ExperimentEdit(name="n2", add_labels=["c"], remove_labels=["zz"]))
    assert same.labels == ["a", "b", "c"] and ports.experiments.get(job).version == version  # no write
    assert edit(ports, job, ExperimentEdit(remove_labels=["a"])).labels == ["b", "c"]
    assert experiments.get(ports, job).labels == ["b", "c"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (ExperimentEdit(), "nothing to change"),
        (ExperimentEdit(name=""), "name '' must be 1 to 128 printable characters"),
        (ExperimentEdit(name="a\nb"), "must be 1 to 128 printable"),
        (ExperimentEdit(add_labels=["x" * 256]), "must be 1 to 255 printable"),
        (ExperimentEdit(add_labels=["x"], remove_labels=["x"]), "both added and removed"),
        (ExperimentEdit(max_slots=-1), "max_slots -1 must be 0"),
        (ExperimentEdit(description="d" * 4001), "at most 4000"),
    ],
)
def test_bad_edits_are_refused_whole_naming_the_value(ports, flow, change, message):
    job = flow.submit().id
    before = ports.experiments.get(job)
    with pytest.raises(BadRequestError, match=message):
        edit(ports, job, change)
    assert ports.experiments.get(job) == before


def test_too_many_labels_and_an_unknown_experiment(ports, flow):
    job = flow.submit().id
    with pytest.raises(BadRequestError, match=f"would have {MAX_LABELS + 1} labels"):
        edit(ports, job, ExperimentEdit(add_labels=[f"l{i}" for i in range(MAX_LABELS + 1)]))
    with pytest.raises(NotFoundError, match="experiment 999"):
        edit(ports, 999, ExperimentEdit(name="x"))


class _Racing(MemoryExperiments):
    """Another writer moves the experiment between the edit's read and its write, `races` times."""

    def __init__(self, races: int) -> None:
        super().__init__()
        self.races = races

    def update_versioned(self, experiment_id, fields, expected_version):
        if self.races:
            self.races -= 1
            self.items[experiment_id]["labels"] = [*self.items[experiment_id]["labels"], "theirs"]
            self.items[experiment_id]["version"] += 1
        return super().update_versioned(experiment_id, fields, expected_version)


def test_an_edit_that_lost_a_race_is_planned_again_keeping_the_other_writers_label(flow_on):
    racing = dataclasses.replace(memory_ports(), experiments=_Racing(1))
    flow = flow_on(racing)
    job = flow.submit().id
    assert edit(racing, job, ExperimentEdit(add_labels=["mine"])).labels == ["theirs", "mine"]
    keeps_losing = dataclasses.replace(memory_ports(), experiments=_Racing(10))
    job = flow_on(keeps_losing).submit().id
    with pytest.raises(ConflictError, match="run the command again"):
        edit(keeps_losing, job, ExperimentEdit(name="x"))
