"""What the cloud backends need of AWS, as protocols: the boto3 adapters live in `chalicelib.aws`
(`chalicelib.aws.autoscaling`), the in-memory twins in `chalicelib.memory` (tests)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from chalicelib.domain.cloud_names import CREDENTIALS_PREFIX
from chalicelib.services.tokens import agent_credential


@dataclass(frozen=True)
class GroupInstance:
    """An instance of an Auto Scaling group: its id, its lifecycle state in the group (`Pending`,
    `InService`, `Terminating`, ...) and when EC2 launched it (epoch s)."""

    instance_id: str
    lifecycle_state: str
    launched_at: float


@dataclass(frozen=True)
class Group:
    name: str
    desired: int
    min_size: int
    max_size: int
    instances: tuple[GroupInstance, ...] = ()

    def live(self) -> list[GroupInstance]:
        """The instances that are coming up or in service (not leaving)."""
        return [i for i in self.instances if i.lifecycle_state.startswith(("Pending", "InService"))]


class AutoScalingApi(Protocol):
    def group(self, name: str) -> Group | None:
        """The group and its instances, or None when there is no such group."""
        ...

    def set_desired(self, name: str, desired: int) -> None: ...

    def terminate(self, instance_id: str, *, decrement: bool = True) -> None:
        """Terminate one instance of its group and lower the group's desired size by one (so that it is
        not replaced): the only way the control plane shrinks a group, choosing which instance goes.
        Without `decrement` the group replaces it at once (a drained instance about to be reclaimed)."""
        ...


@dataclass(frozen=True)
class JobRequest:
    """A Batch job for a run: on `queue`, of `definition`, with the job definition's `Ref::` parameters;
    `nodes` > 1 for a multi-node parallel job. `share` and `priority` feed the queue's fair-share policy
    (Stratus' own scheduler has decided already; they only order jobs when capacity is short)."""

    name: str
    queue: str
    definition: str
    parameters: dict[str, str]
    nodes: int = 1
    share: str = ""
    priority: int = 0
    #: The experiment's own image (`environment.image`) where it is not the pool's: the job runs a copy
    #: of `definition` with this image (`chalicelib.aws.batch.image_definition`); empty: the pool's.
    image: str = ""


class BatchApi(Protocol):
    def submit(self, job: JobRequest) -> str:
        """Submit the job; its id."""
        ...

    def terminate(self, job_id: str, reason: str) -> None:
        """Stop the job whatever its state (nothing when it has ended)."""
        ...


@dataclass(frozen=True)
class TrainingJobRequest:
    """A SageMaker training job for a run: `instances` of `instance_type` running `image` with the agent's
    `arguments` (one node per instance), `environment` in each container; managed spot when `spot`."""

    name: str
    image: str
    instance_type: str
    instances: int
    arguments: tuple[str, ...]
    environment: dict[str, str]
    spot: bool = False
    max_runtime_s: int = 5 * 24 * 3600


class TrainingApi(Protocol):
    def create(self, job: TrainingJobRequest) -> None: ...

    def stop(self, name: str) -> None:
        """Stop the job (nothing when it has ended)."""
        ...


class CredentialObjects(Protocol):
    """The stack's bucket, for the job credentials (`chalicelib.aws.storage.S3Blobs`, the twin's
    `MemoryBlobs`)."""

    def put(self, key: str, data: bytes) -> None: ...
    def uri(self, key: str) -> str: ...


@dataclass(frozen=True)
class JobCredentials:
    """Hands a job's agents their credentials. A job's role cannot ask the API for them (its session is
    not named after the job), so before the job is submitted each lane's `agent_credential` is written
    to `credentials/<job>/<lane>`; the job's agent reads its own with the job's role and deletes it
    (`stratus.harness.agent._job_credential`), and the bucket expires what is left after a day."""

    objects: CredentialObjects
    secret: str

    def write(self, job: str, lanes: Sequence[str]) -> str:
        """Write the lanes' credentials; the location the job's agents read them from
        (`--credential-from`: `s3://<bucket>/credentials/<job>/`)."""
        prefix = f"{CREDENTIALS_PREFIX}{job}/"
        for lane in lanes:
            self.objects.put(prefix + lane, agent_credential(self.secret, lane).encode())
        return self.objects.uri(prefix)
