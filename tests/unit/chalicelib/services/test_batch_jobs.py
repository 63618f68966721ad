"""A `batch` pool on the in-memory twin: the scheduler places runs on the pool's lanes, a launched run is
submitted as one Batch job (a multi-node parallel job on the pool's on-demand queue for a run on several
lanes), the job's agent pulls it as any agent, and a job that never starts or fails without its agent's
word ends the run (requeued when its machine was at fault)."""

from __future__ import annotations

import pytest

from chalicelib.domain.states import RunState
from chalicelib.handlers.events import handle_events_message
from chalicelib.memory import MemoryPorts, memory_ports, memory_settings
from chalicelib.services import runs, scheduler
from chalicelib.services.tokens import agent_credential
from stratus.contract import messages
from stratus.contract.pools import DEFAULT_POOL, PoolSpec, Provider

QUEUE = "memory-default"
BATCH_POOL = PoolSpec(
    DEFAULT_POOL,
    backend="batch",
    slots_per_agent=1,
    max_agents=2,
    provider=Provider(
        instance_types=("g5.xlarge",), max_instances=2, image="example/train:1", group=QUEUE,
        max_agent_starting_period_s=300,
    ),
)  # fmt: skip


@pytest.fixture
def ports() -> MemoryPorts:
    return memory_ports(settings=memory_settings(pools=(BATCH_POOL,)))


def _job_event(
    job_id: str, status: str, run_ids: str, exit_code: int | None, reason: str = ""
) -> messages.ComputeEvent:
    detail = {"jobId": job_id, "status": status, "statusReason": reason, "parameters": {"runs": run_ids}}
    if exit_code is not None:
        detail["container"] = {"exitCode": exit_code}
    return messages.ComputeEvent(
        {"source": "aws.batch", "detail-type": "Batch Job State Change", "detail": detail}
    )


def test_a_run_is_placed_on_a_lane_and_submitted_as_one_job_that_its_agent_pulls(ports, flow) -> None:
    (trial_id,) = flow.trial_ids(flow.submit().id)
    run_id = flow.request_slots(trial_id)
    assert ports.workflows.answers[f"slots-{run_id}"]["agent_id"] == "batch-default-0"  # no agent needed
    flow.launch(run_id)
    ((job_id, job),) = ports.batch.submitted.items()
    assert (job.queue, job.definition, job.nodes) == (QUEUE, QUEUE, 1)
    prefix = f"credentials/{job.name}/"
    assert job.parameters == {
        "runs": run_id,
        "agents": "batch-default-0",
        "credentials": f"s3://{ports.settings.bucket}/{prefix}",
    }
    # The lane's credential waits in the bucket for the job's agent (`--credential-from`).
    assert ports.blobs.keys_under("credentials/") == [prefix + "batch-default-0"]
    credential = agent_credential(ports.settings.agent_token, "batch-default-0")
    assert ports.blobs.objects[prefix + "batch-default-0"] == credential.encode()
    assert ports.blobs.objects[prefix + "batch-default-0"].decode().startswith("agent.batch-default-0.")
    assert job.share == "e1" and job.priority == 100 - 42
    assert ports.runs.get(run_id).compute_ref == job_id
    # The job's agent heartbeats as its lane and is handed the run.
    (spec,) = runs.heartbeat(ports, "batch-default-0", DEFAULT_POOL, 1, [])["launch"]
    assert spec["run_id"] == run_id
    runs.started(ports, "batch-default-0", run_id, pid=7)
    runs.exited(ports, "batch-default-0", run_id, 0, "done")
    handle_events_message(ports, _job_event(job_id, "SUCCEEDED", run_id, 0))  # after its agent's report
    assert flow.exit_answer(run_id)["exit_code"] == 0 and "requeue" not in flow.exit_answer(run_id)


