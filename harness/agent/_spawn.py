"""What a run's process is started with and how its end reads: its environment (the trial's variables,
the agent's minus secrets), a free port for its collectives, its exit status, the launcher's report of
the rank that failed first, and the marker file through which the agent passes on a stop request."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
from collections.abc import Mapping
from pathlib import Path

from stratus.contract import env as trial_env
from stratus.contract.launch import LaunchSpec
from stratus.harness.agent._settings import SECRET_ENV_NAMES, TOKEN_ENV, Settings
from stratus.harness.trial_process import Probe, missing_packages, trial_environment

#: In the run's folder: written by the agent when the control plane asks the run to stop (a pause, a
#: preemption); the harness's `should_preempt()` turns true when it appears (`STRATUS_PREEMPT_FILE`),
#: within an agent heartbeat instead of the trial's own, slower one.
PREEMPT_MARKER = "preempt.requested"

LAUNCHER_REPORT = "launcher.json"

#: In the run's folder: the process group the run's processes live in, and when its leader started, so
#: that whoever finds the folder after the agent died (the embedded stack's next start) can end what is
#: left of it, and only it: a pid reused by another process has another start time.
PROCESS_RECORD = "process.json"


def process_start_ticks(pid: int) -> int | None:
    """When process `pid` started (clock ticks after boot, from /proc); None if it is gone or unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def record_process(run_dir: Path, pid: int) -> None:
    """Note the run's process group leader in its folder (best effort: a run goes on without it)."""
    with contextlib.suppress(OSError):
        (run_dir / PROCESS_RECORD).write_text(json.dumps({"pgid": pid, "start": process_start_ticks(pid)}))


def first_failed_rank(report: Path) -> tuple[int, str] | None:
    """The rank that failed first in a distributed run, and the reason to report, from the launcher's
    report; None without a report naming a rank."""
    try:
        data = json.loads(report.read_text())
        if data.get("failed_rank") is None:
            return None
        rank = int(data["failed_rank"])
        return rank, f"rank {rank} failed first with exit code {int(data['exit_code'])}"
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def exit_status(returncode: int) -> tuple[int, str]:
    """(exit_code, reason) of a process's return code; killed by signal N gives 128+N."""
    if returncode < 0:
        sig = -returncode
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return 128 + sig, f"killed by signal {name}"
    return returncode, f"exited with code {returncode}"


def build_environment(
    spec: LaunchSpec,
    settings: Settings,
    gpus: tuple[str, ...] | None,
    base: Mapping[str, str] | None = None,
    probe: Probe = missing_packages,
    run_dir: Path | None = None,
    collective_port: int | None = None,
) -> dict[str, str]:
    """The agent's environment minus secrets, ``PATH`` led by this interpreter's bin dir, the trial's;
    ``PYTHONPATH`` ends with the compatibility folders of the packages the trial's Python lacks
    (`stratus.harness.trial_process.trial_environment`). ``collective_port`` (a free port of this machine)
    becomes ``STRATUS_COLLECTIVE_PORT`` for a run on one node (on several, the chief's own agent alone
    would know it)."""
    # The spec's environment holds every variable of contracts.md §2 (`stratus.contract.env.TrialEnv`); the ids
    # from the spec's own fields are fallbacks, and the node's address and the report path are the agent's.
    variables = spec.identity_env(default_master=settings.api_url)
    if settings.address:
        variables[trial_env.NODE_ADDR] = settings.address
    if run_dir is not None:
        variables[trial_env.LAUNCHER_REPORT] = str(run_dir / LAUNCHER_REPORT)
        variables[trial_env.PREEMPT_FILE] = str(run_dir / PREEMPT_MARKER)
    if collective_port is not None and spec.environment.get(trial_env.NUM_NODES, "").strip() in ("", "1"):
        variables[trial_env.COLLECTIVE_PORT] = str(collective_port)
    variables.update(spec.environment)
    if gpus is not None:
        variables["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    variables.pop(TOKEN_ENV, None)
    base = os.environ if base is None else base
    return trial_environment(base, variables, drop=SECRET_ENV_NAMES.__contains__, probe=probe)


def free_port() -> int:
    """A TCP port free on every interface of this machine now (the run's chief binds it later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        port: int = s.getsockname()[1]
        return port
