"""Runs (one attempt of a trial: first a job in its pool's queue, then a process on an agent) and agents.

Sparse GSIs keep the scheduler's reads small: `pending_pool` exists only while a run waits for slots,
`alloc_pool` only while it holds them, `active_agent` only while an agent should be running it.

A run on several nodes (`nodes`: the agents, chief first) is launched as one node record per node
(`kind = node`, id `<run>-node<k>`, keyed like runs so `by_agent` finds them); the run record itself then
has no `active_agent`, collects each node's exit code in `node_exits`, and holds the trial's rendezvous
record (`rendezvous`: node rank → address and port).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.aws import dynamo, queue_table
from chalicelib.domain.queue_head import QueueSummary, queue_fields, sort_key
from chalicelib.domain.run_records import Node, RendezvousEntry, Run, held_record
from chalicelib.domain.states import RUN_TRANSITIONS, RunState, allowed_sources
from chalicelib.domain.updates import RunMove, RunMoves
from chalicelib.errors import ConflictError
from chalicelib.services.agent_store import AgentRecord, Host

#: Attempts at a transaction that another write got in the way of.
_TRIES = 5


def _sources(target: RunState) -> list[str]:
    return [str(s) for s in allowed_sources(RUN_TRANSITIONS, target)]


class DynamoRuns(RunMoves):
    def __init__(self) -> None:
        self._table = dynamo.table("runs")

    def put_request(self, request: Run) -> bool:
        queued = replace(request, state=RunState.PENDING)
        item = {**queued.to_item(), **queue_fields(queued), "version": 0}
        for _ in range(_TRIES):
            if queue_table.transact([queue_table.put_run(item), queue_table.count_change(queued, +1)]):
                return True
            if self.held(request.run_id) is not None:
                return False  # a redelivered request: the first one is already queued
        raise RuntimeError(f"run {request.run_id}: could not queue its request (conflicting writes)")

    def get(self, run_id: str) -> Run | None:
        record = self.held(run_id)
        return record if isinstance(record, Run) else None

    def held(self, run_id: str) -> Run | Node | None:
        item = self._table.get_item(Key={"run_id": run_id}, ConsistentRead=True).get("Item")
        return held_record(dynamo.plain(item)) if item else None

    def pending(self, pool: str) -> list[Run]:
        return self._runs(dynamo.query_index(self._table, "pending", "pending_pool", pool))

    def queue_summary(self, pool: str) -> QueueSummary:
        return queue_table.summary(pool)

    def queue_page(self, pool: str, after: str | None, limit: int) -> tuple[list[Run], str | None]:
        return queue_table.page("pending", "pending_pool", pool, after, limit)

    def job_queue_page(
        self, pool: str, job: str, after: str | None, limit: int
    ) -> tuple[list[Run], str | None]:
        return queue_table.page("pending_job", "pending_job", f"{pool} {job}", after, limit)

    def prune_queue_summary(self, pool: str) -> None:
        queue_table.prune(pool)

    def allocated(self, pool: str) -> list[Run]:
        return self._runs(dynamo.query_index(self._table, "allocated", "alloc_pool", pool))

    def for_agent(self, agent_id: str) -> list[Run | Node]:
        items = dynamo.query_index(self._table, "by_agent", "active_agent", agent_id)
        return [held_record(item) for item in items]

    def delete(self, run_id: str) -> None:
        for _ in range(_TRIES):
            record = self.held(run_id)
            if not isinstance(record, Run) or record.state is not RunState.PENDING:
                self._table.delete_item(Key={"run_id": run_id})
                return
            delete = queue_table.delete_run(run_id, record.version)
            if queue_table.transact([delete, queue_table.count_change(record, -1)]):
                return
        raise RuntimeError(f"run {run_id}: could not delete it (conflicting writes)")

    @staticmethod
    def _runs(items: Any) -> list[Run]:
        return [Run.from_item(item) for item in items]

    def _move(self, run_id: str, move: RunMove) -> dict[str, Any] | None:
        sources = _sources(move.target)
        if str(RunState.PENDING) in sources:
            # Leaving the queue: the pool's summary moves with the record, in one transaction.
            for _ in range(_TRIES):
                record = self.held(run_id)
                if not isinstance(record, Run) or record.state is not RunState.PENDING:
                    break
                moved = self._leave_queue(record, move)
                if moved is not None:
                    return moved
            sources = [s for s in sources if s != str(RunState.PENDING)]
            if not sources:
                return None
        update = dynamo.transition_update(str(move.target), sources, *_extra(move))
        return dynamo.conditional_update(self._table, {"run_id": run_id}, *update)

    def _leave_queue(self, run: Run, move: RunMove) -> dict[str, Any] | None:
        """Move a PENDING run out of the queue if it is still the version read; its new record, or None."""
        condition, values = _extra(move)[2:] if move.agent_id is not None else ("", {})
        condition = " AND ".join(filter(None, ["#version = :read", condition]))
        update = dynamo.transition_update(
            str(move.target),
            [str(RunState.PENDING)],
            move.sets,
            move.removes,
            condition,
            {**values, ":read": run.version},
        )
        if not queue_table.transact(
            [queue_table.run_update(run.run_id, update), queue_table.count_change(run, -1)]
        ):
            return None
        item = self._table.get_item(Key={"run_id": run.run_id}, ConsistentRead=True).get("Item")
        return dynamo.plain(item) if item else None

    def _now(self) -> str:
        return dynamo.now_iso()

    def _put_node(self, node: Node) -> None:
        try:
            self._table.put_item(Item=node.to_item(), ConditionExpression="attribute_not_exists(run_id)")
        except ClientError as error:
            if not dynamo.is_condition_failure(error):
                raise

    def record_node_exit(self, run_id: str, node_rank: int, exit_code: int) -> Run | None:
        """Note one node's exit code on its run; the run as it is now, or None once the run has exited."""
        return self._moved(
            dynamo.update_map_entry(
                self._table, {"run_id": run_id}, "node_exits", str(node_rank), exit_code, _live_condition()
            )
        )

    def register_rendezvous(self, run_id: str, node_rank: int, entry: RendezvousEntry) -> Run | None:
        """Add a node to the run's rendezvous record; None when the run is not launched or has exited."""
        value = {"addr": entry.addr, "port": entry.port}
        return self._moved(
            dynamo.update_map_entry(
                self._table, {"run_id": run_id}, "rendezvous", str(node_rank), value, _live_condition()
            )
        )

    @staticmethod
    def _moved(item: dict[str, Any] | None) -> Run | None:
        return Run.from_item(item) if item is not None else None

    def record_log_batch(self, run_id: str, seq: int) -> None:
        dynamo.update_fields(
            self._table,
            {"run_id": run_id},
            {"log_seq": seq},
            condition="attribute_exists(#pk) AND (attribute_not_exists(log_seq) OR log_seq < :seq)",
            condition_values={":seq": seq},
            pk="run_id",
        )

    def mark_pausing(self, run_id: str) -> None:
        dynamo.update_fields(self._table, {"run_id": run_id}, {"pausing": True}, pk="run_id")

    def update_job(self, run_id: str, fields: Mapping[str, Any], *, only_pending: bool = False) -> Run | None:
        if "pending_pool" in fields:
            return self._move_pool(run_id, fields)
        states = [RunState.PENDING] if only_pending else [s for s in RunState if s is not RunState.EXITED]
        states_in = {f":s{i}": str(state) for i, state in enumerate(states)}
        names = {"#state": "state", "#kind": "kind"}
        values: dict[str, Any] = dict(states_in)
        assignments = []
        for i, (name, value) in enumerate(fields.items()):
            names[f"#f{i}"] = name
            values[f":v{i}"] = dynamo.to_dynamo(value)
            assignments.append(f"#f{i} = :v{i}")
        # A node record has `kind`; a missing item has no `state`, so the condition fails for it too.
        condition = f"attribute_not_exists(#kind) AND #state IN ({', '.join(states_in)})"
        item = dynamo.conditional_update(
            self._table, {"run_id": run_id}, "SET " + ", ".join(assignments), condition, names, values
        )
        if item is None:
            return None
        run = Run.from_item(item)
        key = sort_key(run)
        if run.state is RunState.PENDING and item.get("queue_key") != key:
            # Its place in the queue changed (priority, queue position): the index's sort key follows.
            dynamo.update_fields(
                self._table,
                {"run_id": run_id},
                {"queue_key": key},
                condition="attribute_exists(#pk) AND attribute_exists(pending_pool)",
                pk="run_id",
            )
        return run

    def _move_pool(self, run_id: str, fields: Mapping[str, Any]) -> Run | None:
        """A waiting run to another pool's queue, both pools' summaries with it; None once it is not
        waiting. ConflictError when other writes kept getting in the way (every enqueue and grant of
        either pool moves its summary): the run still waits where it was, and the caller must not read
        that as "granted meanwhile"."""
        for _ in range(_TRIES):
            run = self.get(run_id)
            if run is None or run.state is not RunState.PENDING:
                return None
            moved = replace(run, **{k: v for k, v in fields.items() if k != "pending_pool"})
            sets = {**fields, **queue_fields(moved)}
            update = dynamo.transition_update(
                str(RunState.PENDING),
                [str(RunState.PENDING)],
                sets,
                (),
                "#version = :read",
                {":read": run.version},
            )
            changes = [queue_table.count_change(run, -1), queue_table.count_change(moved, +1)]
            if moved.pool == run.pool:
                changes = []
            if queue_table.transact([queue_table.run_update(run_id, update), *changes]):
                return self.get(run_id)
        run = self.get(run_id)
        if run is None or run.state is not RunState.PENDING:
            return None
        raise ConflictError(
            f"run {run_id}: its pool's queue kept changing while it was moved; run the update again"
        )

    def note_task_beat(self, run_id: str, at: str) -> None:
        dynamo.update_fields(self._table, {"run_id": run_id}, {"beat_at": at}, pk="run_id")

    def note_wait_reason(self, run_id: str, reason: str) -> None:
        dynamo.update_fields(
            self._table,
            {"run_id": run_id},
            {"wait_reason": reason[:1000]},
            condition="attribute_exists(#pk) AND attribute_exists(pending_pool)",  # still queued
            pk="run_id",
        )

    def note_compute_ref(self, run_id: str, ref: str) -> None:
        dynamo.update_fields(self._table, {"run_id": run_id}, {"compute_ref": ref}, pk="run_id")

    def tell_to_stop(self, run_id: str, *, pause: bool) -> None:
        flag = "pausing" if pause else "requeue"
        dynamo.update_fields(self._table, {"run_id": run_id}, {"preempt": True, flag: True}, pk="run_id")

    def ask_to_stop(self, run_id: str) -> None:
        dynamo.update_fields(self._table, {"run_id": run_id}, {"preempt": True}, pk="run_id")


