"""Stratus's `nni` package: NNI's trial API as a thin alias layer over `harness`
(see `stratus.harness.compat._nni` for what each call does). On the trial's PYTHONPATH only when the real
`nni` package is not installed."""

from typing import Any

from stratus.harness.compat._nni import trial as _trial

from . import utils

__version__ = "0.0.0+stratus"


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
    "__version__",
    "get_current_parameter",
    "get_experiment_id",
    "get_next_parameter",
    "get_sequence_id",
    "get_trial_id",
    "report_final_result",
    "report_intermediate_result",
    "utils",
]
