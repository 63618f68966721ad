"""Elastic trials on the in-memory twin (`chalicelib.services.elastic`): the AdaptDL hints a trial sends,
and what its runs' environment gets."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from chalicelib.errors import BadRequestError
from chalicelib.services import elastic, runs
from stratus.contract.pools import PoolSpec

#: AdaptDL 0.2.11's hints body as captured in docs/architecture.md, "Elastic trials (AdaptDL)", plus the launcher's speedup table.


def elastic_config(flow, **section: Any) -> dict[str, Any]:
    return {
        **flow.SINGLE,
        "entrypoint": "python3 -m stratus.launchers.adaptdl -- python3 train.py",
        "elastic": {"min_replicas": 1, **section},
    }


def running_run(ports, flow, config: dict[str, Any] | None = None, slots: int = 1):
    (trial_id,) = flow.trial_ids(flow.submit(config).id)
    spec = flow.place(trial_id, slots=slots)
    return ports.runs.get(spec["run_id"]), spec


def test_hints_are_stored_on_the_trial_with_the_time_and_a_repeat_stores_nothing_new(
    ports, flow, adaptdl_hints
):
    run, _ = running_run(ports, flow, elastic_config(flow))

    stored = elastic.record_hints(ports, run, adaptdl_hints)

    assert stored.elastic_hints == adaptdl_hints and stored.hints_at == ports.clock.now_iso()
    first_at = stored.hints_at
    ports.clock.advance(30)
    again = elastic.record_hints(ports, run, adaptdl_hints)  # AdaptDL re-sends, or the proxy retries
    assert (again.elastic_hints, again.hints_at) == (adaptdl_hints, first_at)
    changed = elastic.record_hints(ports, run, {**adaptdl_hints, "maxProfiledReplicas": 2})
    assert changed.elastic_hints["maxProfiledReplicas"] == 2
    assert changed.hints_at == ports.clock.now_iso() != first_at


def test_missing_hints_are_stored_as_null_and_an_empty_grad_params_as_none(ports, flow):
    run, _ = running_run(ports, flow, elastic_config(flow))

    stored = elastic.record_hints(ports, run, {"initBatchSize": 32, "gradParams": {}})

    assert stored.elastic_hints == {
        "initBatchSize": 32,
        "localBszBounds": None,
        "globalBatchSize": None,
        "maxBatchSize": None,
        "maxProfiledReplicas": None,
        "gradientAccumulation": None,
        "gradParams": None,
        "perfParams": None,
    }


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ({"initBatchSize": 0}, "hints initBatchSize=0 is not a whole number >= 1"),
        ({"localBszBounds": [128, 16]}, "hints localBszBounds=[128, 16] has min > max"),
        ({"perfParams": {"alpha_c": 1.0}}, "hints perfParams="),
        ({"speedup": {"0": 1.0}}, "hints speedup entry '0'"),
        ({"weather": "fine"}, "hints have unknown keys ['weather']"),
    ],
)
def test_bad_hints_are_a_400_naming_the_field_and_store_nothing(ports, flow, bad, words, adaptdl_hints):
    run, _ = running_run(ports, flow, elastic_config(flow))

    with pytest.raises(BadRequestError) as refused:
        elastic.record_hints(ports, run, {**adaptdl_hints, **bad})

    assert words in refused.value.message
    trial = ports.trials.get(run.trial_id)
    assert (trial.elastic_hints, trial.hints_at) == (None, None)


def test_an_elastic_run_gets_its_restart_count_replica_limit_and_kill_grace(ports, flow):
    (trial_id,) = flow.trial_ids(flow.submit(elastic_config(flow, max_replicas=3)).id)

    first = flow.place(trial_id)["environment"]

    assert first["STRATUS_ADAPTDL_RESTARTS"] == "0"
    assert first["STRATUS_ADAPTDL_MAX_REPLICAS"] == "3"
    assert first["STRATUS_KILL_GRACE_S"] == "120"
    assert first["STRATUS_ADAPTDL_SLOTS_PER_REPLICA"] == "1"
    # A second run of the trial (after a rescale, a preemption or a failure) is AdaptDL's restart 1.
    runs.heartbeat(ports, "agent-1", "default", 1, [f"{trial_id}.1"])
    ports.runs.exit(f"{trial_id}.1", 0, "preempted")
    second = flow.place(trial_id, attempt=2)["environment"]
    assert second["STRATUS_ADAPTDL_RESTARTS"] == "1"


def test_the_replica_limit_follows_the_pool_and_a_longer_kill_grace_of_the_experiment_stays(ports, flow):
    config = elastic_config(flow)
    config["environment"] = {"environment_variables": ["STRATUS_KILL_GRACE_S=300"]}
    _, spec = running_run(ports, flow, config)

    env = spec["environment"]
    # The memory stack's pool has no known size: the config's default limit.
    assert env["STRATUS_ADAPTDL_MAX_REPLICAS"] == "4"
    assert env["STRATUS_KILL_GRACE_S"] == "300"


def test_a_fixed_size_run_gets_no_adaptdl_variables(ports, flow):
    _, spec = running_run(ports, flow)

    env = spec["environment"]
    assert not {"STRATUS_ADAPTDL_RESTARTS", "STRATUS_ADAPTDL_MAX_REPLICAS", "STRATUS_KILL_GRACE_S"} & set(env)


def test_the_replica_limit_is_what_the_runs_pool_holds(ports, flow):
    run, _ = running_run(ports, flow, elastic_config(flow, slots_per_replica=2), slots=2)
    pool = PoolSpec(name=run.pool, slots_per_agent=4, max_agents=3)  # 12 slots: 6 replicas of 2
    settings = dataclasses.replace(ports.settings, pools=(pool,))
    config = ports.experiments.get(run.experiment_id).parsed_config

    env = elastic.run_environment(settings, run, config, {})

    assert env["STRATUS_ADAPTDL_MAX_REPLICAS"] == "6"
    assert env["STRATUS_ADAPTDL_SLOTS_PER_REPLICA"] == "2"