def _extra(move: RunMove) -> tuple[dict[str, Any], tuple[str, ...], str, dict[str, Any]]:
    """A move's sets, removes and the condition of an agent's own move (`transition_update`'s arguments)."""
    if move.agent_id is None:
        return dict(move.sets), move.removes, "", {}
    return dict(move.sets), move.removes, "agent_id = :agent", {":agent": move.agent_id}


def _live_condition() -> tuple[str, dict[str, Any]]:
    return "#state IN (:launching, :running)", {
        ":launching": str(RunState.LAUNCHING),
        ":running": str(RunState.RUNNING),
    }


class DynamoAgents:
    def __init__(self) -> None:
        self._table = dynamo.table("agents")

    def heartbeat(
        self, agent_id: str, pool: str, slots: int, *, busy: bool = False, version: str | None = None
    ) -> bool:
        """Record the agent; True when it is new or its capacity changed (the scheduler should run)."""
        now = dynamo.number(dynamo.now_epoch())
        update = "SET #pool = :p, slots = :s, last_seen = :t, first_seen = if_not_exists(first_seen, :t)"
        names, values = {"#pool": "pool"}, {":p": pool, ":s": slots, ":t": now}
        if busy:
            update += ", busy_at = :t"
        if version is not None:
            update += ", #version = :v"
            names["#version"], values[":v"] = "version", version
        answer = self._table.update_item(
            Key={"agent_id": agent_id},
            UpdateExpression=update,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
            ReturnValues="ALL_OLD",
        )
        old: dict[str, Any] = dynamo.plain(answer.get("Attributes") or {})
        return bool(old.get("slots") != slots or old.get("pool") != pool)

    def set_draining(self, agent_id: str) -> bool:
        try:
            self._table.update_item(
                Key={"agent_id": agent_id},
                UpdateExpression="SET draining = :yes",
                ConditionExpression="attribute_exists(agent_id) AND NOT draining = :yes",
                ExpressionAttributeValues={":yes": True},
            )
        except ClientError as e:
            if dynamo.is_condition_failure(e):
                return False
            raise
        return True

    def set_disabled(self, agent_id: str, disabled: bool) -> AgentRecord | None:
        try:
            answer = self._table.update_item(
                Key={"agent_id": agent_id},
                UpdateExpression="SET disabled = :d",
                ConditionExpression="attribute_exists(agent_id)",
                ExpressionAttributeValues={":d": disabled},
                ReturnValues="ALL_NEW",
            )
        except ClientError as e:
            if dynamo.is_condition_failure(e):
                return None
            raise
        return AgentRecord.of(dynamo.plain(answer["Attributes"]))

    def alive(self, pool: str, timeout_s: float) -> list[Host]:
        horizon = dynamo.now_epoch() - timeout_s
        return [
            Host(
                record.agent_id,
                record.slots,
                accepting=not record.draining and not record.disabled,
                draining=record.draining,
            )
            for record in self.in_pool(pool)
            if record.last_seen >= horizon
        ]

    def get(self, agent_id: str) -> AgentRecord | None:
        item = self._table.get_item(Key={"agent_id": agent_id}, ConsistentRead=True).get("Item")
        return AgentRecord.of(item) if item else None

    def in_pool(self, pool: str) -> list[AgentRecord]:
        items = dynamo.query_index(self._table, "by_pool", "pool", pool)
        return sorted((AgentRecord.of(i) for i in items), key=lambda agent: agent.agent_id)

    def every(self) -> list[AgentRecord]:
        items = list(dynamo.scan_all(self._table))
        return sorted((AgentRecord.of(i) for i in items), key=lambda agent: agent.agent_id)
