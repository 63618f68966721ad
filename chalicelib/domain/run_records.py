"""Runs and their nodes as typed values (the adapters build them from the runs table's items).

A run is one attempt of a trial: a slot request in its pool's queue, then processes on agents. A run on
several agents is launched as one `Node` per agent; a node is not a run: it has no slot request, no
token of its own (its processes act for the run) and no trial state to move, only its agent's process.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from chalicelib.domain.keys import node_id
from chalicelib.domain.records import Item, StoredRecord
from chalicelib.domain.states import RunState


@dataclass(frozen=True)
class Placement:
    """One agent's share of a run: the agent and the slots it gives the run."""

    agent_id: str
    slots: int


@dataclass(frozen=True)
class RendezvousEntry:
    """Where a node of a multi-node run can be reached (the chief gives the port its rank 0 listens on)."""

    addr: str
    port: int | None = None


@dataclass(frozen=True, kw_only=True)
class Run(StoredRecord):
    run_id: str
    trial_id: int
    experiment_id: int
    pool: str
    slots: int
    state: RunState
    priority: int
    #: Its job's fair-share weight and position in the pool's queue (lower first among one priority;
    #: the experiment's submission time unless `det job update` moved it), copied when it is requested.
    weight: float = 1.0
    queue_position: float | None = None
    #: The most slots its job's runs may hold at once (`resources.max_slots`); 0: no limit.
    max_slots: int = 0
    #: The token of the workflow's slot request (answered by the grant).
    slot_token: str = ""
    queued_at: str = ""
    #: The agent that holds the run (the chief's, for a run on several nodes).
    agent_id: str | None = None
    #: The agents of a run on several nodes, chief first; empty for a run on one agent.
    nodes: tuple[Placement, ...] = ()
    #: The token of the workflow's launch (answered by the run's exit).
    launch_token: str | None = None
    #: What the backend started for it, where it is not an agent's process (a Batch job's id).
    compute_ref: str | None = None
    pid: int | None = None
    exit_code: int | None = None
    reason: str | None = None
    #: Told to stop for a pause: its clean exit pauses the trial.
    pausing: bool = False
    #: Told to stop (`should_preempt()` is true for its processes): for a pause, or a requeue.
    preempt: bool = False
    #: Told to stop to make room (preempted by the scheduler): its clean exit requeues the trial.
    requeue: bool = False
    #: Why a pending run waits, as the last scheduling pass saw it (`det job list` shows it).
    wait_reason: str | None = None
    #: When a scheduling pass last sent its workflow's task-token wait a heartbeat (ISO-8601).
    beat_at: str | None = None
    log_seq: int = 0
    rendezvous: dict[int, RendezvousEntry] = field(default_factory=dict)
    node_exits: dict[int, int] = field(default_factory=dict)
    assigned_at: str | None = None
    launched_at: str | None = None
    started_at: str | None = None
    exited_at: str | None = None
    #: What its agent said it runs on at its start (`chalicelib.domain.usage.Instance` as an item).
    instance: dict[str, Any] | None = None
    #: An elastic trial's run: its replica range and rescale rules, copied from the experiment's
    #: `elastic` section when it is requested, and why it has the size it has
    #: (`chalicelib.services.elastic_scheduling.RunElastic` as an item).
    elastic: dict[str, Any] | None = None
    version: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", RunState(self.state))

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> Run:
        values = dict(item)
        values["nodes"] = tuple(
            Placement(str(n["agent_id"]), int(n["slots"])) for n in item.get("nodes") or ()
        )
        values["rendezvous"] = {
            int(rank): RendezvousEntry(str(e["addr"]), e.get("port"))
            for rank, e in (item.get("rendezvous") or {}).items()
        }
        values["node_exits"] = {int(rank): int(code) for rank, code in (item.get("node_exits") or {}).items()}
        return super().from_item(values)

    def to_item(self) -> Item:
        item = super().to_item()
        item["state"] = str(self.state)
        # The maps exist only once a run on several nodes is launched (the store's conditions rely on it).
        for name in ("nodes", "rendezvous", "node_exits"):
            item.pop(name)
        if self.nodes:
            item["nodes"] = [{"agent_id": n.agent_id, "slots": n.slots} for n in self.nodes]
            item["rendezvous"] = {
                str(k): {"addr": e.addr, "port": e.port} for k, e in self.rendezvous.items()
            }
            item["node_exits"] = {str(k): v for k, v in self.node_exits.items()}
        return item

    @property
    def held_id(self) -> str:
        """The id its agent knows it by."""
        return self.run_id

    @property
    def placements(self) -> tuple[Placement, ...]:
        """Where the run's slots are: its nodes, or its one agent (nothing before it is assigned)."""
        if self.nodes:
            return self.nodes
        return (Placement(self.agent_id, self.slots),) if self.agent_id else ()


@dataclass(frozen=True, kw_only=True)
class Node(StoredRecord):
    """One agent's part of a run on several nodes (stored in the runs table under `node_id`)."""

    node_id: str
    run_id: str
    node_rank: int
    trial_id: int
    experiment_id: int
    pool: str
    slots: int
    agent_id: str
    state: RunState
    pid: int | None = None
    exit_code: int | None = None
    reason: str | None = None
    #: Each agent numbers the log batches it ships for the node it holds.
    log_seq: int = 0
    version: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", RunState(self.state))

    @property
    def held_id(self) -> str:
        """The id its agent knows it by."""
        return self.node_id

    @classmethod
    def launched(cls, run: Run, rank: int) -> Node:
        """Node `rank` of a run on several agents, as the run's launch creates it."""
        placement = run.nodes[rank]
        return cls(
            node_id=node_id(run.run_id, rank),
            run_id=run.run_id,
            node_rank=rank,
            trial_id=run.trial_id,
            experiment_id=run.experiment_id,
            pool=run.pool,
            slots=placement.slots,
            agent_id=placement.agent_id,
            state=RunState.LAUNCHING,
        )

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> Node:
        return super().from_item({**item, "node_id": item["run_id"], "run_id": item["parent_run"]})

    def to_item(self) -> Item:
        item = super().to_item()
        item.update(
            run_id=self.node_id,
            parent_run=self.run_id,
            kind="node",
            state=str(self.state),
            active_agent=self.agent_id,
        )
        del item["node_id"]
        return item


def held_record(item: Mapping[str, Any]) -> Run | Node:
    """A runs-table item as what it is: a node of a multi-node run, or a run."""
    return Node.from_item(item) if item.get("kind") == "node" else Run.from_item(item)
