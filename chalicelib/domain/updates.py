"""The named updates of experiments, trials and runs, written once for every store: each names the
fields it sets, and a store says only how to set fields on a record (`_set_trial`, `_move`, ...). The DynamoDB adapters and the
in-memory twin both inherit them, so the two cannot disagree about what an update writes."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chalicelib.domain.records import Item, SearcherWish
from chalicelib.domain.run_records import Node, Run, held_record
from chalicelib.domain.states import RunState

#: The longest exit reason kept on a trial (a launcher's report can be long; the API shows one line).
MAX_REASON = 1000


class ExperimentUpdates:
    def _set_experiment(self, experiment_id: int, fields: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def record_progress(self, experiment_id: int, progress: float) -> None:
        self._set_experiment(experiment_id, {"progress": progress})

    def record_trial_count(self, experiment_id: int, num_trials: int) -> None:
        self._set_experiment(experiment_id, {"num_trials": num_trials})


class TrialUpdates:
    def _set_trial(self, trial_id: int, fields: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def record_exit(self, trial_id: int, exit_code: int, reason: str, failed_rank: int | None) -> None:
        """The exit of the trial's latest run (`failed_rank` None clears the rank of an earlier one)."""
        fields = {"exit_code": exit_code, "exit_reason": reason[:MAX_REASON], "failed_rank": failed_rank}
        self._set_trial(trial_id, fields)

    def mark_invalid_hp(self, trial_id: int, reason: str) -> None:
        self._set_trial(trial_id, {"invalid_hp": True, "exit_reason": reason[:MAX_REASON]})

    def record_progress(self, trial_id: int, progress: float) -> None:
        self._set_trial(trial_id, {"progress": progress})

    def _set_trial_if_newer(self, trial_id: int, fields: Mapping[str, Any], seq: int) -> bool:
        """Set `fields` and `searcher_seq` = `seq` unless the trial holds a later `searcher_seq` (or is
        gone); whether it did."""
        raise NotImplementedError

    def _answer_trial(self, trial_id: int, length: int) -> None:
        """Clear `searcher_pending` unless the trial reported a searcher length beyond `length`."""
        raise NotImplementedError

    def _set_trial_unless_past(
        self, trial_id: int, field: str, value: int, fields: Mapping[str, Any]
    ) -> None:
        """Set `fields` unless the trial's `field` is past `value` already (reports may race: what they
        record only moves forward) or the trial is gone."""
        raise NotImplementedError

    def _set_trial_if_better(self, trial_id: int, field: str, value: float, smaller_is_better: bool) -> None:
        """Set `field` to `value` unless the trial holds one as good already (or is gone)."""
        raise NotImplementedError

    def set_searcher_action(
        self,
        trial_id: int,
        action: SearcherWish,
        *,
        target_length: int | None = None,
        early_stopped: bool | None = None,
        seq: int | None = None,
    ) -> bool:
        """What the searcher wants of the trial; with a new target to train to, or whether stopping it
        now is stopping it early. `seq`: the searcher outbox entry it carries out
        (`chalicelib.domain.searcher_outbox`): an entry older than one already applied to the trial (a
        stale consumer carrying it out late) changes nothing and answers False; the same entry again
        (a consumer that failed half-way through it) applies again."""
        fields: dict[str, Any] = {"searcher_action": action}
        if target_length is not None:
            fields["target_length"] = target_length
        if early_stopped is not None:
            fields["early_stopped"] = early_stopped
        if seq is not None:
            return self._set_trial_if_newer(trial_id, fields, seq)
        self._set_trial(trial_id, fields)
        return True

    def clear_searcher_pending(self, trial_id: int, length: int | None = None) -> None:
        """The searcher answered the trial's result (possibly with nothing: the target stands); with
        `length`, the result at that length, so an answer carried out late never answers a newer one."""
        if length is None:
            self._set_trial(trial_id, {"searcher_pending": False})
        else:
            self._answer_trial(trial_id, length)

    def record_usage(self, trial_id: int, usage: Mapping[str, Mapping[str, Any]]) -> None:
        """What the trial's runs used, by run id (`chalicelib.services.costs`: keyed, so idempotent)."""
        self._set_trial(trial_id, {"usage": usage})

    def record_validation(
        self,
        trial_id: int,
        steps_completed: int,
        metrics: Mapping[str, Any],
        searcher_value: float | None,
        smaller_is_better: bool,
    ) -> None:
        """A validation at `steps_completed`: the trial trained that far; its `metrics` (NaN and inf
        kept as null) are the latest unless a later validation's are recorded; `searcher_value` is the
        best when it beats the best so far (a NaN or inf never does)."""
        self._set_trial_unless_past(
            trial_id, "total_batches", steps_completed, {"total_batches": steps_completed}
        )
        finite = {
            k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in metrics.items()
        }
        latest = {"latest_validation": finite, "latest_validation_steps": steps_completed}
        self._set_trial_unless_past(trial_id, "latest_validation_steps", steps_completed, latest)
        if searcher_value is not None and math.isfinite(searcher_value):
            self._set_trial_if_better(trial_id, "best_validation", searcher_value, smaller_is_better)

    def set_latest_checkpoint(self, trial_id: int, uuid: str, steps_completed: int) -> None:
        """The trial's latest checkpoint, unless one at a later step is recorded already."""
        latest = {"latest_checkpoint": uuid, "latest_checkpoint_steps": steps_completed}
        self._set_trial_unless_past(trial_id, "latest_checkpoint_steps", steps_completed, latest)

    def record_hints(self, trial_id: int, hints: Mapping[str, Any], at: str) -> None:
        """An elastic trial's latest AdaptDL hints, stored whole, and when (`chalicelib.services.elastic`)."""
        self._set_trial(trial_id, {"elastic_hints": dict(hints), "hints_at": at})

    def record_rescale(self, trial_id: int, target: int, rescale: Mapping[str, Any]) -> None:
        """The elastic allocator resized the trial: its next run asks for `target` replicas."""
        self._set_trial(trial_id, {"elastic_target": target, "elastic_rescale": dict(rescale)})

    def record_replicas(self, trial_id: int, runs: Mapping[str, Mapping[str, Any]]) -> None:
        """Each of an elastic trial's runs with its replicas, by run id (set whole by the grant's winner)."""
        self._set_trial(trial_id, {"elastic_runs": {k: dict(v) for k, v in runs.items()}})


