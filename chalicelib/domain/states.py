"""Experiment, trial and run states with Determined's names, and the transitions allowed between them.

Every state change in DynamoDB is a conditional write whose condition is built from these tables
(`allowed_sources`), both in the services and in the Step Functions definition, so the two can never
disagree about what a legal transition is.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar

S = TypeVar("S", bound=StrEnum)


class ExperimentState(StrEnum):
    PAUSED = "PAUSED"
    ACTIVE = "ACTIVE"
    STOPPING_COMPLETED = "STOPPING_COMPLETED"
    STOPPING_ERROR = "STOPPING_ERROR"
    STOPPING_CANCELED = "STOPPING_CANCELED"
    STOPPING_KILLED = "STOPPING_KILLED"
    COMPLETED = "COMPLETED"
    ERROR = "ERROR"
    CANCELED = "CANCELED"
    #: `det experiment delete`: its checkpoints, logs and records are being removed (it then disappears).
    DELETING = "DELETING"

    @property
    def terminal(self) -> bool:
        """Ended: COMPLETED, ERROR or CANCELED (an experiment being deleted is neither running nor ended)."""
        return self in _EXPERIMENT_TERMINAL


class TrialState(StrEnum):
    QUEUED = "QUEUED"
    PULLING = "PULLING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    STOPPING_COMPLETED = "STOPPING_COMPLETED"
    STOPPING_ERROR = "STOPPING_ERROR"
    STOPPING_CANCELED = "STOPPING_CANCELED"
    STOPPING_KILLED = "STOPPING_KILLED"
    COMPLETED = "COMPLETED"
    ERROR = "ERROR"
    CANCELED = "CANCELED"

    @property
    def terminal(self) -> bool:
        return self in _TRIAL_TERMINAL


class RunState(StrEnum):
    """One attempt of a trial: the job in the queue, then the process on an agent."""

    PENDING = "PENDING"  # waiting in the pool's queue for slots
    ASSIGNED = "ASSIGNED"  # slots granted on an agent, launch not yet sent
    LAUNCHING = "LAUNCHING"  # the agent has been told to start it
    RUNNING = "RUNNING"  # the agent started the process
    EXITED = "EXITED"  # the process ended (any reason)

    @property
    def terminal(self) -> bool:
        return self is RunState.EXITED


_EXPERIMENT_TERMINAL = frozenset({ExperimentState.COMPLETED, ExperimentState.ERROR, ExperimentState.CANCELED})
_TRIAL_TERMINAL = frozenset({TrialState.COMPLETED, TrialState.ERROR, TrialState.CANCELED})

E = ExperimentState
T = TrialState
R = RunState

EXPERIMENT_TRANSITIONS: dict[ExperimentState, frozenset[ExperimentState]] = {
    # A paused experiment's searcher may still finish it (its last trial ended as the pause came).
    E.PAUSED: frozenset(
        {
            E.ACTIVE,
            E.STOPPING_COMPLETED,
            E.STOPPING_ERROR,
            E.STOPPING_CANCELED,
            E.STOPPING_KILLED,
            E.COMPLETED,
            E.ERROR,
            E.CANCELED,
        }
    ),
    E.ACTIVE: frozenset(
        {
            E.PAUSED,
            E.STOPPING_COMPLETED,
            E.STOPPING_ERROR,
            E.STOPPING_CANCELED,
            E.STOPPING_KILLED,
            E.COMPLETED,
            E.ERROR,
        }
    ),
    E.STOPPING_COMPLETED: frozenset({E.COMPLETED, E.ERROR}),
    E.STOPPING_ERROR: frozenset({E.ERROR}),
    # A kill after a cancel kills the trials still stopping.
    E.STOPPING_CANCELED: frozenset({E.CANCELED, E.STOPPING_KILLED}),
    E.STOPPING_KILLED: frozenset({E.CANCELED}),
    # Only an experiment that has ended can be deleted; DELETING ends with its records removed.
    E.COMPLETED: frozenset({E.DELETING}),
    E.ERROR: frozenset({E.DELETING}),
    E.CANCELED: frozenset({E.DELETING}),
    E.DELETING: frozenset(),
}

TRIAL_TRANSITIONS: dict[TrialState, frozenset[TrialState]] = {
    # QUEUED -> QUEUED: a restart re-enters the queue (the attempt counter moves on).
    # QUEUED -> STOPPING_KILLED: a kill between its run's launch and the trial's PULLING (the run is ended).
    T.QUEUED: frozenset(
        {T.QUEUED, T.PULLING, T.PAUSED, T.STOPPING_CANCELED, T.STOPPING_KILLED, T.CANCELED, T.ERROR}
    ),
    T.PULLING: frozenset(
        {T.RUNNING, T.QUEUED, T.PAUSED, T.STOPPING_CANCELED, T.STOPPING_KILLED, T.COMPLETED, T.ERROR}
    ),
    T.RUNNING: frozenset(
        {
            T.QUEUED,
            T.PAUSED,
            T.STOPPING_COMPLETED,
            T.STOPPING_ERROR,
            T.STOPPING_CANCELED,
            T.STOPPING_KILLED,
            T.COMPLETED,
            T.ERROR,
        }
    ),
    # PAUSED -> COMPLETED: a searcher closes a paused trial it will not promote again.
    T.PAUSED: frozenset({T.QUEUED, T.STOPPING_CANCELED, T.CANCELED, T.COMPLETED}),
    T.STOPPING_COMPLETED: frozenset({T.COMPLETED, T.ERROR}),
    T.STOPPING_ERROR: frozenset({T.ERROR}),
    T.STOPPING_CANCELED: frozenset({T.CANCELED, T.STOPPING_KILLED, T.ERROR}),
    T.STOPPING_KILLED: frozenset({T.CANCELED, T.ERROR}),
    T.COMPLETED: frozenset(),
    T.ERROR: frozenset(),
    T.CANCELED: frozenset(),
}

RUN_TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    R.PENDING: frozenset({R.ASSIGNED, R.EXITED}),
    R.ASSIGNED: frozenset({R.LAUNCHING, R.EXITED}),
    R.LAUNCHING: frozenset({R.RUNNING, R.EXITED}),
    R.RUNNING: frozenset({R.EXITED}),
    R.EXITED: frozenset(),
}


def allowed_sources(table: dict[S, frozenset[S]], target: S) -> list[S]:
    """The states from which `target` may be entered, sorted for stable conditions and golden files."""
    return sorted((src for src, dests in table.items() if target in dests), key=str)


def can_transition(table: dict[S, frozenset[S]], source: S, target: S) -> bool:
    return target in table[source]
