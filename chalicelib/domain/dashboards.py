"""An experiment's CloudWatch dashboard, as the body `PutDashboard` takes: the learning curves of every
trial (a graph per trial of its charted metrics, `chalicelib.domain.telemetry`), the best value of the
searcher's metric across trials, every trial's searcher metric on one graph, and the slots of the
experiment's pool. Its name starts with the stack's (`<stack>-experiment-<id>`), which the control
plane's IAM allows and nothing else.

A dashboard holds at most 500 widgets; the trials past `MAX_TRIAL_WIDGETS` (by id) get no graph of
their own but stay on the every-trial graph, whose search finds every trial of the experiment.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chalicelib.domain.telemetry import (
    PENDING_SLOTS,
    SLOTS_IDLE,
    SLOTS_USED,
    metric_name,
    namespace,
)

MAX_TRIAL_WIDGETS = 100
#: Seconds per point of the graphs (metrics arrive with each report batch, every 30 s in AWS).
PERIOD_S = 60
_WIDTH, _HEIGHT = 12, 6


def dashboard_name(stack: str, experiment_id: int) -> str:
    return f"{stack}-experiment-{experiment_id}"


def console_url(region: str, name: str) -> str:
    return (
        f"https://{region}.console.aws.amazon.com/cloudwatch/home?region={region}#dashboards/dashboard/{name}"
    )


def _search(space: str, dimensions: str, terms: str, stat: str) -> str:
    return f"SEARCH('{{{space},{dimensions}}} {terms}', '{stat}', {PERIOD_S})"


def experiment_dashboard(
    *,
    stack: str,
    region: str,
    experiment_id: int,
    pool: str,
    trial_ids: Sequence[int],
    searcher_metric: str,
    smaller_is_better: bool,
) -> dict[str, Any]:
    """The dashboard's body (see the module docstring)."""
    space = namespace(stack)
    searched = metric_name("validation", searcher_metric)
    experiment = f'experiment="{experiment_id}"'
    best = "MIN" if smaller_is_better else "MAX"
    stat = "Minimum" if smaller_is_better else "Maximum"
    every_trial = _search(space, "experiment,trial", f'{experiment} MetricName="{searched}"', stat)

    def graph(title: str, metrics: list[Any], **extra: Any) -> dict[str, Any]:
        properties = {"title": title, "region": region, "view": "timeSeries", "stacked": False}
        return {
            "type": "metric",
            "width": _WIDTH,
            "height": _HEIGHT,
            "properties": {**properties, "metrics": metrics, **extra},
        }

    widgets: list[dict[str, Any]] = [
        {
            "type": "text",
            "width": 24,
            "height": 2,
            "properties": {
                "markdown": f"# Experiment {experiment_id}\nSearcher metric `{searched}` "
                f"({'smaller' if smaller_is_better else 'larger'} is better), pool `{pool}`, "
                f"{len(trial_ids)} trials."
            },
        },
        graph(
            f"Best {searched}",
            [
                [{"expression": f"{best}(every)", "label": f"best {searched}", "id": "best"}],
                [{"expression": every_trial, "id": "every", "visible": False}],
            ],
        ),
        graph(f"{searched}, every trial", [[{"expression": every_trial, "id": "trials"}]]),
        graph(
            f"Slots of pool {pool}",
            [
                [space, name, "pool", pool, {"stat": "Maximum"}]
                for name in (SLOTS_USED, SLOTS_IDLE, PENDING_SLOTS)
            ],
            period=PERIOD_S,
        ),
    ]
    for trial_id in sorted(trial_ids)[:MAX_TRIAL_WIDGETS]:
        trial = _search(space, "experiment,trial", f'{experiment} trial="{trial_id}"', "Average")
        widgets.append(graph(f"Trial {trial_id}", [[{"expression": trial, "id": f"t{trial_id}"}]]))
    return {"start": "-PT24H", "periodOverride": "inherit", "widgets": widgets}
