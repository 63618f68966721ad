"""Metric groups: the name a trial reports a set of metrics under (Determined's
``core.train.report_metrics(group=...)``).

``training`` and ``validation`` are the built-in groups: the trial's totals follow them, and the searcher
reads its metric from ``validation`` only. Any other name is a custom group, stored and listed as it is.
The rule is Determined's own (its master's ``MetricGroup.Validate``): a group is a non-empty string
without ``.``, since Determined names a metric ``<group>.<name>``. Every other character is allowed
(spaces, ``%``, ``/``, ``#``, any Unicode), so the control plane never builds a storage key from a raw
group name.
"""

from __future__ import annotations

from stratus.contract.errors import InvalidMetricGroupError

TRAINING = "training"
VALIDATION = "validation"
BUILT_IN_GROUPS = (TRAINING, VALIDATION)


def check_metric_group(group: object) -> str:
    """``group`` when it follows the rule; InvalidMetricGroupError (naming the value and the fix) if not."""
    if not isinstance(group, str):
        raise InvalidMetricGroupError(
            f"metric group {group!r} is a {type(group).__name__}; name the group with a string, "
            "such as 'training', 'validation' or a name of your own."
        )
    if not group:
        raise InvalidMetricGroupError(
            "the metric group is empty; name it, e.g. 'training', 'validation' or a name of your own."
        )
    if "." in group:
        raise InvalidMetricGroupError(
            f"metric group {group!r} contains '.', which separates a group from a metric's name "
            f"(as in Determined); use another character, e.g. {group.replace('.', '_')!r}."
        )
    return group
