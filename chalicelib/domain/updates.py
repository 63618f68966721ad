"""The named updates of experiments and trials, written once for every store: each names the fields it
sets, and a store says only how to set fields on a record (`_set`). The DynamoDB adapters and the
in-memory twin both inherit them, so the two cannot disagree about what an update writes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chalicelib.domain.records import SearcherWish

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

    def set_searcher_action(
        self,
        trial_id: int,
        action: SearcherWish,
        *,
        target_length: int | None = None,
        early_stopped: bool | None = None,
    ) -> None:
        """What the searcher wants of the trial; with a new target to train to, or whether stopping it
        now is stopping it early."""
        fields: dict[str, Any] = {"searcher_action": action}
        if target_length is not None:
            fields["target_length"] = target_length
        if early_stopped is not None:
            fields["early_stopped"] = early_stopped
        self._set_trial(trial_id, fields)

    def clear_searcher_pending(self, trial_id: int) -> None:
        """The searcher answered the trial's result (possibly with nothing: the target stands)."""
        self._set_trial(trial_id, {"searcher_pending": False})
