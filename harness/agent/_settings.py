"""The agent's settings: read in this module only (command line, environment, the machine's GPUs)."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from stratus.harness.agent._aws import IMDS_URL, SPOT_POLL_S, ImdsClient, ImdsError, Instance

TOKEN_ENV = "STRATUS_AGENT_TOKEN"

#: Variables of the agent's own environment that never reach a trial.
SECRET_ENV_NAMES = frozenset(
    {
        TOKEN_ENV,
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    }
)

_GPU_LINE = re.compile(r"^GPU (\d+):")


@dataclass(frozen=True)
class Settings:
    api_url: str
    agent_id: str
    pool: str
    slots: int
    work_dir: Path
    token: str = field(default="", repr=False)
    #: CUDA device ids handed out to runs (``CUDA_VISIBLE_DEVICES`` entries); empty on a CPU agent.
    gpus: tuple[str, ...] = ()
    #: This machine's address as other nodes of a multi-node trial reach it (``STRATUS_NODE_ADDR``);
    #: empty: the launcher finds the address it uses to reach the API.
    address: str = ""
    heartbeat_interval: float = 0.5
    kill_grace: float = 10.0
    #: Log shipping: a batch leaves at least this often, or when it holds ``log_batch_lines`` lines.
    log_flush_interval: float = 0.5
    log_batch_lines: int = 200
    log_line_max_bytes: int = 16 * 1024
    #: Lines kept in memory while the API cannot be reached; the oldest are dropped beyond it.
    log_buffer_lines: int = 100_000
    #: How long a finished run keeps trying to ship its last lines before it reports its exit anyway.
    log_flush_timeout: float = 30.0
    #: How long a stopping agent waits for its runs to end and report, after their kill grace.
    shutdown_timeout: float = 30.0
    request_timeout: float = 30.0
    download_attempts: int = 3
    retry_max_backoff: float = 5.0
    #: Stop (and end every run) once the API has not answered for this long; None: keep trying.
    give_up_after: float | None = None
    #: Stop at once when this process (the embedded stack that started the agent) is gone.
    parent_pid: int | None = None
    #: Keep a warm interpreter and fork runs from it where that is safe (`stratus.harness.agent._warm`).
    warm_start: bool = False
    #: On EC2 (`--aws`): the instance's id and address come from its metadata service at ``imds_url``,
    #: which is polled every ``spot_poll_interval`` seconds for a spot interruption (the agent drains).
    #: A Batch job's agent: it runs only this run (or node), then stops (`--only-runs`, `--batch-agents`).
    only_run: str = ""
    aws: bool = False
    imds_url: str = IMDS_URL
    spot_poll_interval: float = SPOT_POLL_S
    #: What it runs on, for the price of its runs' time: the instance type and life cycle ("spot" or
    #: "on-demand") from the metadata service (`--aws`); empty: the control plane asks its pool.
    instance_type: str = ""
    life_cycle: str = ""

    def __post_init__(self) -> None:
        if self.slots < 0:
            raise ValueError("slots must be >= 0")
        if self.heartbeat_interval <= 0:
            raise ValueError("heartbeat interval must be > 0")
        if self.kill_grace < 0:
            raise ValueError("kill grace must be >= 0")
        if self.spot_poll_interval <= 0:
            raise ValueError("spot poll interval must be > 0")

    @property
    def runs_dir(self) -> Path:
        return self.work_dir / "runs"


def detect_gpus(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The CUDA devices this agent may hand out.

    ``CUDA_VISIBLE_DEVICES`` in the agent's own environment restricts them (an empty value or ``-1``
    means none); otherwise every device ``nvidia-smi -L`` lists. No ``nvidia-smi``: no GPUs.
    """
    env = os.environ if environ is None else environ
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = tuple(part.strip() for part in visible.split(",") if part.strip())
        return () if ids in ((), ("-1",)) else ids
    exe = shutil.which("nvidia-smi", path=env.get("PATH"))
    if exe is None:
        return ()
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return ()
    if out.returncode != 0:
        return ()
    return tuple(m.group(1) for line in out.stdout.splitlines() if (m := _GPU_LINE.match(line.strip())))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m stratus.harness.agent",
        description="Stratus compute agent: heartbeats to the control plane and runs the trials it is given. "
        f"The agent token is read from ${TOKEN_ENV}.",
    )
    p.add_argument("--api", required=True, help="control plane base URL")
    p.add_argument("--agent-id", default=None, help="required, except with --aws (the instance id)")
    p.add_argument("--pool", required=True, help="resource pool this agent serves")
    p.add_argument(
        "--slots", type=int, default=None, help="slots offered (default: number of CUDA devices, else 1)"
    )
    p.add_argument("--work-dir", required=True, type=Path, help="runs live under WORK_DIR/runs/<run_id>/")
    p.add_argument(
        "--address",
        default="",
        help="address other nodes of a multi-node trial reach this machine at "
        "(default: the one it reaches the API from)",
    )
    p.add_argument(
        "--token-file",
        type=Path,
        default=None,
        metavar="PATH",
        help=f"read the agent's credential from PATH and delete the file (instead of ${TOKEN_ENV}), so "
        "it sits in no environment a trial could read",
    )
    p.add_argument(
        "--credential-from",
        default=None,
        metavar="S3_URI",
        help="a Batch or SageMaker job's agent without --token-file or $" + TOKEN_ENV + ": read the "
        "credential from the object S3_URI<agent id> as the job's role, then delete it",
    )
    p.add_argument("--heartbeat-interval", type=float, default=0.5, metavar="SECONDS")
    p.add_argument(
        "--kill-grace", type=float, default=10.0, metavar="SECONDS", help="SIGTERM to SIGKILL delay"
    )
    p.add_argument(
        "--give-up-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop, ending every run, once the API has not answered for this long (default: keep trying)",
    )
    p.add_argument(
        "--parent-pid",
        type=int,
        default=None,
        metavar="PID",
        help="stop, ending every run, as soon as process PID (the stack that started the agent) is gone",
    )
    p.add_argument(
        "--warm-start",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="keep a warm interpreter (torch and the harness imported) and fork runs from it where safe "
        "(default: $STRATUS_WARM_START, else off)",
    )
    p.add_argument(
        "--aws",
        action="store_true",
        help="on EC2: the agent id (unless --agent-id) and --address come from the instance metadata "
        "service (IMDSv2), and a spot interruption notice or SIGTERM drains the agent: its runs "
        "checkpoint, go back to the queue, and the agent exits",
    )
    p.add_argument(
        "--imds-url",
        default=IMDS_URL,
        metavar="URL",
        help=f"the instance metadata service of --aws (default: {IMDS_URL})",
    )
    p.add_argument(
        "--spot-poll-interval",
        type=float,
        default=SPOT_POLL_S,
        metavar="SECONDS",
        help=f"how often --aws looks for a spot interruption notice (default: {SPOT_POLL_S:g}, AWS's advice)",
    )
    p.add_argument(
        "--only-runs",
        metavar="RUN[,RUN...]",
        help="a Batch job's agent: run only this node's run (the one at its node index, "
        "$AWS_BATCH_JOB_NODE_INDEX), then stop",
    )
    p.add_argument(
        "--batch-agents",
        metavar="AGENT[,AGENT...]",
        help="with --only-runs: the agent id of each node (the job's lanes), by node index",
    )
    p.add_argument(
        "--sagemaker-agents",
        metavar="AGENT[,AGENT...]",
        help="with --only-runs, in a SageMaker training job: the agent id of each instance, in the order of "
        "the job's hosts (this instance's place: its resourceconfig.json)",
    )
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p


