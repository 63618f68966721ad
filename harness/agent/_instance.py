"""What an agent tells the control plane about its instance when it starts a run: the run's time is
priced by it (`chalicelib.services.costs`).

On EC2 (`--aws`) the type and the life cycle come from the metadata service (`instance-type`,
`instance-life-cycle`: spot or on-demand); a local agent is instance type `local`, priced at nothing
(its time still counts). A Batch or SageMaker job's agent says nothing: the control plane takes the
type from the pool's provider. GPUs are the CUDA devices the agent hands out; slots are what it offers,
and a run is charged its slots' share of the instance.
"""

from __future__ import annotations

from typing import Any

from stratus.contract.prices import LOCAL
from stratus.harness.agent._settings import Settings


def instance_report(settings: Settings) -> dict[str, Any] | None:
    """The `instance` of `POST /agents/{id}/runs/{run}/started`, or None where the pool knows better."""
    if settings.only_run:
        return None  # a Batch or SageMaker job: its pool's provider names the instance type
    kind = settings.instance_type if settings.aws else LOCAL
    if not kind:
        return None
    return {
        "type": kind,
        "spot": settings.life_cycle == "spot",
        "gpus": len(settings.gpus),
        "slots": max(settings.slots, 1),
    }
