"""NNI's `nni.trial` module, where NNI defines the trial API that the `nni` package re-exports: thin
aliases over `stratus.harness.compat._nni` (see it for what each call does)."""

from typing import Any

from stratus.harness.compat._nni import trial as _trial


def get_next_parameter() -> dict[str, Any]:
    return _trial.get_next_parameter()


def get_current_parameter(tag: str | None = None) -> Any:
    return _trial.get_current_parameter(tag)


def report_intermediate_result(metric: Any) -> None:
    _trial.report_intermediate_result(metric)


def report_final_result(metric: Any) -> None:
    _trial.report_final_result(metric)


def get_trial_id() -> str:
    return _trial.get_trial_id()


def get_experiment_id() -> str:
    return _trial.get_experiment_id()


def get_sequence_id() -> int:
    return _trial.get_sequence_id()


__all__ = [
    "get_current_parameter",
    "get_experiment_id",
    "get_next_parameter",
    "get_sequence_id",
    "get_trial_id",
    "report_final_result",
    "report_intermediate_result",
]