def _credential(token_file: Path | None, env: Mapping[str, str]) -> str:
    """The agent's credential: from `--token-file` (then deleted), else from the environment."""
    if token_file is None:
        return env.get(TOKEN_ENV, "")
    try:
        token = token_file.read_text().strip()
    except OSError as e:
        raise SystemExit(f"stratus.harness.agent: cannot read --token-file {token_file}: {e}") from e
    token_file.unlink(missing_ok=True)
    return token


#: Where SageMaker describes a training job's instances to each of them.
SAGEMAKER_RESOURCE_CONFIG = "/opt/ml/input/config/resourceconfig.json"


def _job_node(
    parser: argparse.ArgumentParser, runs: str | None, agents: str | None, index: str
) -> tuple[str, str]:
    """This node's (agent id, run) of a job's agents and `--only-runs`, by its node index (a Batch job's
    `AWS_BATCH_JOB_NODE_INDEX`, 0 for a single-node job; a SageMaker host's place); ("", "") without them."""
    if runs is None and agents is None:
        return "", ""
    run_ids = [r for r in (runs or "").split(",") if r]
    agent_ids = [a for a in (agents or "").split(",") if a]
    if not run_ids or len(run_ids) != len(agent_ids):
        parser.error(f"--only-runs {runs!r} and the agents {agents!r} must name one run per agent")
    if not index.isdigit() or int(index) >= len(run_ids):
        parser.error(f"node index {index!r} is not one of the {len(run_ids)} nodes of --only-runs")
    return agent_ids[int(index)], run_ids[int(index)]


