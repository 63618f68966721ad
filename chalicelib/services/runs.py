"""Runs on agents: the launch consumer and the agent-facing calls (heartbeat, started, exit).

The launch message carries the state machine's task token; it is kept on the run and answered when
the agent reports the process's exit, which moves the execution on to complete, restart or fail.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from chalicelib import config as cfg
from chalicelib.domain import keys
from chalicelib.domain.states import RunState, TrialState
from chalicelib.errors import ForbiddenError, NotFoundError
from chalicelib.services import tokens
from chalicelib.services.clock import now_iso
from chalicelib.services.ports import Ports, Record
from chalicelib.settings import get_settings

log = logging.getLogger(__name__)


def handle_launch(ports: Ports, body: Mapping[str, Any]) -> None:
    run_id = str(body["run_id"])
    run = ports.runs.get(run_id)
    if run is None:
        raise NotFoundError(f"run {run_id} not found")
    if run["state"] == RunState.ASSIGNED:
        ports.runs.launch(run_id, str(body["token"]))
        ports.trials.transition(int(run["trial_id"]), str(TrialState.PULLING))
    elif run["state"] == RunState.EXITED:
        # The run ended before its launch was processed: answer the token so the workflow moves on.
        output = {
            "exit_code": int(run.get("exit_code", -1)),
            "reason": run.get("reason", ""),
            "paused": False,
        }
        ports.workflows.succeed(str(body["token"]), output)
    # LAUNCHING or RUNNING: a redelivered message; the agent already has it.


def heartbeat(ports: Ports, agent_id: str, pool: str, slots: int, running: Sequence[str]) -> dict[str, Any]:
    if ports.agents.heartbeat(agent_id, pool, slots):
        ports.queues.to_scheduler(
            pool, {"type": "capacity", "pool": pool}, dedup_id=f"capacity-{agent_id}-{now_iso()}"
        )
    launches = []
    kill = []
    mine = ports.runs.for_agent(agent_id)
    live = {r["run_id"] for r in mine}
    for run in mine:
        if run["state"] == RunState.LAUNCHING and run["run_id"] not in running:
            launches.append(_launch_spec(ports, run))
    for run_id in running:
        if run_id not in live:
            kill.append(run_id)  # the control plane no longer expects it (ended, or canceled)
    return {"launch": launches, "kill": kill}


def started(ports: Ports, agent_id: str, run_id: str, pid: int) -> None:
    run = _own_run(ports, agent_id, run_id)
    if ports.runs.start(run_id, agent_id, pid) is not None:
        ports.trials.transition(int(run["trial_id"]), str(TrialState.RUNNING))


def exited(ports: Ports, agent_id: str, run_id: str, exit_code: int, reason: str) -> None:
    run = _own_run(ports, agent_id, run_id)
    if run["state"] == RunState.EXITED:
        return  # a retried report
    if ports.runs.exit(run_id, exit_code, reason) is None:
        return
    trial = ports.trials.get(int(run["trial_id"]))
    # Paused only if this process was told to pause (a promotion may have come since: see trial_paused).
    paused = exit_code == 0 and bool(run.get("pausing"))
    if trial is not None and trial.get("invalid_hp") and exit_code == 0:
        reason = str(trial.get("exit_reason") or reason)
    ports.trials.update(int(run["trial_id"]), exit_code=exit_code, exit_reason=reason[:1000])
    token = run.get("launch_token")
    if token:
        ports.workflows.succeed(
            str(token), {"exit_code": exit_code, "reason": reason[:1000], "paused": paused}
        )


def store_logs(
    ports: Ports, trial_id: int, run_id: str, seq: int | None, lines: Sequence[Mapping[str, Any]]
) -> bool:
    """Store a batch of a run's log lines once; False when `seq` shows it is a retried batch."""
    run = ports.runs.get(run_id)
    if run is None or int(run["trial_id"]) != trial_id:
        raise NotFoundError(f"run {run_id} of trial {trial_id} not found")
    if seq is not None and int(run.get("log_seq", 0)) >= seq:
        return False
    ports.logs.put(trial_id, lines)
    if seq is not None:
        ports.runs.record_log_batch(run_id, seq)
    return True


def _own_run(ports: Ports, agent_id: str, run_id: str) -> Record:
    run = ports.runs.get(run_id)
    if run is None:
        raise NotFoundError(f"run {run_id} not found")
    if run.get("agent_id") != agent_id:
        raise ForbiddenError(f"run {run_id} is not assigned to agent {agent_id}")
    return run


def _launch_spec(ports: Ports, run: Record) -> dict[str, Any]:
    settings = get_settings()
    trial = ports.trials.get(int(run["trial_id"]))
    experiment = ports.experiments.get(int(run["experiment_id"]))
    if trial is None or experiment is None:
        raise NotFoundError(f"trial of run {run['run_id']} not found")
    config = cfg.parse_experiment_config(experiment["config"]).config
    # GPU flavours of images and variables come with the GPU backends; agents run the CPU flavour for now.
    environment = config.environment.variables_for(gpu=False)
    environment.update(
        {
            "STRATUS_MASTER": settings.api_url,
            "STRATUS_TRIAL_ID": str(trial["id"]),
            "STRATUS_EXPERIMENT_ID": str(experiment["id"]),
            "STRATUS_RUN_ID": run["run_id"],
            "STRATUS_RUN_TOKEN": tokens.run_token(settings.token_secret, run["run_id"]),
            "STRATUS_HPARAMS": json.dumps(trial["hparams"], sort_keys=True),
            "STRATUS_LATEST_CHECKPOINT": str(trial.get("latest_checkpoint") or ""),
            "STRATUS_TRIAL_SEED": str(trial.get("trial_seed", 0)),
            "STRATUS_SLOTS": str(run["slots"]),
        }
    )
    return {
        "run_id": run["run_id"],
        "trial_id": int(trial["id"]),
        "experiment_id": int(experiment["id"]),
        "slots": int(run["slots"]),
        "entrypoint": entrypoint_argv(config),
        "environment": environment,
        "context_url": (
            ports.blobs.presign_get(keys.context_key(experiment["context_sha256"]))
            if experiment.get("context_sha256")
            else None
        ),
        "api_url": settings.api_url,
    }


_LEGACY_ENTRYPOINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def entrypoint_argv(config: cfg.ExperimentConfig) -> list[str]:
    """The argv of a trial's entrypoint. Determined's legacy `model_def:TrialClass` form runs the class
    under the harness's trial runner, one process per slot under the torch_distributed launcher when
    the trial has several; anything else follows the config's own rules (argv or shell)."""
    entrypoint = config.entrypoint
    if isinstance(entrypoint, str) and _LEGACY_ENTRYPOINT.match(entrypoint.strip()):
        if config.resources.slots_per_trial > 1:
            return ["python3", "-m", "launchers.torch_distributed", "--trial", entrypoint.strip()]
        return ["python3", "-m", "harness.exec.run_trial", entrypoint.strip()]
    return cfg.entrypoint_argv(config)
