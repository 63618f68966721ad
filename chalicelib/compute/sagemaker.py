"""The `sagemaker` backend: each run is a SageMaker training job, placed by Stratus' scheduler on the
pool's lanes (`chalicelib.compute.lanes`).

A granted run is launched as usual and one training job is created for it: `InstanceCount` = its lanes,
the experiment's `environment.image` (its GPU or CPU flavour, as the pool's instances have GPUs or not;
the pool's image when it names none), with the agent as its entry point (`python -m stratus.harness.agent --only-runs <runs>
--sagemaker-agents <lanes> ...`: each instance takes its lane by its host's place in the job's
`resourceconfig.json`; its credential read once from the object `JobCredentials` wrote for its lane),
managed spot training for a spot pool. The job's name is kept on the run to stop it. A job that ends
without its agent's word (an interrupted spot job, a failed image) comes back as a `SageMaker Training Job
State Change` event (`chalicelib.services.compute_events`); Stratus requeues the trial itself rather than
using managed spot's own restart, so a resumed trial is scheduled like any other.
The trial's checkpoint comes from the bucket as on every backend (presigned), not SageMaker's
`CheckpointConfig` channel.
"""

from __future__ import annotations

import logging
import re

from chalicelib.compute.cloud import JobCredentials, TrainingApi, TrainingJobRequest
from chalicelib.compute.lanes import alive_lanes, job_nodes
from chalicelib.compute.pool_compute import BackendParts, PoolComputeDefaults
from chalicelib.domain.compute_events import RUNS_ENV
from chalicelib.domain.run_records import Run
from chalicelib.services.agent_store import AgentStore, Host
from chalicelib.services.ports import Clock, ExperimentStore, RunStore
from stratus.contract.pools import PoolSpec

log = logging.getLogger(__name__)

#: Where a training job's agent works (SageMaker's writable volume).
WORK_DIR = "/opt/ml/stratus"


def job_name(stack: str, pool: str, run_id: str) -> str:
    """`<stack>-<pool>-<run>`: letters, digits and dashes, at most 63 (SageMaker's rule), lower case (as
    SageMaker writes it in the job's ARN, which IAM and the stack's event rule match by `<stack>-`). A
    long name keeps its `<stack>-` prefix and the end of the rest."""
    prefix = re.sub(r"[^a-z0-9-]", "-", stack.lower()) + "-"
    rest = re.sub(r"[^a-z0-9-]", "-", f"{pool}-{run_id}".lower())
    return prefix + rest[-max(1, 63 - len(prefix)) :]


class TrainingJobs(PoolComputeDefaults):
    def __init__(
        self,
        api: TrainingApi,
        agents: AgentStore,
        runs: RunStore,
        clock: Clock,
        agent_timeout_s: float,
        *,
        stack: str,
        api_url: str,
        experiments: ExperimentStore,
        credentials: JobCredentials,
    ) -> None:
        self._api = api
        self._agents = agents
        self._runs = runs
        self._clock = clock
        self._timeout_s = agent_timeout_s
        self._stack = stack
        self._api_url = api_url
        self._experiments = experiments
        self._credentials = credentials

    def hosts(self, spec: PoolSpec) -> list[Host]:
        return alive_lanes(spec, self._agents, self._runs, self._clock.now(), self._timeout_s)

    def submit(self, spec: PoolSpec, run: Run) -> None:
        """Create the training job of a launched run (once: a run that has a job keeps it)."""
        provider = spec.provider
        if run.compute_ref or provider is None:
            return
        held, lanes = job_nodes(run)
        runs = ",".join(held)
        name = job_name(self._stack, spec.name, run.run_id)
        job = TrainingJobRequest(
            name=name,
            image=self._image(spec, run) or provider.image,
            instance_type=(provider.instance_types or ("ml.g5.xlarge",))[0],
            instances=len(lanes),
            arguments=(
                "--only-runs",
                runs,
                "--sagemaker-agents",
                ",".join(lanes),
                "--credential-from",
                self._credentials.write(name, lanes),
                "--api",
                self._api_url,
                "--pool",
                spec.name,
                "--slots",
                str(spec.slots_per_agent or 1),
                "--work-dir",
                WORK_DIR,
            ),  # fmt: skip
            environment={RUNS_ENV: runs},
            spot=provider.spot,
        )
        self._api.create(job)
        self._runs.note_compute_ref(run.run_id, job.name)
        log.info("run %s: SageMaker training job %s (%d instance(s))", run.run_id, job.name, job.instances)

    def _image(self, spec: PoolSpec, run: Run) -> str | None:
        """The experiment's own image for this pool's machines, where it names one."""
        experiment = self._experiments.get(run.experiment_id)
        if experiment is None:
            return None
        return experiment.parsed_config.environment.image_for(
            gpu=spec.provider is not None and spec.provider.gpus > 0
        )

    def terminate(self, run: Run, reason: str) -> None:
        if run.compute_ref:
            self._api.stop(run.compute_ref)


def for_pools(parts: BackendParts) -> TrainingJobs:
    """The `sagemaker` backend (`chalicelib.compute.backends`): a training job per run."""
    return TrainingJobs(
        parts.clients.sagemaker(),
        parts.agents,
        parts.runs,
        parts.clock,
        parts.agent_timeout_s,
        stack=parts.stack,
        api_url=parts.api_url,
        experiments=parts.experiments,
        credentials=parts.credentials,
    )
