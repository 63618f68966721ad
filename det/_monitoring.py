"""`det experiment dashboard | plot ID`: an experiment's learning curves.

- `dashboard`: asks the API to create or update the experiment's CloudWatch dashboard (every trial's
  curves, the best searcher metric, its pool's slots) and prints its console URL. The control plane
  writes it (`POST /experiments/{id}/dashboard`), so the user needs no CloudWatch permission. On the
  local stack, whose CloudWatch is moto's (no console), it creates nothing and names `plot` instead
  (exit 1: no dashboard was shown).
- `plot`: draws every trial's curves from the metrics the API serves (`GET /trials/{id}/metrics`) into a
  PNG or SVG file (by its suffix; `experiment-<id>.png` unless `-o`), for the local stack, which has no
  console. Left: the training loss (`loss`, else the first scalar by name); right: the validation
  searcher metric. Needs matplotlib (a CLI extra, never in the Lambda package), imported only here.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from det import _distribution
from det._commands import Subcommands
from det._master_url import is_local_stack
from det._render import plural
from det._runtime import Runtime
from det.errors import NotOnThisStackError, UsageError

Json = dict[str, Any]
#: (steps, values) of one trial's metric, by steps.
Curve = tuple[list[int], list[float]]

FORMATS = (".png", ".svg")
#: Trials named in a graph's legend; with more (an adaptive search), the legend would hide the curves.
MAX_LEGEND = 12
#: The `plot` extra's requirements when the CLI is not installed (a checkout).
PLOT_EXTRA = ("matplotlib>=3.9",)


def add_parsers(sub: Subcommands) -> None:
    dashboard = sub.add_parser(
        "dashboard", help="create or update the experiment's CloudWatch dashboard and print its URL"
    )
    dashboard.add_argument("experiment_id", type=int, metavar="ID", help="experiment id")
    dashboard.set_defaults(command=show_dashboard)
    plot = sub.add_parser("plot", help="draw the learning curves of every trial (PNG or SVG)")
    plot.add_argument("experiment_id", type=int, metavar="ID", help="experiment id")
    plot.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE",
        help="the image (.png or .svg; default experiment-ID.png)",
    )
    plot.set_defaults(command=plot_experiment)


def show_dashboard(args: argparse.Namespace, rt: Runtime) -> int:
    experiment_id = args.experiment_id
    with rt.client() as client:
        if is_local_stack(rt.master):
            client.get_experiment(experiment_id)  # an unknown id is said as such
            raise NotOnThisStackError(
                f"experiment {experiment_id}'s CloudWatch dashboard would live in the local stack's moto, "
                f"which has no console to show it; draw the same learning curves with `det experiment "
                f"plot {experiment_id}` (every trial's training loss and validation metric, into "
                f"experiment-{experiment_id}.png) and read the values with `det experiment describe "
                f"{experiment_id} --metrics`"
            )
        answer = client.experiment_dashboard(experiment_id)
    rt.say(
        f"Dashboard {answer['name']} charts the {plural(int(answer['trials']), 'trial')} of experiment "
        f"{experiment_id}:"
    )
    rt.say(str(answer["url"]))
    return 0


def plot_experiment(args: argparse.Namespace, rt: Runtime) -> int:
    output: Path = args.output or Path(f"experiment-{args.experiment_id}.png")
    if output.suffix.lower() not in FORMATS:
        raise UsageError(f"cannot draw {output}: name a .png or .svg file with -o")
    figure_class = _figure_class()  # before any request: a missing matplotlib fails at once
    with rt.client() as client:
        experiment: Json = client.get_experiment(args.experiment_id).get("experiment") or {}
        searcher = (experiment.get("config") or {}).get("searcher") or {}
        metric = str(searcher.get("metric") or "")
        trials = sorted(t["id"] for t in client.list_trials(args.experiment_id))
        reports = {
            t: {group: client.trial_metrics(t, group) for group in ("training", "validation")} for t in trials
        }
    training_name = training_metric([m for r in reports.values() for m in r["training"]])
    training = {t: curve(r["training"], training_name) for t, r in reports.items() if training_name}
    validation = {t: curve(r["validation"], metric) for t, r in reports.items() if metric}
    figure = figure_class(figsize=(12, 4.5), layout="constrained")
    title = f"Experiment {args.experiment_id}" + (
        f" ({experiment['name']})" if experiment.get("name") else ""
    )
    figure.suptitle(title)
    _draw(figure.add_subplot(1, 2, 1), training, f"training {training_name or '(no metric)'}")
    _draw(figure.add_subplot(1, 2, 2), validation, f"validation {metric or '(no searcher metric)'}")
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, format=output.suffix.lower().lstrip("."))
    points = sum(len(steps) for steps, _ in [*training.values(), *validation.values()])
    rt.say(f"Wrote {output}: {plural(len(trials), 'trial')}, {plural(points, 'point')}")
    return 0


def training_metric(reports: Sequence[Mapping[str, Any]]) -> str | None:
    """The training metric to draw: `loss` when reported, else the first scalar by name."""
    names = sorted(
        {n for m in reports for n, v in (m.get("metrics") or {}).items() if _scalar(v) is not None}
    )
    return "loss" if "loss" in names else (names[0] if names else None)


def curve(reports: Sequence[Mapping[str, Any]], name: str | None) -> Curve:
    """The (steps, values) of `name` in the reports, by steps (a report without it is skipped)."""
    points = sorted(
        (int(m.get("steps_completed") or 0), value)
        for m in reports
        if (value := _scalar((m.get("metrics") or {}).get(name or ""))) is not None
    )
    return [s for s, _ in points], [v for _, v in points]


def _scalar(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(float(value)):
        return None
    return float(value)


def _draw(axes: Any, curves: Mapping[int, Curve], title: str) -> None:
    axes.set_title(title)
    axes.set_xlabel("batches (steps completed)")
    axes.grid(alpha=0.3)
    drawn = 0
    for trial_id, (steps, values) in sorted(curves.items()):
        if steps:
            axes.plot(steps, values, marker="." if len(steps) < 30 else None, label=f"trial {trial_id}")
            drawn += 1
    if not drawn:
        axes.text(0.5, 0.5, "no values reported", ha="center", va="center", transform=axes.transAxes)
    elif drawn <= MAX_LEGEND:
        axes.legend(fontsize="small")


def _figure_class() -> Any:
    """matplotlib's `Figure` (the Agg backend: no display needed), or one clear error."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib.figure import Figure
    except ImportError as e:
        raise UsageError(
            f"det experiment plot needs matplotlib, which this Python ({sys.executable}) lacks; install "
            f"the CLI's `plot` extra with: {install_command('plot', PLOT_EXTRA)}"
        ) from e
    return Figure


def install_command(extra: str, fallback: tuple[str, ...]) -> str:
    """The pip command that installs an extra's requirements into the Python running `det` (the
    distribution is not on PyPI, so `pip install 'stratus-dl[plot]'` could not find it)."""
    wanted = _distribution.extra_requirements(extra, fallback)
    return f"{shlex.quote(sys.executable)} -m pip install " + " ".join(shlex.quote(r) for r in wanted)
