"""What the services need from the outside world, as protocols. `chalicelib/aws/` implements them over
DynamoDB, S3, SQS, Step Functions and CloudWatch Logs; `chalicelib/memory/` implements every one of them
in memory, with the same semantics (the services' unit tests run on it). The settings and the clock reach
the services here too, never through globals.

Every record is a typed value (`chalicelib.domain.records`, `chalicelib.domain.run_records`), changed
through named updates written once for every store (`chalicelib.domain.updates`); `chalicelib/api/views.py`
renders them as the API's shapes. Where runs execute is the compute backend's business (`ComputeBackend`).
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from chalicelib.domain.queue_head import QueueSummary
from chalicelib.domain.records import Checkpoint, Experiment, LogLine, MetricReport, SearcherWish, Trial
from chalicelib.domain.run_records import Node, RendezvousEntry, Run
from chalicelib.domain.states import ExperimentState, TrialState
from chalicelib.services.agent_store import AgentStore, Host
from chalicelib.services.hints_store import HintsStore
from chalicelib.services.metrics_sink import MetricsSink
from chalicelib.services.price_source import PriceSource
from chalicelib.settings import Settings


@dataclass(frozen=True)
class Demand:
    """What a scheduling pass could not place, for a backend that scales: the slots of each request it
    read and could not place (the head of the queue), and the slots of the requests it did not read."""

    blocked: tuple[int, ...] = ()
    unread_slots: int = 0


class ExperimentStore(Protocol):
    def create(self, experiment: Experiment) -> None: ...
    def get(self, experiment_id: int) -> Experiment | None: ...
    def list(
        self, limit: int, before: int | None = None, *, archived: bool | None = None
    ) -> tuple[list[Experiment], int | None]:
        """Up to `limit` experiments newest first, with ids below `before`; and the next page's `before`
        (None: no more). A stable cursor: creates between pages neither repeat nor skip a row."""
        ...

    def transition(
        self, experiment_id: int, target: ExperimentState, *, end_time: str | None = None
    ) -> Experiment | None: ...
    def set_archived(self, experiment_id: int, archived: bool) -> Experiment | None:
        """Archive or unarchive an experiment that has ended; None when it has not (or does not exist)."""
        ...

    def save_searcher(
        self, experiment_id: int, snapshot: Mapping[str, Any], expected_version: int
    ) -> bool: ...
    def update_versioned(
        self, experiment_id: int, fields: Mapping[str, Any], expected_version: int
    ) -> Experiment | None:
        """Set fields a user changes (the job's priority, weight, queue_position, resource_pool and
        max_slots; name, description, labels) if the record is still at `expected_version` (bumping
        it); None when it moved meanwhile (or does not exist)."""
        ...

    def record_progress(self, experiment_id: int, progress: float) -> None: ...
    def raise_progress(self, experiment_id: int, progress: float) -> None:
        """Set the experiment's progress unless it is at `progress` or beyond already (two reports that
        race keep the further one)."""
        ...

    def record_trial_count(self, experiment_id: int, num_trials: int) -> None: ...
    def watch(self, experiment_id: int, check_at: int) -> None:
        """Ask the sweep to look at the experiment from `check_at` (epoch seconds) on
        (`chalicelib.services.searcher_watch`); a later mark replaces an earlier one."""
        ...

    def unwatch(self, experiment_id: int, check_at: int) -> bool:
        """Drop the mark read as `check_at`; False when a newer mark replaced it meanwhile (it stands)."""
        ...

    def due_for_check(self, now: float, limit: int) -> builtins.list[tuple[int, int]]:
        """Up to `limit` marked experiments whose `check_at` has come, earliest first, with it."""
        ...

    def delete(self, experiment_id: int) -> None:
        """Remove the record of an experiment in DELETING (nothing when it is gone or in another state)."""
        ...


class TrialStore(HintsStore, Protocol):
    def create(self, trial: Trial) -> None: ...
    def get(self, trial_id: int) -> Trial | None: ...
    def for_experiment(self, experiment_id: int, *, consistent: bool = False) -> list[Trial]:
        """The experiment's trials by id, from an eventually consistent index; `consistent`: each trial
        not ended as it is now (for deciding whether every trial has ended)."""
        ...

    def transition(
        self, trial_id: int, target: TrialState, *, end_time: str | None = None
    ) -> Trial | None: ...
    def record_exit(self, trial_id: int, exit_code: int, reason: str, failed_rank: int | None) -> None:
        """The exit of the trial's latest run (`failed_rank` None clears the rank of an earlier one)."""
        ...

    def mark_invalid_hp(self, trial_id: int, reason: str) -> None: ...
    def record_progress(self, trial_id: int, progress: float) -> None: ...
    def set_searcher_action(
        self,
        trial_id: int,
        action: SearcherWish,
        *,
        target_length: int | None = None,
        early_stopped: bool | None = None,
        seq: int | None = None,
    ) -> bool: ...
    def clear_searcher_pending(self, trial_id: int, length: int | None = None) -> None:
        """The searcher answered the trial's result (possibly with nothing: the target stands); with
        `length`, only while the trial reported nothing beyond it."""
        ...

    def record_training(self, trial_id: int, steps_completed: int) -> Trial | None:
        """Raise the trial's trained batches to `steps_completed`; the trial as it was before, or None
        when it was there already (or is gone)."""
        ...

    def record_usage(self, trial_id: int, usage: Mapping[str, Mapping[str, Any]]) -> None: ...
    def record_validation(
        self,
        trial_id: int,
        steps_completed: int,
        metrics: Mapping[str, Any],
        searcher_value: float | None,
        smaller_is_better: bool,
    ) -> None: ...
    def set_latest_checkpoint(self, trial_id: int, uuid: str, steps_completed: int) -> None: ...
    def resume_paused(self, trial_id: int, generation: int, attempt: int, *, once: bool = True) -> bool: ...
    def record_searcher_length(self, trial_id: int, length: int) -> Trial | None: ...
    def delete(self, trial_id: int) -> None: ...  # nothing when the record is gone already


