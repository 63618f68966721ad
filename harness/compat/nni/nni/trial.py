"""NNI's `nni.trial` module: the same calls as `nni`."""

from nni import (
    get_current_parameter,
    get_experiment_id,
    get_next_parameter,
    get_sequence_id,
    get_trial_id,
    report_final_result,
    report_intermediate_result,
)

__all__ = [
    "get_current_parameter",
    "get_experiment_id",
    "get_next_parameter",
    "get_sequence_id",
    "get_trial_id",
    "report_final_result",
    "report_intermediate_result",
]