def test_a_run_on_several_lanes_is_one_multi_node_job_on_the_on_demand_queue(ports, flow) -> None:
    (trial_id,) = flow.trial_ids(flow.submit(resources={"slots_per_trial": 2}).id)
    run_id = flow.request_slots(trial_id)
    flow.launch(run_id)
    (job,) = ports.batch.submitted.values()
    assert (job.queue, job.definition, job.nodes) == (QUEUE + "-mnp", QUEUE + "-mnp", 2)
    assert job.parameters == {
        "runs": f"{run_id}-node0,{run_id}-node1",
        "agents": "batch-default-0,batch-default-1",
        "credentials": f"s3://{ports.settings.bucket}/credentials/{job.name}/",
    }
    # One object per node, each holding its own lane's credential.
    objects = {key: ports.blobs.objects[key] for key in ports.blobs.keys_under(f"credentials/{job.name}/")}
    assert objects == {
        f"credentials/{job.name}/{lane}": agent_credential(ports.settings.agent_token, lane).encode()
        for lane in ("batch-default-0", "batch-default-1")
    }


def test_a_job_that_never_starts_its_agent_is_terminated_and_its_run_requeued(ports, flow) -> None:
    (trial_id,) = flow.trial_ids(flow.submit().id)
    run_id = flow.request_slots(trial_id)
    flow.launch(run_id)
    (job_id,) = ports.batch.submitted
    ports.clock.advance(301)  # past the pool's starting period, no heartbeat from the lane
    scheduler.schedule_pool(ports, DEFAULT_POOL)
    assert ports.runs.get(run_id).state == RunState.EXITED
    assert flow.exit_answer(run_id)["requeue"] is True
    assert job_id in ports.batch.terminated


def test_a_job_failed_for_its_machine_requeues_its_run_once(ports, flow) -> None:
    (trial_id,) = flow.trial_ids(flow.submit().id)
    run_id = flow.request_slots(trial_id)
    flow.launch(run_id)
    (job_id,) = ports.batch.submitted
    runs.heartbeat(ports, "batch-default-0", DEFAULT_POOL, 1, [])
    runs.started(ports, "batch-default-0", run_id, pid=7)
    event = _job_event(job_id, "FAILED", run_id, None, "Host EC2 (instance i-0abc) terminated.")
    for _ in range(2):  # delivered twice
        handle_events_message(ports, event)
    run = ports.runs.get(run_id)
    assert run.state == RunState.EXITED and "Host EC2" in (run.reason or "")
    assert flow.exit_answer(run_id)["requeue"] is True
    other = _job_event("job-other", "FAILED", run_id, 1)  # not this run's job: ignored
    handle_events_message(ports, other)


def test_an_experiments_own_image_is_the_jobs_and_the_pools_image_is_not_named_again(ports, flow) -> None:
    """Batch runs containers: the job asks for the experiment's image (a copy of the pool's job definition
    with it: `chalicelib.aws.batch.image_definition`); nothing is said in the trial's log."""
    (trial_id,) = flow.trial_ids(flow.submit(environment={"image": "example/other:1"}).id)
    flow.launch(flow.request_slots(trial_id))
    (job,) = ports.batch.submitted.values()
    assert job.image == "example/other:1" and job.definition == "memory-default"  # the pool's, copied
    assert not ports.logs.streams.get(trial_id)
    (same,) = flow.trial_ids(flow.submit(environment={"image": "example/train:1"}).id)  # the pool's own
    flow.launch(flow.request_slots(same))
    assert [j.image for j in ports.batch.submitted.values()] == ["example/other:1", ""]


def test_a_disabled_lane_gets_no_job_until_it_is_enabled(ports, flow) -> None:
    """`det agent disable batch-default-0`: the lane's agent record says so, and no run is placed there."""
    from chalicelib.services import cluster

    runs.heartbeat(ports, "batch-default-0", DEFAULT_POOL, 1, [])  # a job's agent was heard once
    cluster.set_enabled(ports, "batch-default-0", enabled=False)
    (trial_id,) = flow.trial_ids(flow.submit().id)
    run_id = flow.request_slots(trial_id)
    assert ports.workflows.answers[f"slots-{run_id}"]["agent_id"] == "batch-default-1"
    assert [h.accepting for h in ports.compute.hosts(DEFAULT_POOL)] == [False, True]
    cluster.set_enabled(ports, "batch-default-0", enabled=True)
    assert [h.accepting for h in ports.compute.hosts(DEFAULT_POOL)] == [True, True]