class RunStore(Protocol):
    """Runs, and the nodes of runs on several agents (an id names either: `held` tells which)."""

    def put_request(self, request: Run) -> bool:
        """Queue a run's slot request (a PENDING run) once; False when it is queued already."""
        ...

    def get(self, run_id: str) -> Run | None: ...
    def held(self, run_id: str) -> Run | Node | None:
        """A run, or one node of a run, as an agent holds it (by the id its launch spec gave)."""
        ...

    def pending(self, pool: str) -> list[Run]:
        """Every request waiting in the pool, in queue order (for users: a pass reads `queue_page`)."""
        ...

    def queue_summary(self, pool: str) -> QueueSummary:
        """What waits in the pool, as kept with every request entering and leaving its queue."""
        ...

    def queue_page(self, pool: str, after: str | None, limit: int) -> tuple[list[Run], str | None]:
        """Up to ``limit`` requests of the pool's queue after the sort key ``after`` (from the head when
        None), in queue order; and the sort key to go on from (None: the queue ends there)."""
        ...

    def job_queue_page(
        self, pool: str, job: str, after: str | None, limit: int
    ) -> tuple[list[Run], str | None]:
        """`queue_page` of one job's requests."""
        ...

    def prune_queue_summary(self, pool: str) -> None:
        """Forget the summary's counters of jobs with nothing queued."""
        ...

    def allocated(self, pool: str) -> list[Run]: ...
    def for_agent(self, agent_id: str) -> list[Run | Node]: ...
    def assign(self, run_id: str, agent_id: str, nodes: tuple[str, ...] = ()) -> Run | None: ...
    def launch(self, run_id: str, launch_token: str) -> Run | None: ...
    def start(self, run_id: str, agent_id: str, pid: int, instance: Any = None) -> Run | Node | None: ...
    def exit(self, run_id: str, exit_code: int, reason: str) -> Run | Node | None: ...
    def record_log_batch(self, run_id: str, seq: int) -> None: ...
    def mark_pausing(self, run_id: str) -> None: ...
    def update_job(self, run_id: str, fields: Mapping[str, Any], *, only_pending: bool = False) -> Run | None:
        """Copy its job's changed fields onto a live run (not EXITED; only a PENDING one when
        `only_pending`: a pool change, with `pool` and `pending_pool`); None when it is not."""
        ...

    def note_task_beat(self, run_id: str, at: str) -> None:
        """When the run's workflow wait was last sent a heartbeat."""
        ...

    def note_wait_reason(self, run_id: str, reason: str) -> None:
        """Why a pending run waits (written by a pass only when it changed)."""
        ...

    def note_compute_ref(self, run_id: str, ref: str) -> None:
        """What the backend started for the run (a Batch job's id), to stop it by."""
        ...

    def tell_to_stop(self, run_id: str, *, pause: bool) -> None:
        """Set `preempt` (its processes' `should_preempt()` turns true) and `pausing` (pause: its clean
        exit pauses the trial) or `requeue` (preempted: its clean exit requeues it)."""
        ...

    def ask_to_stop(self, run_id: str) -> None:
        """Set `preempt` alone (a cancel): its processes checkpoint and exit; its trial says what the exit means."""
        ...

    def record_node_exit(self, run_id: str, node_rank: int, exit_code: int) -> Run | None: ...
    def register_rendezvous(self, run_id: str, node_rank: int, entry: RendezvousEntry) -> Run | None: ...
    def delete(self, run_id: str) -> None:
        """Remove a run's record, or one node's (by the id `held` takes); nothing when it is gone."""
        ...


class CheckpointStore(Protocol):
    def put(self, checkpoint: Checkpoint) -> Checkpoint: ...
    def get(self, uuid: str) -> Checkpoint | None: ...
    def for_trial(self, trial_id: int) -> list[Checkpoint]: ...
    def mark_deleted(self, uuid: str) -> None: ...
    def delete(self, uuid: str) -> None:
        """Remove a checkpoint's record (its files are the blobs' business); nothing when it is gone."""
        ...

    def add_user(self, uuid: str, experiment_id: int) -> Checkpoint | None:
        """Note that experiment `experiment_id` starts from the checkpoint (a set: twice is once); the
        checkpoint as it is now, or None when it has no record."""
        ...


