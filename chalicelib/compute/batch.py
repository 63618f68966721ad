"""The `batch` backend: each run is an AWS Batch job, placed by Stratus' scheduler on the pool's lanes
(`chalicelib.compute.lanes`).

A granted run is launched as usual (its record LAUNCHING, its lanes' agent records to come), and one job
is submitted for it: on the pool's queue (`provider.group`), or, for a run on several lanes, as a
multi-node parallel job on the pool's multi-node queue. The job's container runs the same agent as
everywhere (`stratus.harness.agent --only-runs <runs> --batch-agents <lanes>`): each node takes its lane by its
node index, heartbeats as that lane, runs its part and exits once it has ended. Each node's credential is
written to the bucket first and the job told where (its `credentials` parameter: `JobCredentials`). A job that fails without
its agent's word (its instance reclaimed, the image not pulled) comes back as a `Batch Job State Change`
event (`chalicelib.services.compute_events`).
"""

from __future__ import annotations

import logging

from chalicelib.compute.cloud import BatchApi, JobCredentials, JobRequest
from chalicelib.compute.lanes import alive_lanes, job_nodes
from chalicelib.compute.pool_compute import BackendParts, PoolComputeDefaults
from chalicelib.domain.cloud_names import MULTI_NODE_SUFFIX
from chalicelib.domain.run_records import Run
from chalicelib.services.agent_store import AgentStore, Host
from chalicelib.services.ports import Clock, ExperimentStore, RunStore
from stratus.contract.pools import PoolSpec

log = logging.getLogger(__name__)


class BatchJobs(PoolComputeDefaults):
    def __init__(
        self,
        api: BatchApi,
        agents: AgentStore,
        runs: RunStore,
        clock: Clock,
        agent_timeout_s: float,
        stack: str,
        credentials: JobCredentials,
        experiments: ExperimentStore | None = None,
    ) -> None:
        self._api = api
        self._experiments = experiments
        self._agents = agents
        self._runs = runs
        self._clock = clock
        self._timeout_s = agent_timeout_s
        self._stack = stack
        self._credentials = credentials

    def hosts(self, spec: PoolSpec) -> list[Host]:
        return alive_lanes(spec, self._agents, self._runs, self._clock.now(), self._timeout_s)

    def submit(self, spec: PoolSpec, run: Run) -> None:
        """Submit the job of a launched run (once: a run that has a job keeps it)."""
        if run.compute_ref or spec.provider is None:
            return
        held, lanes = job_nodes(run)
        suffix = MULTI_NODE_SUFFIX if len(lanes) > 1 else ""
        name = f"{self._stack}-run-{run.run_id}".replace(".", "-")[:128]
        job = JobRequest(
            name=name,
            queue=spec.provider.group + suffix,
            definition=spec.provider.group + suffix,
            parameters={
                "runs": ",".join(held),
                "agents": ",".join(lanes),
                "credentials": self._credentials.write(name, lanes),
            },
            nodes=len(lanes),
            share=f"e{run.experiment_id}",
            priority=max(0, 100 - run.priority),  # Batch: higher first; Determined: lower first
            image=self._image(spec, run),
        )
        job_id = self._api.submit(job)
        self._runs.note_compute_ref(run.run_id, job_id)
        log.info("run %s: Batch job %s on %s (%d node(s))", run.run_id, job_id, job.queue, job.nodes)

    def _image(self, spec: PoolSpec, run: Run) -> str:
        """The experiment's own image for this pool's machines where it names one other than the pool's."""
        experiment = self._experiments.get(run.experiment_id) if self._experiments is not None else None
        if experiment is None or spec.provider is None:
            return ""
        image = experiment.parsed_config.environment.image_for(gpu=spec.provider.gpus > 0) or ""
        return image if image != spec.provider.image else ""

    def terminate(self, run: Run, reason: str) -> None:
        if run.compute_ref:
            self._api.terminate(run.compute_ref, reason)


def for_pools(parts: BackendParts) -> BatchJobs:
    """The `batch` backend (`chalicelib.compute.backends`): a Batch job per run on its pool's lanes."""
    return BatchJobs(
        parts.clients.batch(),
        parts.agents,
        parts.runs,
        parts.clock,
        parts.agent_timeout_s,
        parts.stack,
        parts.credentials,
        experiments=parts.experiments,
    )
