from __future__ import annotations

import pytest

from chalicelib.domain.states import (
    EXPERIMENT_TRANSITIONS,
    RUN_TRANSITIONS,
    TRIAL_TRANSITIONS,
    ExperimentState,
    RunState,
    TrialState,
    allowed_sources,
    can_transition,
)

TABLES = [
    (EXPERIMENT_TRANSITIONS, ExperimentState),
    (TRIAL_TRANSITIONS, TrialState),
    (RUN_TRANSITIONS, RunState),
]


@pytest.mark.parametrize(("table", "enum"), TABLES)
def test_every_state_has_a_row_and_terminal_states_are_dead_ends(table, enum):
    assert set(table) == set(enum)
    for state in enum:
        if state is ExperimentState.DELETING:
            assert not table[state] and not state.terminal  # a dead end, but not an end: it goes away
            continue
        # An ended experiment may still be deleted; nothing else leaves an ended state.
        leaves = {ExperimentState.DELETING} if enum is ExperimentState else set()
        assert (not (table[state] - leaves)) == state.terminal, state


def test_only_an_ended_experiment_can_be_deleted():
    assert set(allowed_sources(EXPERIMENT_TRANSITIONS, ExperimentState.DELETING)) == {
        s for s in ExperimentState if s.terminal
    }


@pytest.mark.parametrize(("table", "enum"), TABLES)
def test_every_state_is_reachable_from_the_first(table, enum):
    start = next(iter(enum)) if enum is not ExperimentState else ExperimentState.PAUSED
    seen, frontier = {start}, [start]
    while frontier:
        for nxt in table[frontier.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    # ACTIVE experiments are also created directly; every other state must be reachable.
    assert seen == set(enum)


def test_allowed_sources_inverts_the_table():
    assert allowed_sources(TRIAL_TRANSITIONS, TrialState.COMPLETED) == [
        TrialState.PAUSED,
        TrialState.PULLING,
        TrialState.RUNNING,
        TrialState.STOPPING_COMPLETED,
    ]
    for target in TrialState:
        for source in allowed_sources(TRIAL_TRANSITIONS, target):
            assert can_transition(TRIAL_TRANSITIONS, source, target)


def test_a_finished_trial_cannot_be_requeued():
    for terminal in (TrialState.COMPLETED, TrialState.ERROR, TrialState.CANCELED):
        assert terminal not in allowed_sources(TRIAL_TRANSITIONS, TrialState.QUEUED)
    assert not can_transition(RUN_TRANSITIONS, RunState.EXITED, RunState.RUNNING)