class MetricStore(Protocol):
    def put(self, trial_id: int, group: str, steps_completed: int, metrics: Mapping[str, Any]) -> bool: ...
    def list(self, trial_id: int, group: str) -> list[MetricReport]: ...
    def groups(self, trial_id: int) -> builtins.list[str]: ...
    def delete_for_trial(self, trial_id: int) -> int:
        """Remove every report of a trial, of every group; how many went."""
        ...


class Ids(Protocol):
    def next(self, counter: str) -> int: ...
    def claim(self, key: str, counter: str) -> int: ...
    def forget(self, key: str) -> None:
        """Drop the claim `key` (its id is never drawn again); nothing when there is none."""
        ...


class Blobs(Protocol):
    def exists(self, key: str) -> bool: ...
    def presign_put(self, key: str) -> str: ...
    def presign_get(self, key: str) -> str: ...
    def uri(self, key: str) -> str: ...
    def delete_prefix(self, prefix: str) -> int: ...
    def presign_put_checked(self, key: str, sha256: str) -> tuple[str, dict[str, str]]:
        """A presigned PUT whose signature binds the body's SHA-256 (hex): the URL and the headers the
        upload must carry. S3 refuses other bytes with BadDigest."""
        ...

    def keys_under(self, prefix: str) -> list[str]: ...
    def sha256_of(self, key: str) -> tuple[str, int] | None:
        """The object's SHA-256 (hex) and size, hashed from its bytes; None when it is not there."""
        ...

    def copy(self, source: str, target: str) -> None: ...
    def delete(self, key: str) -> None: ...


class Workflows(Protocol):
    def start(self, name: str, payload: Mapping[str, Any]) -> str: ...
    def succeed(self, token: str, output: Mapping[str, Any]) -> bool: ...
    def heartbeat(self, token: str) -> bool:
        """Tell the execution waiting on `token` that its wait is alive; False when it waits no more."""
        ...


class Queues(Protocol):
    def to_scheduler(self, pool: str, body: Mapping[str, Any], dedup_id: str) -> None: ...
    def to_events(self, body: Mapping[str, Any]) -> None: ...


class Logs(Protocol):
    def put(self, trial_id: int, lines: Sequence[LogLine]) -> None: ...
    def get(
        self, trial_id: int, limit: int, next_token: str | None, tail: int | None
    ) -> tuple[list[LogLine], str | None]: ...
    def delete(self, trial_id: int) -> None:
        """Remove a trial's log stream; nothing when it has none."""
        ...


class ComputeBackend(Protocol):
    """Where runs execute: one port (`chalicelib.compute.router.ComputeRouter`: the agents, and each
    cloud backend through the registry `chalicelib.compute.backends`). A scheduling pass asks it for the pool's
    live hosts, tells it the slots the pool wants, launches the runs it granted and stops the runs the
    control plane ended on its own; a run's exit comes back through whoever sees it (an agent, a job
    state event) and answers the run's launch token."""

    def hosts(self, pool: str) -> list[Host]:
        """The pool's hosts that are alive now; a run on a host missing here is presumed lost."""
        ...

    def set_demand(self, pool: str, demand: Demand) -> str | None:
        """What the pass could not place (a backend that scales grows the pool for it); why the pool will
        not grow enough for it where that is known (the account's quota), for the requests' wait reasons."""
        ...

    def sweep(self, pool: str) -> None:
        """The periodic look at the pool (a backend that scales lets idle and broken machines go)."""
        ...

    def launch(self, run_id: str, launch_token: str) -> Run | None:
        """Start a granted run (its slots assigned) and keep the token its exit answers; the run as it
        is now, or None when it was not waiting for a launch."""
        ...

    def stop(self, run_id: str) -> None:
        """Make sure the processes of a run the control plane ended (recorded EXITED) stop."""
        ...

    def nudge(self, run_id: str) -> None:
        """The run was asked to stop (a pause, a preemption): pass it on now, not at a next poll."""
        ...


class Bells(Protocol):
    """Agents' doorbells (`chalicelib.aws.bells`): a ring makes the agent heartbeat now."""

    def ring(self, agent_id: str) -> None:
        """Wake the agent (best effort: its next heartbeat comes anyway)."""
        ...

    def url(self, agent_id: str) -> dict[str, Any] | None:
        """Where the agent long-polls for rings (`{"url", "expires_at", "wait_s"}`); None: no bell."""
        ...

    def forget(self, agent_id: str) -> None:
        """The agent stopped: its bell goes."""
        ...


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...

    def now_iso(self) -> str:
        """The time as the control plane records it (ISO-8601 UTC, milliseconds)."""
        ...


@dataclass(frozen=True)
class Ports:
    experiments: ExperimentStore
    trials: TrialStore
    runs: RunStore
    agents: AgentStore
    checkpoints: CheckpointStore
    metrics: MetricStore
    ids: Ids
    blobs: Blobs
    workflows: Workflows
    queues: Queues
    logs: Logs
    settings: Settings
    clock: Clock
    compute: ComputeBackend
    bells: Bells
    telemetry: MetricsSink
    prices: PriceSource