def _sagemaker_index(parser: argparse.ArgumentParser, env: Mapping[str, str]) -> str:
    """This instance's place among its training job's hosts (`current_host` in `hosts`)."""
    path = Path(env.get("STRATUS_SAGEMAKER_RESOURCE_CONFIG", SAGEMAKER_RESOURCE_CONFIG))
    try:
        config = json.loads(path.read_text())
        return str(list(config["hosts"]).index(config["current_host"]))
    except (OSError, ValueError, KeyError, TypeError) as e:
        parser.error(f"--sagemaker-agents: cannot read this instance's place from {path}: {e}")


def _read_instance(imds_url: str, imds: Callable[[str], ImdsClient]) -> Instance:
    """The instance `--aws` runs on, from its metadata service; one clear error off EC2."""
    client = imds(imds_url)
    try:
        return client.instance()
    except ImdsError as e:
        raise SystemExit(
            f"stratus.harness.agent: --aws cannot read this instance's metadata at {imds_url} ({e}). "
            "--aws needs to run on an EC2 instance (or --imds-url to name another metadata service)."
        ) from e
    finally:
        client.close()


@dataclass(frozen=True)
class CliOptions:
    settings: Settings
    log_level: str
    #: The instance the agent runs on (`--aws`), else None.
    instance: Instance | None = None
    #: `--credential-from`: where a job's agent given no credential reads it, after the settings are
    #: parsed (`stratus.harness.agent._job_credential.with_job_credential`); "" when not given.
    credential_from: str = ""


def parse_cli(
    argv: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    imds: Callable[[str], ImdsClient] = ImdsClient,
) -> CliOptions:
    """The settings from the command line and the environment; with `--aws`, from the instance metadata
    service too (``imds(url)`` makes its client). A job's credential object (`--credential-from`) is not
    read here: `_job_credential.with_job_credential` reads it when no other credential was given."""
    env = os.environ if environ is None else environ
    parser = _parser()
    ns = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    if ns.sagemaker_agents is not None:
        node_agent, only_run = _job_node(
            parser, ns.only_runs, ns.sagemaker_agents, _sagemaker_index(parser, env)
        )
    else:
        node_agent, only_run = _job_node(
            parser, ns.only_runs, ns.batch_agents, env.get("AWS_BATCH_JOB_NODE_INDEX", "0")
        )
    if ns.agent_id is None and not ns.aws and not node_agent:
        parser.error("the following arguments are required: --agent-id (or --aws on EC2: the instance id)")
    token = _credential(ns.token_file, env)  # first: the file is gone even if the instance cannot be read
    instance = _read_instance(ns.imds_url, imds) if ns.aws else None
    agent_id = node_agent or ns.agent_id or (instance.instance_id if instance else "")
    gpus = detect_gpus(env)
    slots: int = ns.slots if ns.slots is not None else (len(gpus) or 1)
    try:
        settings = Settings(
            api_url=str(ns.api).rstrip("/"),
            agent_id=agent_id,
            pool=ns.pool,
            slots=slots,
            work_dir=Path(ns.work_dir).resolve(),
            token=token,
            gpus=gpus,
            address=ns.address.strip() or (instance.local_ipv4 if instance else ""),
            heartbeat_interval=ns.heartbeat_interval,
            kill_grace=ns.kill_grace,
            give_up_after=ns.give_up_after,
            parent_pid=ns.parent_pid,
            warm_start=(
                ns.warm_start
                if ns.warm_start is not None
                else env.get("STRATUS_WARM_START", "").strip().lower() in ("1", "true", "yes", "on")
            ),
            aws=ns.aws,
            imds_url=str(ns.imds_url).rstrip("/"),
            spot_poll_interval=ns.spot_poll_interval,
            only_run=only_run,
            instance_type=instance.instance_type if instance else "",
            life_cycle=instance.life_cycle if instance else "",
        )
    except ValueError as e:
        parser.error(str(e))
    return CliOptions(
        settings=settings, log_level=ns.log_level, instance=instance, credential_from=ns.credential_from or ""
    )
