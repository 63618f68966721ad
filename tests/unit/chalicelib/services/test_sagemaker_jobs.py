"""A `sagemaker` pool on the in-memory twin: a run placed on the pool's lanes is created as one training job
(one instance per lane), its agents take their lane by their host's place, stopping the run stops the job,
and a job interrupted for its machine's reasons (managed spot) requeues the run once."""

from __future__ import annotations

import pytest

from chalicelib.domain.states import RunState
from chalicelib.handlers.events import handle_events_message
from chalicelib.memory import MemoryPorts, memory_ports, memory_settings
from chalicelib.services import runs, stopping
from chalicelib.services.tokens import agent_credential
from stratus.contract import messages
from stratus.contract.pools import DEFAULT_POOL, PoolSpec, Provider

SAGEMAKER_POOL = PoolSpec(
    DEFAULT_POOL,
    backend="sagemaker",
    slots_per_agent=1,
    max_agents=2,
    provider=Provider(instance_types=("ml.g5.xlarge",), max_instances=2, image="example/train:1", spot=True),
)


@pytest.fixture
def ports() -> MemoryPorts:
    return memory_ports(settings=memory_settings(pools=(SAGEMAKER_POOL,)))


def _job_event(
    name: str, status: str, secondary: str, run_ids: str, reason: str = ""
) -> messages.ComputeEvent:
    detail = {
        "TrainingJobName": name,
        "TrainingJobStatus": status,
        "SecondaryStatus": secondary,
        "FailureReason": reason,
        "Environment": {"STRATUS_RUNS": run_ids},
    }
    return messages.ComputeEvent(
        {"source": "aws.sagemaker", "detail-type": "SageMaker Training Job State Change", "detail": detail}
    )


def test_a_run_is_one_training_job_of_one_instance_per_lane(ports, flow) -> None:
    (trial_id,) = flow.trial_ids(flow.submit(resources={"slots_per_trial": 2}).id)
    run_id = flow.request_slots(trial_id)
    flow.launch(run_id)
    ((name, job),) = ports.sagemaker.created.items()
    assert name == f"memory-default-{run_id.replace('.', '-')}"
    assert (job.image, job.instance_type, job.instances, job.spot) == (
        "example/train:1",
        "ml.g5.xlarge",
        2,
        True,
    )
    arguments = list(job.arguments)
    assert arguments[arguments.index("--only-runs") + 1] == f"{run_id}-node0,{run_id}-node1"
    assert arguments[arguments.index("--sagemaker-agents") + 1] == "sagemaker-default-0,sagemaker-default-1"
    # Each instance's agent reads its lane's credential from the bucket, once.
    prefix = f"credentials/{name}/"
    assert arguments[arguments.index("--credential-from") + 1] == f"s3://{ports.settings.bucket}/{prefix}"
    lanes = ("sagemaker-default-0", "sagemaker-default-1")
    assert {key: ports.blobs.objects[key] for key in ports.blobs.keys_under("credentials/")} == {
        prefix + lane: agent_credential(ports.settings.agent_token, lane).encode() for lane in lanes
    }
    assert job.environment == {"STRATUS_RUNS": f"{run_id}-node0,{run_id}-node1"}
    assert ports.runs.get(run_id).compute_ref == name


def test_killing_the_trial_stops_its_job(ports, flow) -> None:
    experiment = flow.submit()
    (trial_id,) = flow.trial_ids(experiment.id)
    run_id = flow.request_slots(trial_id)
    flow.launch(run_id)
    (name,) = ports.sagemaker.created
    stopping.kill_trial(ports, trial_id)
    assert name in ports.sagemaker.stopped


def test_an_interrupted_spot_job_requeues_its_run_once(ports, flow) -> None:
    (trial_id,) = flow.trial_ids(flow.submit().id)
    run_id = flow.request_slots(trial_id)
    flow.launch(run_id)
    (name,) = ports.sagemaker.created
    runs.heartbeat(ports, "sagemaker-default-0", DEFAULT_POOL, 1, [])
    runs.started(ports, "sagemaker-default-0", run_id, pid=7)
    for _ in range(2):  # delivered twice
        handle_events_message(ports, _job_event(name, "Stopped", "Interrupted", run_id))
    assert ports.runs.get(run_id).state == RunState.EXITED
    assert flow.exit_answer(run_id)["requeue"] is True


def test_an_algorithm_error_is_the_trials_own_failure(ports, flow) -> None:
    (trial_id,) = flow.trial_ids(flow.submit().id)
    run_id = flow.request_slots(trial_id)
    flow.launch(run_id)
    (name,) = ports.sagemaker.created
    handle_events_message(ports, _job_event(name, "Failed", "Failed", run_id, "AlgorithmError: exit code 1"))
    assert ports.runs.get(run_id).state == RunState.EXITED
    assert "requeue" not in flow.exit_answer(run_id)


def test_job_names_keep_the_stack_prefix_in_lower_case_within_63_characters() -> None:
    from chalicelib.compute.sagemaker import job_name

    assert job_name("MyLab", "gpu_a", "12.3") == "mylab-gpu-a-12-3"
    long = job_name("stratus-lab", "a-pool-with-a-very-long-name-indeed-for-testing", "123456.7")
    assert long.startswith("stratus-lab-") and len(long) == 63 and long.endswith("-123456-7")


def test_a_training_job_runs_the_experiments_own_image_for_the_pools_machines(ports, flow) -> None:
    environment = {"image": {"cpu": "example/cpu:2", "cuda": "example/cuda:2"}}
    (trial_id,) = flow.trial_ids(flow.submit(environment=environment).id)
    run_id = flow.request_slots(trial_id)
    flow.launch(run_id)
    (job,) = ports.sagemaker.created.values()
    assert job.image == "example/cpu:2"  # the pool's provider names no GPUs
    assert ports.logs.streams.get(trial_id, []) == []  # honoured: nothing to say
