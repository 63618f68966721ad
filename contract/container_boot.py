"""How a container job (a Batch job, a SageMaker training job) becomes a Stratus agent: its image is a
framework image (AWS's PyTorch training image, or the experiment's `environment.image`) that has Python
and pip but not Stratus, so the job first installs this stack's compute package, the wheel `det deploy
aws up` uploads to `s3://<bucket>/compute/<sha256>/...whl`, then runs `python -m stratus.harness.agent` with the
job's arguments.

    /bin/sh -c BOOT stratus-boot <agent arguments...>

Where the wheel comes from:
- SageMaker: the job's `compute` input channel (the wheel's folder in the bucket), which SageMaker copies
  to `/opt/ml/input/data/compute/` with the execution role before the container starts (a shorter boot,
  `SAGEMAKER_BOOT`: SageMaker takes at most 256 characters in a string of the entry point);
- Batch: `STRATUS_COMPUTE_URI` (`s3://bucket/key`, set by the job definition), fetched with the job role
  through boto3 (AWS's training images have it).

A job with neither ends at once, saying why, instead of failing later on a missing module. The control
plane writes this command (SageMaker), the template writes it (Batch job definitions), and the local
stack's runners read the agent's arguments back from it (`agent_argv`) to run the agent from this checkout.
"""

from __future__ import annotations

from collections.abc import Sequence

#: SageMaker's input channel carrying the compute package, and where SageMaker puts its files.
COMPUTE_CHANNEL = "compute"
SAGEMAKER_COMPUTE_DIR = "/opt/ml/input/data/" + COMPUTE_CHANNEL
#: A Batch job's compute package (`s3://bucket/key`).
COMPUTE_URI_ENV = "STRATUS_COMPUTE_URI"
#: `$0` of the boot script (what `ps` shows).
BOOT_NAME = "stratus-boot"

BOOT = f"""set -eu
package="${{STRATUS_PACKAGE_DIR:-/tmp/stratus-package}}"
mkdir -p "$package"
case "${{{COMPUTE_URI_ENV}:-}}" in
  s3://*.whl)  # a stack deployed without its package (no ComputeKey) names the bucket only
    python -c 'import boto3, sys; bucket, key = sys.argv[1][len("s3://"):].split("/", 1); \\
boto3.client("s3").download_file(bucket, key, sys.argv[2] + "/" + key.rsplit("/", 1)[-1])' \\
      "${COMPUTE_URI_ENV}" "$package" ;;
esac
wheels=$(ls "$package"/*.whl {SAGEMAKER_COMPUTE_DIR}/*.whl 2>/dev/null || true)
if [ -z "$wheels" ]; then
  echo "stratus: no compute package in $package or {SAGEMAKER_COMPUTE_DIR}: deploy the stack with" \\
    "det deploy aws up, which uploads it" >&2
  exit 64
fi
python -m pip install --quiet --disable-pip-version-check $wheels
PYTHONSAFEPATH=1 exec python -m stratus.harness.agent "$@"
"""

#: SageMaker's boot: the package is in the channel's folder. Short, as SageMaker takes at most 256
#: characters in each string of `ContainerEntrypoint`.
SAGEMAKER_BOOT = (
    f"w=$(ls {SAGEMAKER_COMPUTE_DIR}/*.whl) || {{ echo stratus: no compute package, deploy with det deploy "
    'aws up >&2; exit 64; }; python -m pip install -q $w && PYTHONSAFEPATH=1 exec python -m stratus.harness.agent "$@"'
)
#: The most characters SageMaker takes in one string of `ContainerEntrypoint` or `ContainerArguments`.
SAGEMAKER_MAX_STRING = 256

_BATCH = ("/bin/sh", "-c", BOOT, BOOT_NAME)
_SAGEMAKER = ("/bin/sh", "-c", SAGEMAKER_BOOT, BOOT_NAME)


def boot_command(agent_arguments: Sequence[str]) -> list[str]:
    """A Batch job's whole command: fetch and install the compute package, then the agent with these
    arguments."""
    return [*_BATCH, *agent_arguments]


def boot_entrypoint() -> list[str]:
    """SageMaker's `ContainerEntrypoint` (its `ContainerArguments` are the agent's arguments)."""
    return list(_SAGEMAKER)


def agent_argv(command: Sequence[str]) -> list[str]:
    """The agent's argv (`-m stratus.harness.agent ...`, for an interpreter) in a container command this module
    wrote; ValueError for any other command."""
    for prefix in (_BATCH, _SAGEMAKER):
        if tuple(command[: len(prefix)]) == prefix:
            return ["-m", "stratus.harness.agent", *command[len(prefix) :]]
    raise ValueError(f"not a Stratus container command (it starts {list(command[:2])!r})")
