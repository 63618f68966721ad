"""Runs on agents: the launch consumer and the agent-facing calls (heartbeat, started, exit).

The launch message carries the state machine's task token; it is kept on the run and answered when
the agent reports the process's exit, which moves the execution on to complete, restart or fail.

A run on several nodes is launched as one node record per agent; each node's processes find their
peers through the run's rendezvous record (``rendezvous``). The first node to fail ends the run and
the others are killed at their agents' next heartbeat; the run completes when every node has.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from chalicelib import config as cfg
from chalicelib.domain import keys
from chalicelib.domain.records import Trial
from chalicelib.domain.run_records import Node, RendezvousEntry, Run
from chalicelib.domain.states import RunState, TrialState
from chalicelib.domain.updates import MAX_REASON
from chalicelib.errors import BadRequestError, ConflictError, ForbiddenError, NotFoundError
from chalicelib.services import costs, elastic, images, telemetry, tokens, watchlist
from chalicelib.services.ports import Ports
from stratus.contract import messages
from stratus.contract.entrypoint import legacy_trial_argv
from stratus.contract.env import REPORT_INTERVAL, TrialEnv
from stratus.contract.launch import LaunchSpec

log = logging.getLogger(__name__)

#: The exit code of a run whose agent was lost (no process exit code exists; non-zero, so it may restart).
AGENT_LOST_EXIT_CODE = -1
#: The grant that tells a waiting slot request it will never get slots (its workflow goes on at once).
NO_GRANT = {"agent_id": "", "num_nodes": 0}


def get_trial(ports: Ports, trial_id: int) -> Trial:
    """The trial, or a 404 that says where the ids are."""
    trial = ports.trials.get(trial_id)
    if trial is None:
        raise NotFoundError(
            f"trial {trial_id} not found; `det experiment describe` lists an experiment's trials"
        )
    return trial


def handle_launch(ports: Ports, message: messages.Launch) -> None:
    run_id = message.run_id
    run = ports.runs.get(run_id)
    if run is None:
        raise NotFoundError(f"run {run_id} not found")
    trial = ports.trials.get(run.trial_id)
    if run.state == RunState.ASSIGNED and _canceled(trial):
        # Its trial was canceled while the run waited for its launch: it never starts.
        ports.runs.exit(run_id, -1, "canceled before it was launched")
        run = ports.runs.get(run_id) or run
    elif run.state == RunState.ASSIGNED and (run.pausing or run.requeue):
        # Paused or preempted while it waited for its launch: it gives its slots back unstarted.
        ports.runs.exit(run_id, 0, "stopped before it was launched")
        run = ports.runs.get(run_id) or run
    if run.state == RunState.ASSIGNED:
        launched = ports.compute.launch(run_id, message.token)
        ports.trials.transition(run.trial_id, TrialState.PULLING)
        experiment = ports.experiments.get(run.experiment_id)
        if launched is not None and experiment is not None:
            images.note_unused_image(ports, launched, experiment)
    elif run.state == RunState.EXITED:
        # The run ended before its launch was processed: answer the token so the workflow moves on.
        exit_code = run.exit_code if run.exit_code is not None else -1
        output = exit_output(run, trial, exit_code, run.reason or "")
        ports.workflows.succeed(message.token, output)
    else:
        # LAUNCHING or RUNNING: a redelivered message; the agent already has it. The trial's PULLING may
        # be what the first delivery failed before (refused unless the trial is still QUEUED).
        ports.trials.transition(run.trial_id, TrialState.PULLING)


def heartbeat(
    ports: Ports,
    agent_id: str,
    pool: str,
    slots: int,
    running: Sequence[str],
    *,
    stopping: bool = False,
    version: str | None = None,
) -> dict[str, Any]:
    if stopping:
        return _agent_stopping(ports, agent_id, pool, running)
    if ports.agents.heartbeat(agent_id, pool, slots, busy=bool(running), version=version):
        ports.queues.to_scheduler(
            pool,
            messages.CapacityChanged(pool).to_body(),
            dedup_id=f"capacity-{agent_id}-{ports.clock.now_iso()}",
        )
    launches = []
    kill = []
    preempt = []
    mine = ports.runs.for_agent(agent_id)
    live = {held.held_id for held in mine}
    for held in mine:
        if held.state == RunState.LAUNCHING and held.held_id not in running:
            launches.append(launch_spec(ports, held).to_json())
        if held.held_id in running:
            # A node is told with its run (the stop is marked on the run): every node's launcher must
            # pass it on (AdaptDL's replicas on each node save on SIGTERM), not only the chief's trainer.
            run = ports.runs.get(held.run_id) if isinstance(held, Node) else held
            if run is not None and run.preempt:
                preempt.append(held.held_id)  # paused or preempted: the agent tells its processes at once
    for run_id in running:
        if run_id not in live:
            kill.append(run_id)  # the control plane no longer expects it (ended, or canceled)
    return {
        "launch": launches,
        "kill": kill,
        "preempt": preempt,
        "heartbeat_interval_s": ports.settings.agent_heartbeat_s,
        "bell": ports.bells.url(agent_id),
    }


def _agent_stopping(ports: Ports, agent_id: str, pool: str, running: Sequence[str]) -> dict[str, Any]:
    """An agent's last beat: no slots from now on (so nothing more is granted on it), and what it holds
    but has not started goes back to the queue now rather than after the agent timeout."""
    ports.agents.heartbeat(agent_id, pool, 0)
    ports.queues.to_scheduler(
        pool, messages.CapacityChanged(pool).to_body(), dedup_id=f"capacity-{agent_id}-stopping"
    )
    for held in ports.runs.for_agent(agent_id):
        if held.held_id in running or held.state not in (RunState.ASSIGNED, RunState.LAUNCHING):
            continue
        run = ports.runs.get(held.run_id) if isinstance(held, Node) else held
        if run is None:
            continue
        ports.runs.tell_to_stop(run.run_id, pause=False)  # an ASSIGNED run: its launch ends it unstarted
        if run.state == RunState.LAUNCHING:
            end_run(ports, run, 0, f"agent {agent_id} stopped before starting it", requeue=True)
    ports.bells.forget(agent_id)
    return {"launch": [], "kill": [], "preempt": []}


def started(
    ports: Ports, agent_id: str, run_id: str, pid: int, instance: dict[str, Any] | None = None
) -> None:
    """A run's process started, on ``instance`` (what its agent runs on: priced at the run's exit)."""
    held = _held_by(ports, agent_id, run_id)
    if ports.runs.start(run_id, agent_id, pid, instance) is None:
        return  # a retried report
    run: Run | None = held if isinstance(held, Run) else None
    if isinstance(held, Node):
        # The run is RUNNING when its first node is.
        parent = ports.runs.get(held.run_id)
        if (
            parent is None
            or parent.agent_id is None
            or ports.runs.start(parent.run_id, parent.agent_id, pid, instance) is None
        ):
            return
        run = parent
    if run is not None:
        # Its launch's PULLING first, if that has not landed yet (the agent was rung before it was
        # written, or its write failed): refused unless the trial is still QUEUED.
        ports.trials.transition(run.trial_id, TrialState.PULLING)
        ports.trials.transition(run.trial_id, TrialState.RUNNING)


def exited(
    ports: Ports,
    agent_id: str,
    run_id: str,
    exit_code: int,
    reason: str,
    failed_rank: int | None = None,
    *,
    requeue: bool = False,
) -> None:
    """A run's process ended. ``requeue``: the agent stopped it for its own reasons (it is stopping: a
    scale-in, a spot reclaim), so its trial goes back to the queue whatever the exit code, and resumes
    from its latest checkpoint; it is neither completed nor counted as a restart."""
    held = _held_by(ports, agent_id, run_id)
    if held.state == RunState.EXITED:
        if (held.exit_code, held.reason) != (exit_code, reason[:MAX_REASON]):
            return  # ended by another (a kill, another node's failure, a lost agent): that one reports it
        # A retried report: what followed its exit's win may not all have happened (a failure in
        # between), so it is done again; each step is idempotent.
        told = f"requeued: {reason}" if requeue else reason
        if isinstance(held, Node) and _node_exited(
            ports, held, exit_code, told, failed_rank, requeue=requeue
        ):
            return
        report_again(ports, held, failed_rank, requeue=requeue)
        return
    if ports.runs.exit(run_id, exit_code, reason) is None:
        return
    if requeue:
        ports.runs.tell_to_stop(held.run_id, pause=False)
        reason = f"requeued: {reason}"
    if isinstance(held, Node):
        _node_exited(ports, held, exit_code, reason, failed_rank, requeue=requeue)
    else:
        _report_run_exit(ports, held, exit_code, reason, failed_rank, requeue=requeue)


def report_again(
    ports: Ports, held: Run | Node, failed_rank: int | None = None, *, requeue: bool = False
) -> None:
    """Report the exit of the EXITED run that `held` (this report's run, or node) ended, again, from the
    run as stored: the first report may have failed after winning (before the trial's record or the
    token's answer). Nothing changes once it was all done: the same values are written, and the token's
    answer is refused once given. A run its trial has moved on from was answered (that answer starts the
    next attempt); a run that another node's failure ended is that node's to report."""
    run = ports.runs.get(held.run_id)
    trial = ports.trials.get(run.trial_id) if run is not None else None
    if run is None or run.state != RunState.EXITED or trial is None:
        return
    if keys.run_id(trial.id, trial.attempts) != run.run_id:
        return
    if isinstance(held, Node) and run.exit_code != 0 and not _ended_by(run, held):
        return
    exit_code = run.exit_code if run.exit_code is not None else -1
    reason = run.reason or ""
    if requeue and "requeued: " not in reason:
        reason = f"requeued: {reason}"
    _report_run_exit(ports, run, exit_code, reason, failed_rank, requeue=requeue, again=True)


def _ended_by(run: Run, node: Node) -> bool:
    """Whether the failure of `node` ended the run (the reason `_node_exited` wrote names it first)."""
    return (run.reason or "").startswith(f"node {node.node_rank} of ")


def _node_exited(
    ports: Ports, node: Node, exit_code: int, reason: str, failed_rank: int | None, *, requeue: bool
) -> bool:
    """One node of a multi-node run ended: the first failure ends the run (the other nodes are told to
    stop at their agents' next heartbeat); a clean exit ends it once every node has exited cleanly.
    True when this call ended the run and reported it."""
    run = ports.runs.record_node_exit(node.run_id, node.node_rank, exit_code)
    if run is None:
        return False  # the run has ended already: another node failed first
    count = len(run.nodes)
    if exit_code == 0:
        if len(run.node_exits) < count:
            return False  # the others are still running
        reason = f"all {count} nodes exited with code 0"
    else:
        reason = f"node {node.node_rank} of {count} (agent {node.agent_id}): {reason}"
    if ports.runs.exit(run.run_id, exit_code, reason) is None:
        return False
    for other in range(count):
        if other != node.node_rank:
            node_id = keys.node_id(run.run_id, other)
            ports.runs.exit(node_id, -1, f"stopped: node {node.node_rank} ended the run")
            ports.compute.stop(node_id)
    _report_run_exit(ports, run, exit_code, reason, failed_rank, requeue=requeue)
    return True


def agents_lost(ports: Ports, run: Run, agents: Sequence[str], timeout_s: float) -> bool:
    """End a run held by agents that stopped heartbeating (their processes are presumed gone with them);
    the workflow then restarts the trial elsewhere or fails it. False if the run had ended already."""
    names = ", ".join(agents)
    if run.state != RunState.RUNNING:
        # Its process never started: not the trial's failure; it goes back to the queue.
        reason = f"lost agent {names} before the run started: no heartbeat for {timeout_s:.0f} s"
        if not end_run(ports, run, AGENT_LOST_EXIT_CODE, reason, requeue=True):
            return False
        log.warning("run %s: %s", run.run_id, reason)
        return True
    reason = f"lost agent {names}: no heartbeat for {timeout_s:.0f} s; the run's processes are presumed gone"
    # A machine that was draining went away as announced (a spot reclaim): not the trial's failure.
    reclaimed = any(getattr(ports.agents.get(agent), "draining", False) for agent in agents)
    if reclaimed:
        reason = (
            f"lost agent {names}, whose machine was reclaimed; the trial resumes from its last checkpoint"
        )
    if not end_run(ports, run, AGENT_LOST_EXIT_CODE, reason, requeue=reclaimed):
        return False
    log.warning("run %s: %s", run.run_id, reason)
    return True


def end_run(ports: Ports, run: Run, exit_code: int, reason: str, *, requeue: bool = False) -> bool:
    """End a launched run from the control plane (its agents lost, or the user killed it): recorded
    EXITED, so its agents kill what is left of it at their next heartbeat, and its exit answered (with
    ``requeue``, its trial goes back to the queue). False if the run had ended already."""
    if ports.runs.exit(run.run_id, exit_code, reason) is None:
        return False
    for rank in range(len(run.nodes)):
        ports.runs.exit(keys.node_id(run.run_id, rank), exit_code, reason)
    # Told before any call to stop its compute (a Batch or SageMaker API that may fail): once answered,
    # a failed stop leaves only processes that their agents kill at the next heartbeat.
    _report_run_exit(ports, run, exit_code, reason, None, requeue=requeue)
    ports.compute.stop(run.run_id)
    for rank in range(len(run.nodes)):
        ports.compute.stop(keys.node_id(run.run_id, rank))
    return True


def leave_queue(ports: Ports, run: Run, exit_code: int, reason: str) -> None:
    """A run waiting for slots ends unstarted, and its slot request is answered with no agent, so its
    workflow goes on at once (its launch finds the run ended). Also for a run that left the queue this
    way already: the first call may have failed before its answer (a repeat is refused once answered)."""
    if not run.slot_token or run.state not in (RunState.PENDING, RunState.EXITED):
        return
    if run.state == RunState.PENDING:
        ports.runs.exit(run.run_id, exit_code, reason)
    current = ports.runs.get(run.run_id)
    if current is not None and current.state == RunState.EXITED and current.assigned_at is None:
        ports.workflows.succeed(run.slot_token, NO_GRANT)  # never granted: its wait for slots ends


def _report_run_exit(
    ports: Ports,
    run: Run,
    exit_code: int,
    reason: str,
    failed_rank: int | None,
    *,
    requeue: bool = False,
    again: bool = False,
) -> None:
    """The run has exited: record it (and what it used) on the trial and answer the workflow's token.
    ``again``: a repeat of a report that may have been made (its failure is charted by the first only)."""
    trial = ports.trials.get(run.trial_id)
    costs.record_run_usage(ports, run, trial, exit_code)
    if trial is not None and trial.invalid_hp and exit_code == 0:
        reason = trial.exit_reason or reason
    if exit_code == 0 and trial is not None:
        failed_rank = trial.failed_rank  # a clean exit keeps the rank an earlier run failed on
    ports.trials.record_exit(run.trial_id, exit_code, reason, failed_rank)
    watchlist.mark(ports, run.experiment_id)  # whatever happens to the event this exit leads to
    output = exit_output(run, trial, exit_code, reason, requeue=requeue)
    if not again:
        telemetry.run_failed(ports, run, trial, exit_code, output)  # a restart or an error, charted
    if run.launch_token:
        ports.workflows.succeed(run.launch_token, output)


def exit_output(
    run: Run, trial: Trial | None, exit_code: int, reason: str, *, requeue: bool = False
) -> dict[str, Any]:
    """The answer to a run's launch token, which the workflow's `Exited?` choice reads: `canceled` (the
    user canceled or killed the trial: it ends CANCELED), else `paused` (a clean exit of a run told to
    pause, by the searcher or the user: the trial waits PAUSED), else `requeue` (a clean exit of a run
    preempted to make room, or any exit of a run its agent stopped: the trial goes back to the queue)."""
    paused = exit_code == 0 and run.pausing
    output: dict[str, Any] = {"exit_code": exit_code, "reason": reason[:1000], "paused": paused}
    if _canceled(trial):
        output["canceled"] = True
    elif not paused and (requeue or (exit_code == 0 and run.requeue)):
        output["requeue"] = True
    return output


def _canceled(trial: Trial | None) -> bool:
    """The trial was canceled or killed: its run's exit ends it CANCELED (the workflow's Cancel)."""
    return trial is not None and trial.state in (
        TrialState.STOPPING_CANCELED,
        TrialState.STOPPING_KILLED,
        TrialState.CANCELED,
    )


def rendezvous(
    ports: Ports, run: Run, node_rank: int | None = None, addr: str = "", port: int | None = None
) -> dict[str, Any]:
    """A multi-node run's rendezvous record: each node's launcher adds its address (the chief its port too),
    then reads the record until every node is in it. Without ``node_rank``, only reads it."""
    count = len(run.nodes)
    if count < 2:
        raise BadRequestError(
            f"run {run.run_id} runs on one node and has no rendezvous; a launcher reaches this only "
            "with STRATUS_NUM_NODES > 1 (unset it, or set it to 1)"
        )
    if node_rank is not None:
        if not 0 <= node_rank < count:
            raise BadRequestError(
                f"node_rank {node_rank} is outside 0..{count - 1}: run {run.run_id} has {count} nodes"
            )
        if node_rank == 0 and port is None:
            raise BadRequestError("the chief (node_rank 0) must give the port its rank 0 will listen on")
        entry = RendezvousEntry(addr, port if node_rank == 0 else None)
        updated = ports.runs.register_rendezvous(run.run_id, node_rank, entry)
        if updated is None:
            raise ConflictError(f"run {run.run_id} has ended; its rendezvous is closed")
        run = updated
    nodes = [
        {"node_rank": rank, "addr": entry.addr, "port": entry.port}
        for rank, entry in sorted(run.rendezvous.items())
    ]
    return {"run_id": run.run_id, "num_nodes": count, "nodes": nodes, "ready": len(nodes) == count}


def _held_by(ports: Ports, agent_id: str, run_id: str) -> Run | Node:
    held = ports.runs.held(run_id)
    if held is None:
        raise NotFoundError(f"run {run_id} not found")
    if held.agent_id != agent_id:
        raise ForbiddenError(f"run {run_id} is not assigned to agent {agent_id}")
    return held


def launch_spec(ports: Ports, held: Run | Node) -> LaunchSpec:
    """What an agent needs to start a run, or one node of a multi-node run (``held`` is then the node:
    the processes still act for the run, with its token, and learn their node from the environment)."""
    settings = ports.settings
    if isinstance(held, Node):
        parent = ports.runs.get(held.run_id)
        if parent is None:
            raise NotFoundError(f"run {held.run_id} of node {held.node_id} not found")
        run = parent
    else:
        run = held
    trial = ports.trials.get(run.trial_id)
    experiment = ports.experiments.get(run.experiment_id)
    if trial is None or experiment is None:
        raise NotFoundError(f"trial of run {run.run_id} not found")
    config = experiment.parsed_config
    environment = config.environment.variables_for(gpu=images.on_gpus(settings.pool(run.pool)))
    # How often its reports are sent, as this backend sets it (the experiment's own value wins).
    environment.setdefault(REPORT_INTERVAL, f"{settings.report_interval_s:g}")
    node = held if isinstance(held, Node) else None
    trial_env = TrialEnv(
        master=settings.api_url,
        trial_id=trial.id,
        experiment_id=experiment.id,
        run_id=run.run_id,
        run_token=tokens.run_token(settings.token_secret, run.run_id),
        hparams=trial.hparams,
        latest_checkpoint=trial.latest_checkpoint or None,
        trial_seed=trial.trial_seed,
        slots=run.slots,
        num_nodes=len(run.nodes) if node else None,
        node_rank=node.node_rank if node else None,
    )
    environment.update(trial_env.to_env())
    environment.update(elastic.run_environment(settings, run, config, environment))
    return LaunchSpec(
        run_id=held.held_id,
        trial_id=trial.id,
        experiment_id=experiment.id,
        slots=held.slots,
        entrypoint=tuple(entrypoint_argv(config)),
        environment=environment,
        context_url=(
            ports.blobs.presign_get(keys.context_key(experiment.context_sha256))
            if experiment.context_sha256
            else None
        ),
        api_url=settings.api_url,
    )


def entrypoint_argv(config: cfg.ExperimentConfig) -> list[str]:
    """The argv of a trial's entrypoint: Determined's legacy `model_def:TrialClass` form by its rule
    (`stratus.contract.entrypoint`); anything else follows the config's own rules (argv or shell)."""
    legacy = legacy_trial_argv(config.entrypoint, config.resources.slots_per_trial)
    return legacy if legacy is not None else cfg.entrypoint_argv(config)
