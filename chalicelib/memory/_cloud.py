"""The cloud APIs' twins (`chalicelib.compute.cloud`): an Auto Scaling group that launches and terminates
instances at once, recording every call, for unit tests of the backends."""

from __future__ import annotations

from typing import Any

from chalicelib.compute.cloud import Group, GroupInstance, JobRequest, TrainingJobRequest
from chalicelib.services.ports import Clock


class MemoryAutoScaling:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.groups: dict[str, Group] = {}
        self.calls: list[tuple[Any, ...]] = []
        self._launched = 0

    def add_group(self, name: str, min_size: int = 0, max_size: int = 5) -> None:
        self.groups[name] = Group(name, desired=min_size, min_size=min_size, max_size=max_size)
        self._fill(name)

    def group(self, name: str) -> Group | None:
        self.calls.append(("group", name))
        return self.groups.get(name)

    def set_desired(self, name: str, desired: int) -> None:
        self.calls.append(("set_desired", name, desired))
        group = self.groups[name]
        if not group.min_size <= desired <= group.max_size:  # AWS's ValidationError
            raise ValueError(f"desired {desired} is outside [{group.min_size}, {group.max_size}] of {name}")
        self.groups[name] = Group(name, desired, group.min_size, group.max_size, group.instances)
        self._fill(name)

    def terminate(self, instance_id: str, *, decrement: bool = True) -> None:
        self.calls.append(("terminate", instance_id, decrement))
        for name, group in self.groups.items():
            kept = tuple(i for i in group.instances if i.instance_id != instance_id)
            if len(kept) < len(group.instances):
                desired = group.desired - 1 if decrement else group.desired
                self.groups[name] = Group(name, desired, group.min_size, group.max_size, kept)
                self._fill(name)
                return
        raise KeyError(f"no group holds instance {instance_id}")

    def lose(self, instance_id: str) -> None:
        """The instance is gone without the control plane asking (a spot reclaim): the group replaces it."""
        for name, group in self.groups.items():
            kept = tuple(i for i in group.instances if i.instance_id != instance_id)
            self.groups[name] = Group(name, group.desired, group.min_size, group.max_size, kept)
            self._fill(name)

    def instance_ids(self, name: str) -> list[str]:
        return [i.instance_id for i in self.groups[name].instances]

    def _fill(self, name: str) -> None:
        group = self.groups[name]
        instances = list(group.instances)
        while len(instances) < group.desired:
            self._launched += 1
            instances.append(GroupInstance(f"i-{self._launched:04d}", "InService", self._clock.now()))
        self.groups[name] = Group(name, group.desired, group.min_size, group.max_size, tuple(instances))


class MemoryBatch:
    """Batch jobs that are recorded, never run: `submitted` and `terminated` for a test to read."""

    def __init__(self) -> None:
        self.submitted: dict[str, JobRequest] = {}
        self.terminated: dict[str, str] = {}

    def submit(self, job: JobRequest) -> str:
        job_id = f"job-{len(self.submitted) + 1:04d}"
        self.submitted[job_id] = job
        return job_id

    def terminate(self, job_id: str, reason: str) -> None:
        self.terminated.setdefault(job_id, reason)


class MemorySageMaker:
    """Training jobs that are recorded, never run: `created` and `stopped` for a test to read."""

    def __init__(self) -> None:
        self.created: dict[str, TrainingJobRequest] = {}
        self.stopped: list[str] = []

    def create(self, job: TrainingJobRequest) -> None:
        if job.name in self.created:  # SageMaker refuses a name in use
            raise ValueError(f"training job {job.name} exists")
        self.created[job.name] = job

    def stop(self, name: str) -> None:
        self.stopped.append(name)
