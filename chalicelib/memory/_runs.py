"""Runs and agents in memory, with the semantics of `chalicelib.aws.run_table`: the sparse indexes
(`pending_pool`, `alloc_pool`, `active_agent`) exist only while a run waits, holds slots or should be
running on an agent; a run on several nodes is launched as one node record per node."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chalicelib.domain.queue_head import QueueSummary, queue_fields
from chalicelib.domain.run_records import Node, RendezvousEntry, Run, held_record
from chalicelib.domain.states import RUN_TRANSITIONS, RunState
from chalicelib.domain.updates import RunMove, RunMoves
from chalicelib.memory._items import Record, read, stored, transition
from chalicelib.services.agent_store import AgentRecord, Host
from chalicelib.services.ports import Clock

_LIVE = (str(RunState.LAUNCHING), str(RunState.RUNNING))


class MemoryRuns(RunMoves):
    def __init__(self, clock: Clock) -> None:
        self.items: dict[str, Record] = {}
        self._clock = clock

    def put_request(self, request: Run) -> bool:
        if request.run_id in self.items:
            return False  # a redelivered request: the first one is already queued
        item = stored(request.to_item())
        item.update(state=str(RunState.PENDING), version=0, **queue_fields(request))
        self.items[request.run_id] = item
        return True

    def get(self, run_id: str) -> Run | None:
        record = self.held(run_id)
        return record if isinstance(record, Run) else None

    def held(self, run_id: str) -> Run | Node | None:
        return _held(self.items.get(run_id))

    def pending(self, pool: str) -> list[Run]:
        return [Run.from_item(item) for item in self._indexed("pending_pool", pool, order="queue_key")]

    def queue_summary(self, pool: str) -> QueueSummary:
        sizes: dict[int, int] = {}
        jobs: dict[str, tuple[int, int]] = {}
        waiting = self.pending(pool)
        for run in waiting:
            sizes[run.slots] = sizes.get(run.slots, 0) + 1
            count, slots = jobs.get(str(run.experiment_id), (0, 0))
            jobs[str(run.experiment_id)] = (count + 1, slots + run.slots)
        return QueueSummary(len(waiting), sum(r.slots for r in waiting), sizes, jobs)

    def queue_page(self, pool: str, after: str | None, limit: int) -> tuple[list[Run], str | None]:
        return self._page("pending_pool", pool, after, limit)

    def job_queue_page(
        self, pool: str, job: str, after: str | None, limit: int
    ) -> tuple[list[Run], str | None]:
        return self._page("pending_job", f"{pool} {job}", after, limit)

    def prune_queue_summary(self, pool: str) -> None:
        """Nothing to prune: the summary is counted from the records."""

    def _page(
        self, attribute: str, value: str, after: str | None, limit: int
    ) -> tuple[list[Run], str | None]:
        items = [
            i
            for i in self._indexed(attribute, value, order="queue_key")
            if after is None or i["queue_key"] > after
        ]
        page = [Run.from_item(item) for item in items[:limit]]
        return page, (str(items[limit - 1]["queue_key"]) if len(items) > limit else None)

    def allocated(self, pool: str) -> list[Run]:
        return [Run.from_item(item) for item in self._indexed("alloc_pool", pool)]

    def for_agent(self, agent_id: str) -> list[Run | Node]:
        return [held_record(item) for item in self._indexed("active_agent", agent_id)]

    def _indexed(self, attribute: str, value: str, order: str = "run_id") -> list[Record]:
        found = [item for item in self.items.values() if item.get(attribute) == value]
        return [read(item) or {} for item in sorted(found, key=lambda item: str(item[order]))]

    def _move(self, run_id: str, move: RunMove) -> Record | None:
        also = (lambda run: run.get("agent_id") == move.agent_id) if move.agent_id is not None else None
        return transition(self.items, run_id, RUN_TRANSITIONS, move.target, move.sets, move.removes, also)

    def _put_node(self, node: Node) -> None:
        self.items.setdefault(node.node_id, node.to_item())  # a retried launch finds it there

    def _now(self) -> str:
        return self._clock.now_iso()

    def record_node_exit(self, run_id: str, node_rank: int, exit_code: int) -> Run | None:
        return self._set_live_entry(run_id, "node_exits", node_rank, exit_code)

    def register_rendezvous(self, run_id: str, node_rank: int, entry: RendezvousEntry) -> Run | None:
        return self._set_live_entry(run_id, "rendezvous", node_rank, {"addr": entry.addr, "port": entry.port})

    def _set_live_entry(self, run_id: str, attribute: str, node_rank: int, value: Any) -> Run | None:
        """Set `attribute[node_rank]` (the map must exist) while the run is launching or running."""
        run = self.items.get(run_id)
        if run is None or attribute not in run or run.get("state") not in _LIVE:
            return None
        run[attribute][str(node_rank)] = stored(value)
        return _run(read(run))

    def record_log_batch(self, run_id: str, seq: int) -> None:
        run = self.items.get(run_id)
        if run is not None and run.get("log_seq", seq - 1) < seq:
            run["log_seq"] = seq

    def mark_pausing(self, run_id: str) -> None:
        run = self.items.get(run_id)
        if run is not None:
            run["pausing"] = True

    def update_job(self, run_id: str, fields: Mapping[str, Any], *, only_pending: bool = False) -> Run | None:
        run = self.items.get(run_id)
        if run is None or run.get("kind") == "node" or run.get("state") == str(RunState.EXITED):
            return None
        if only_pending and run.get("state") != str(RunState.PENDING):
            return None
        run.update({name: stored(value) for name, value in fields.items()})
        updated = Run.from_item(read(run) or {})
        if updated.state is RunState.PENDING:
            run.update(queue_fields(updated))  # its place in the queue follows its job
        return _run(read(run))

    def note_task_beat(self, run_id: str, at: str) -> None:
        run = self.items.get(run_id)
        if run is not None:
            run["beat_at"] = at

    def note_wait_reason(self, run_id: str, reason: str) -> None:
        run = self.items.get(run_id)
        if run is not None and run.get("state") == str(RunState.PENDING):
            run["wait_reason"] = reason[:1000]

    def note_compute_ref(self, run_id: str, ref: str) -> None:
        run = self.items.get(run_id)
        if run is not None:
            run["compute_ref"] = ref

    def tell_to_stop(self, run_id: str, *, pause: bool) -> None:
        run = self.items.get(run_id)
        if run is not None:
            run["preempt"] = True
            run["pausing" if pause else "requeue"] = True

    def ask_to_stop(self, run_id: str) -> None:
        run = self.items.get(run_id)
        if run is not None:
            run["preempt"] = True

    def delete(self, run_id: str) -> None:
        self.items.pop(run_id, None)


def _run(item: Record | None) -> Run | None:
    return Run.from_item(item) if item is not None else None


def _held(item: Record | None) -> Run | Node | None:
    return held_record(read(item) or {}) if item is not None else None


class MemoryAgents:
    def __init__(self, clock: Clock) -> None:
        self.items: dict[str, Record] = {}
        self._clock = clock

    def heartbeat(
        self, agent_id: str, pool: str, slots: int, *, busy: bool = False, version: str | None = None
    ) -> bool:
        """Record the agent; True when it is new or its capacity changed (the scheduler should run)."""
        old = self.items.get(agent_id, {})
        now = self._clock.now()
        self.items[agent_id] = {
            **old,
            "agent_id": agent_id,
            "pool": pool,
            "slots": slots,
            "last_seen": now,
            "first_seen": old.get("first_seen", now),
            **({"busy_at": now} if busy else {}),
            **({"version": version} if version is not None else {}),
        }
        return bool(old.get("slots") != slots or old.get("pool") != pool)

    def set_draining(self, agent_id: str) -> bool:
        item = self.items.get(agent_id)
        if item is None or item.get("draining"):
            return False
        item["draining"] = True
        return True

    def set_disabled(self, agent_id: str, disabled: bool) -> AgentRecord | None:
        item = self.items.get(agent_id)
        if item is None:
            return None
        item["disabled"] = disabled
        return AgentRecord.of(item)

    def alive(self, pool: str, timeout_s: float) -> list[Host]:
        horizon = self._clock.now() - timeout_s
        return [
            Host(
                agent_id,
                int(item["slots"]),
                accepting=not item.get("draining") and not item.get("disabled"),
                draining=bool(item.get("draining")),
            )
            for agent_id, item in sorted(self.items.items())
            if item["pool"] == pool and item["last_seen"] >= horizon
        ]

    def get(self, agent_id: str) -> AgentRecord | None:
        item = self.items.get(agent_id)
        return AgentRecord.of(item) if item is not None else None

    def in_pool(self, pool: str) -> list[AgentRecord]:
        return [record for record in self.every() if record.pool == pool]

    def every(self) -> list[AgentRecord]:
        return [AgentRecord.of(item) for _, item in sorted(self.items.items())]
