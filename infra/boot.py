"""What an EC2 pool's instance runs at first boot (its launch template's user data): fetch the compute
side's package from the stack's bucket with the instance role, install it into the Deep Learning AMI's
PyTorch environment, and run the agent under systemd.

The package is `s3://<bucket>/<ComputeKey>` (a key under `compute/`, the only prefix the agent role may
read). `det deploy aws up` builds and uploads it and passes its key; the stack cannot `pip install
stratus` from an index, so with an empty `ComputeKey` (a template deployed by hand) the script stops
with a message in the instance's console log, and the control plane replaces the silent instance after
its pool's `max_agent_starting_period`.

The unit's `ExecStart=` line is exactly `agent_command(...)` joined by spaces: the local stack reads that
line back from the launch template (`agent_command_in`) and runs it as a local process.
"""

from __future__ import annotations

import shlex
from typing import Any

from stratus.contract.container_boot import boot_command

#: The API's stage, and its URL as an `Fn::Sub` string (the template's `ApiUrl` output, the functions'
#: and the EC2 agents' `--api`); the local stack puts its own URL in its place.
STAGE = "api"
API_URL = "https://${RestApi}.execute-api.${AWS::Region}.${AWS::URLSuffix}/" + STAGE

#: The Deep Learning AMI's PyTorch environment (AL2023 and Ubuntu DLAMIs alike).
PYTHON = "/opt/pytorch/bin/python"
WORK_DIR = "/var/lib/stratus"
UNIT = "stratus-agent.service"
EXEC_START = "ExecStart="

_SCRIPT = """\
#!/bin/bash
# Stratus agent of pool {pool}, stack ${{AWS::StackName}} (infra/boot.py).
set -euo pipefail
key='${{ComputeKey}}'
if [ -z "$key" ]; then
  echo "stratus: the stack has no ComputeKey, so there is no agent to install;" \\
    "det deploy aws up uploads the compute package and sets it" >&2
  exit 1
fi
mkdir -p {work_dir} /opt/stratus/package
aws s3 cp --region ${{AWS::Region}} "s3://${{BucketName}}/$key" /opt/stratus/package/
{python} -m pip install --quiet /opt/stratus/package/*
cat > /etc/systemd/system/{unit} <<'UNIT'
[Unit]
Description=Stratus agent of pool {pool}
Wants=network-online.target
After=network-online.target

[Service]
Environment=AWS_DEFAULT_REGION=${{AWS::Region}}
{exec_start}
Restart=on-failure
# SIGTERM reaches the agent only: it drains (asks its trials to checkpoint and stop) within
# TimeoutStopSec; whatever is left of its trials is killed then.
KillMode=mixed
KillSignal=SIGTERM
TimeoutStopSec=150

[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
systemctl enable --now {unit}
"""


def agent_command(api_url: str, pool: str, slots: int = 1) -> list[str]:
    """The agent's command line on an instance of `pool` (`slots` = the pool's `slots_per_agent`)."""
    return [
        PYTHON, "-P", "-m", "stratus.harness.agent", "--aws", "--api", api_url,
        "--pool", pool, "--slots", str(slots), "--work-dir", WORK_DIR,
    ]  # fmt: skip


def script(pool: str, slots: int = 1) -> str:
    """The user data script, an `Fn::Sub` template: `${AWS::...}`, `${BucketName}`, `${ComputeKey}` and
    the API's `${RestApi}` are filled in by CloudFormation. `pool`: a name `compute_resources` accepts
    (it stands unquoted in the unit)."""
    exec_start = EXEC_START + " ".join(agent_command(API_URL, pool, slots))
    return _SCRIPT.format(pool=pool, work_dir=WORK_DIR, python=PYTHON, unit=UNIT, exec_start=exec_start)


def user_data(pool: str, slots: int = 1) -> dict[str, Any]:
    """The launch template's `UserData`: the script, filled in and base64-encoded by CloudFormation."""
    return {"Fn::Base64": {"Fn::Sub": script(pool, slots)}}


def agent_command_in(text: str) -> list[str]:
    """The agent's command line in a rendered user data script (the unit's one `ExecStart=` line)."""
    lines = [line for line in text.splitlines() if line.startswith(EXEC_START)]
    if len(lines) != 1:
        raise ValueError(f"the user data has {len(lines)} {EXEC_START} lines, not one; is it Stratus's?")
    return shlex.split(lines[0].removeprefix(EXEC_START))


#: Where a Batch job's agent works inside its container.
BATCH_WORK_DIR = "/tmp/stratus"


def batch_command(api_url: str, pool: str, slots: int = 1) -> list[str]:
    """The command of a `batch` pool's job definition: a one-run agent per node, which takes its run and
    lane from the job's `runs` and `agents` parameters by its node index (`AWS_BATCH_JOB_NODE_INDEX`),
    and its lane's credential from the objects under the job's `credentials` parameter (read once); first
    installed into the job's image from the stack's bucket (`stratus.contract.container_boot`)."""
    return boot_command([
        "--only-runs", "Ref::runs", "--batch-agents", "Ref::agents", "--credential-from", "Ref::credentials",
        "--api", api_url, "--pool", pool, "--slots", str(slots), "--work-dir", BATCH_WORK_DIR,
    ])  # fmt: skip
