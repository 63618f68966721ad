"""Runs and agents in memory, with the semantics of `chalicelib.aws.run_table`: the sparse indexes
(`pending_pool`, `alloc_pool`, `active_agent`) exist only while a run waits, holds slots or should be
running on an agent; a run on several nodes is launched as one node record per node."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chalicelib.domain.run_records import Node, RendezvousEntry, Run, held_record
from chalicelib.domain.states import RUN_TRANSITIONS, RunState
from chalicelib.memory._items import Record, read, stored, transition
from chalicelib.services.ports import Clock, Host

_LIVE = (str(RunState.LAUNCHING), str(RunState.RUNNING))


class MemoryRuns:
    def __init__(self, clock: Clock) -> None:
        self.items: dict[str, Record] = {}
        self._clock = clock

    def put_request(self, request: Run) -> bool:
        if request.run_id in self.items:
            return False  # a redelivered request: the first one is already queued
        item = stored(request.to_item())
        item.update(state=str(RunState.PENDING), pending_pool=request.pool, version=0)
        self.items[request.run_id] = item
        return True

    def get(self, run_id: str) -> Run | None:
        record = self.held(run_id)
        return record if isinstance(record, Run) else None

    def held(self, run_id: str) -> Run | Node | None:
        return _held(self.items.get(run_id))

    def pending(self, pool: str) -> list[Run]:
        return [Run.from_item(item) for item in self._indexed("pending_pool", pool, order="queued_at")]

    def allocated(self, pool: str) -> list[Run]:
        return [Run.from_item(item) for item in self._indexed("alloc_pool", pool)]

    def for_agent(self, agent_id: str) -> list[Run | Node]:
        return [held_record(item) for item in self._indexed("active_agent", agent_id)]

    def _indexed(self, attribute: str, value: str, order: str = "run_id") -> list[Record]:
        found = [item for item in self.items.values() if item.get(attribute) == value]
        return [read(item) or {} for item in sorted(found, key=lambda item: str(item[order]))]

    def assign(self, run_id: str, agent_id: str, nodes: tuple[str, ...] = ()) -> Run | None:
        run = self.items.get(run_id)
        if run is None:
            return None
        sets: dict[str, Any] = {
            "agent_id": agent_id,
            "alloc_pool": run["pool"],
            "assigned_at": self._clock.now_iso(),
        }
        if nodes:
            per_node = int(run["slots"]) // len(nodes)
            sets["nodes"] = [{"agent_id": agent, "slots": per_node} for agent in nodes]
        return _run(self._move(run_id, RunState.ASSIGNED, sets, removes=("pending_pool",)))

    def launch(self, run_id: str, launch_token: str) -> Run | None:
        run = self.get(run_id)
        if run is None:
            return None
        if run.nodes:
            for rank in range(len(run.nodes)):
                node = Node.launched(run, rank)
                self.items.setdefault(node.node_id, node.to_item())  # a retried launch finds it there
            sets: dict[str, Any] = {"launch_token": launch_token, "rendezvous": {}, "node_exits": {}}
        else:
            sets = {"launch_token": launch_token, "active_agent": run.agent_id}
        return _run(self._move(run_id, RunState.LAUNCHING, {**sets, "launched_at": self._clock.now_iso()}))

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

    def start(self, run_id: str, agent_id: str, pid: int) -> Run | Node | None:
        return _held(
            self._move(
                run_id,
                RunState.RUNNING,
                {"pid": pid, "started_at": self._clock.now_iso()},
                also=lambda run: run.get("agent_id") == agent_id,
            )
        )

    def exit(self, run_id: str, exit_code: int, reason: str) -> Run | Node | None:
        return _held(
            self._move(
                run_id,
                RunState.EXITED,
                {"exit_code": exit_code, "reason": reason[:1000], "exited_at": self._clock.now_iso()},
                removes=("pending_pool", "alloc_pool", "active_agent"),
            )
        )

    def _move(self, run_id: str, target: RunState, sets: Mapping[str, Any], **options: Any) -> Record | None:
        return transition(self.items, run_id, RUN_TRANSITIONS, target, sets, **options)

    def record_log_batch(self, run_id: str, seq: int) -> None:
        run = self.items.get(run_id)
        if run is not None and run.get("log_seq", seq - 1) < seq:
            run["log_seq"] = seq

    def mark_pausing(self, run_id: str) -> None:
        run = self.items.get(run_id)
        if run is not None:
            run["pausing"] = True


def _run(item: Record | None) -> Run | None:
    return Run.from_item(item) if item is not None else None


def _held(item: Record | None) -> Run | Node | None:
    return held_record(read(item) or {}) if item is not None else None


class MemoryAgents:
    def __init__(self, clock: Clock) -> None:
        self.items: dict[str, Record] = {}
        self._clock = clock

    def heartbeat(self, agent_id: str, pool: str, slots: int) -> bool:
        """Record the agent; True when it is new or its capacity changed (the scheduler should run)."""
        old = self.items.get(agent_id, {})
        self.items[agent_id] = {
            "agent_id": agent_id,
            "pool": pool,
            "slots": slots,
            "last_seen": self._clock.now(),
        }
        return bool(old.get("slots") != slots or old.get("pool") != pool)

    def alive(self, pool: str, timeout_s: float) -> list[Host]:
        horizon = self._clock.now() - timeout_s
        return [
            Host(agent_id, int(self.items[agent_id]["slots"]))
            for agent_id in sorted(self.items)
            if self.items[agent_id]["pool"] == pool and self.items[agent_id]["last_seen"] >= horizon
        ]
