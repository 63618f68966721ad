"""The agents as the control plane knows them (their heartbeats' records) and the store of them: a port of
`chalicelib.services.ports`, in a module of its own."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Host:
    """A machine a compute backend runs nodes on, with the slots it offers (an agent, for `local`). A
    host that is not `accepting` (draining: its instance is about to go) is alive, so what it runs is not
    presumed lost, but nothing more is placed on it."""

    host_id: str
    slots: int
    accepting: bool = True
    #: Its machine is about to go (not accepting for that reason; a disabled agent is not draining).
    draining: bool = False


@dataclass(frozen=True)
class AgentRecord:
    """An agent as its heartbeats left it: its pool, its slots, when it was first and last heard and when
    it last ran something (epoch s), and whether it drains (its instance is about to go)."""

    agent_id: str
    pool: str
    slots: int
    last_seen: float
    first_seen: float | None = None
    busy_at: float | None = None
    draining: bool = False
    #: Disabled by an operator (`det agent disable`): nothing new is placed on it until it is enabled.
    disabled: bool = False
    #: The version its last heartbeat named (`stratus.contract.versions`); "" if it named none.
    version: str = ""

    @classmethod
    def of(cls, item: Mapping[str, Any]) -> AgentRecord:
        """The record of a stored agent item (numbers may be Decimals)."""

        def seconds(key: str) -> float | None:
            value = item.get(key)
            return None if value is None else float(value)

        return cls(
            agent_id=str(item["agent_id"]),
            pool=str(item["pool"]),
            slots=int(item["slots"]),
            last_seen=float(item["last_seen"]),
            first_seen=seconds("first_seen"),
            busy_at=seconds("busy_at"),
            draining=bool(item.get("draining", False)),
            disabled=bool(item.get("disabled", False)),
            version=str(item.get("version", "")),
        )


class AgentStore(Protocol):
    def heartbeat(
        self, agent_id: str, pool: str, slots: int, *, busy: bool = False, version: str | None = None
    ) -> bool:
        """Record a beat (`busy`: the agent runs something; `version`: the one it named, None: none, and
        the record keeps what it had); True when the agent is new or its capacity changed (the
        scheduler should run)."""
        ...

    def set_draining(self, agent_id: str) -> bool:
        """Mark the agent draining, for good (its instance is about to go); True the first time."""
        ...

    def set_disabled(self, agent_id: str, disabled: bool) -> AgentRecord | None:
        """Disable the agent (nothing new is placed on it) or enable it again; its record after, None for
        an agent that never heartbeated. A heartbeat leaves it as it is."""
        ...

    def alive(self, pool: str, timeout_s: float) -> list[Host]:
        """The pool's agents that heartbeated within `timeout_s`, by id (a draining or disabled one not
        accepting)."""
        ...

    def in_pool(self, pool: str) -> list[AgentRecord]:
        """Every agent record of the pool, alive or not, by id."""
        ...

    def get(self, agent_id: str) -> AgentRecord | None: ...

    def every(self) -> list[AgentRecord]:
        """Every agent that ever heartbeated, by id, with its last heartbeat (`det agent list`)."""
        ...
