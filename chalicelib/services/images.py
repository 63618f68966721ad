"""Which flavour of the experiment's `environment` a run gets, and what is said when its image cannot be.

A pool whose machines have GPUs (an `ec2` pool of a GPU instance type: its provider's `gpus`) runs the GPU
flavour of Determined's `environment.environment_variables` (`cuda`/`gpu`), any other the CPU one.
`environment.image` is honoured where the backend runs containers: a SageMaker training job runs it
(`chalicelib.compute.sagemaker`), and a Batch job runs a copy of its pool's job definition with it
(`chalicelib.aws.batch.image_definition`). Agents on a machine (`local`, and `ec2` on the Deep Learning
AMI's Python) run the trial without it; there the trial's log says so in its first line rather than
silently ignoring it."""

from __future__ import annotations

from chalicelib.domain.records import Experiment, LogLine
from chalicelib.domain.run_records import Run
from chalicelib.services.ports import Ports
from stratus.contract.pools import PoolSpec, traits


def on_gpus(spec: PoolSpec | None) -> bool:
    return spec is not None and spec.provider is not None and spec.provider.gpus > 0


def note_unused_image(ports: Ports, run: Run, experiment: Experiment) -> None:
    """Put the line saying the image is not used at the head of the trial's log (once per launch)."""
    spec = ports.settings.pool(run.pool)
    backend = spec.backend if spec is not None else "local"
    image = experiment.parsed_config.environment.image_for(gpu=on_gpus(spec))
    kind = traits(backend)
    if not image or kind.runs_image:
        return
    where = "the instance's Deep Learning AMI Python" if kind.cloud else "the agent machine's Python"
    line = (
        f"[stratus] environment.image {image!r} is not used on pool {run.pool!r} (backend {backend}): "
        f"the trial runs on {where}; a Batch or SageMaker pool runs the experiment's image"
    )
    ports.logs.put(run.trial_id, [LogLine(timestamp=int(ports.clock.now() * 1000), message=line)])