@dataclass(frozen=True)
class RunMove:
    """One move of a run record: to `target` (if `RUN_TRANSITIONS` allows it from the record's state,
    and, when `agent_id` is named, only on a record held by that agent), setting `sets` and removing
    the fields `removes`."""

    target: RunState
    sets: Mapping[str, Any]
    removes: tuple[str, ...] = ()
    agent_id: str | None = None


class RunMoves:
    """A run's moves through its states (`RUN_TRANSITIONS`), written once: what each move sets and
    removes (a `RunMove`). A store says how to carry out a move on a record (`_move`), how to put a node
    record once (`_put_node`) and what time it is."""

    def get(self, run_id: str) -> Run | None:
        raise NotImplementedError

    def _move(self, run_id: str, move: RunMove) -> Item | None:
        raise NotImplementedError

    def _put_node(self, node: Node) -> None:
        raise NotImplementedError

    def _now(self) -> str:
        raise NotImplementedError

    def assign(self, run_id: str, agent_id: str, nodes: tuple[str, ...] = ()) -> Run | None:
        """Slots granted: on `agent_id`, or on `nodes` (agents, chief first) for a run on several."""
        run = self.get(run_id)
        if run is None:
            return None
        fields: dict[str, Any] = {"agent_id": agent_id, "alloc_pool": run.pool, "assigned_at": self._now()}
        if nodes:
            per_node = run.slots // len(nodes)
            fields["nodes"] = [{"agent_id": agent, "slots": per_node} for agent in nodes]
        return _run(
            self._move(run_id, RunMove(RunState.ASSIGNED, fields, removes=("pending_pool", "pending_job")))
        )

    def launch(self, run_id: str, launch_token: str) -> Run | None:
        """Launched: kept for its agent's next heartbeat, or as one node record per agent."""
        run = self.get(run_id)
        if run is None:
            return None
        if run.nodes:
            # Node records first: a retried launch finds them (the put is conditional) before the run moves.
            for rank in range(len(run.nodes)):
                self._put_node(Node.launched(run, rank))
            fields: dict[str, Any] = {"launch_token": launch_token, "rendezvous": {}, "node_exits": {}}
        else:
            fields = {"launch_token": launch_token, "active_agent": run.agent_id}
        return _run(self._move(run_id, RunMove(RunState.LAUNCHING, {**fields, "launched_at": self._now()})))

    def start(
        self, run_id: str, agent_id: str, pid: int, instance: Mapping[str, Any] | None = None
    ) -> Run | Node | None:
        """Its process started, as its own agent reports (another agent's report changes nothing), on
        ``instance`` where the agent said what it runs on."""
        fields: dict[str, Any] = {"pid": pid, "started_at": self._now()}
        if instance:
            fields["instance"] = dict(instance)
        return _held(self._move(run_id, RunMove(RunState.RUNNING, fields, agent_id=agent_id)))

    def exit(self, run_id: str, exit_code: int, reason: str) -> Run | Node | None:
        """Ended, for any reason: out of every index (no slots held, no agent expected to run it)."""
        fields = {"exit_code": exit_code, "reason": reason[:MAX_REASON], "exited_at": self._now()}
        removes = ("pending_pool", "pending_job", "alloc_pool", "active_agent")
        return _held(self._move(run_id, RunMove(RunState.EXITED, fields, removes=removes)))


def _run(item: Item | None) -> Run | None:
    return Run.from_item(item) if item is not None else None


def _held(item: Item | None) -> Run | Node | None:
    return held_record(item) if item is not None else None
