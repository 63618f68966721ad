"""`det experiment config | logs | download` and `det trial download` (Determined's verbs and flags).

- `config`: the experiment's config (`GET /experiments/{id}`) as block-style YAML, keys in stored order.
- `logs`: the logs of the experiment's first trial (the lowest id), with `det trial logs`'s filters and
  reader (`det._trial.write_logs`), then Determined's hint to reopen the stream; on stderr here, so that
  stdout holds only log lines.
- `download`: the experiment's best `--top-n` checkpoints, each into DIR/UUID. By the searcher metric, the
  API ranks them (`GET /experiments/{id}/checkpoints?best=N`); by another validation metric
  (`--sort-by M --smaller-is-better true|false`), the CLI ranks the API's full list by the validation
  reported at each checkpoint's steps, with the API's rule: only COMPLETED checkpoints with a number.
- `det trial download ID --best | --latest | --uuid UUID`: one checkpoint of a trial: the best by the
  searcher metric (or `--sort-by`), the latest by steps completed, or the one named.

Every download goes through `det._checkpoint.download_into` (safe file names, whole files only) and prints
each checkpoint as `det checkpoint download` does.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from det import _checkpoint, _trial
from det._client import ApiClient
from det._commands import Subcommands
from det._runtime import Runtime
from det.errors import NotFoundError, UsageError

Json = dict[str, Any]

DEFAULT_DOWNLOAD_DIR = "checkpoints"
_TRUE = ("true", "t", "yes", "y", "on", "1")
_FALSE = ("false", "f", "no", "n", "off", "0")


def add_experiment_parsers(experiment_sub: Subcommands) -> None:
    """`config`, `logs` and `download` under `det experiment`."""
    config = experiment_sub.add_parser("config", help="print an experiment's config as YAML")
    config.add_argument("experiment_id", type=int, metavar="ID", help="experiment id")
    config.set_defaults(command=show_config)

    logs = experiment_sub.add_parser(
        "logs", help="print the logs of an experiment's first trial (the lowest trial id)"
    )
    logs.add_argument("experiment_id", type=int, metavar="ID", help="experiment id")
    _trial.add_log_arguments(logs)
    logs.set_defaults(command=experiment_logs)

    download = experiment_sub.add_parser(
        "download", help="download the best checkpoints of an experiment, each into DIR/UUID"
    )
    download.add_argument("experiment_id", type=int, metavar="ID", help="experiment id")
    download.add_argument(
        "-o",
        "--output-dir",
        type=Path,
        default=Path(DEFAULT_DOWNLOAD_DIR),
        metavar="DIR",
        help=f"top folder: each checkpoint goes into DIR/UUID (default: {DEFAULT_DOWNLOAD_DIR})",
    )
    download.add_argument(
        "--top-n",
        type=int,
        default=1,
        metavar="N",
        help="how many checkpoints, the best first (default: 1): by the searcher metric, or by --sort-by; "
        "only COMPLETED checkpoints with a validation at their steps count",
    )
    _add_sort_arguments(download, "")
    download.add_argument(
        "-q", "--quiet", action="store_true", help="print only the checkpoints' local paths, no progress"
    )
    download.set_defaults(command=download_experiment)


def add_trial_parsers(trial_sub: Subcommands) -> None:
    """`download` under `det trial`."""
    trial = trial_sub.add_parser("download", help="download a checkpoint of a trial")
    trial.add_argument("trial_id", type=int, metavar="ID", help="trial id")
    which = trial.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--best",
        action="store_true",
        help="the checkpoint with the best validation by the searcher metric (or --sort-by)",
    )
    which.add_argument(
        "--latest", action="store_true", help="the COMPLETED checkpoint with the most steps completed"
    )
    which.add_argument("--uuid", metavar="UUID", help="the checkpoint with this uuid")
    trial.add_argument(
        "-o",
        "--output-dir",
        type=Path,
        metavar="DIR",
        help=f"where to put the files (default: {DEFAULT_DOWNLOAD_DIR}/UUID)",
    )
    _add_sort_arguments(trial, "with --best: ")
    trial.add_argument(
        "-q", "--quiet", action="store_true", help="print only the checkpoint's local path, no progress"
    )
    trial.set_defaults(command=download_trial)


def _add_sort_arguments(parser: argparse.ArgumentParser, only: str) -> None:
    parser.add_argument(
        "--sort-by",
        metavar="METRIC",
        help=f"{only}rank by this validation metric instead of the searcher metric (with --smaller-is-better)",
    )
    parser.add_argument(
        "--smaller-is-better",
        type=_true_or_false,
        metavar="(true|false)",
        help="with --sort-by: whether a smaller value is better (accuracy: false)",
    )


def _true_or_false(text: str) -> bool:
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is neither true nor false")


# --- config and logs -----------------------------------------------------------------------------


def show_config(args: argparse.Namespace, rt: Runtime) -> int:
    with rt.client() as client:
        experiment: Json = client.get_experiment(args.experiment_id)["experiment"]
    text = yaml.safe_dump(
        experiment.get("config") or {}, default_flow_style=False, sort_keys=False, allow_unicode=True
    )
    rt.out.write(text)
    rt.out.flush()
    return 0


def experiment_logs(args: argparse.Namespace, rt: Runtime) -> int:
    _trial.check_log_window(args)
    with rt.client() as client:
        trial_id = first_trial_id(client, args.experiment_id)
        try:
            _trial.write_logs(rt, client, trial_id, args)
        finally:  # as Determined: also after Ctrl-C or an error while reading
            rt.note(f"Trial log stream ended. To reopen log stream, run: det trial logs -f {trial_id}")
    return 0


def first_trial_id(client: ApiClient, experiment_id: int) -> int:
    trials = client.list_trials(experiment_id)
    if not trials:
        raise NotFoundError(
            f"experiment {experiment_id} has no trial yet; retry once its first trial is created "
            f"(`det experiment list-trials {experiment_id}` shows its trials)",
            code="NotFound",
        )
    return min(int(t["id"]) for t in trials)


# --- downloads -----------------------------------------------------------------------------------


def download_experiment(args: argparse.Namespace, rt: Runtime) -> int:
    if args.top_n < 1:
        raise UsageError(f"--top-n {args.top_n} must be 1 or more (the number of checkpoints to download)")
    _check_sort(args)
    experiment_id = args.experiment_id
    with rt.client() as client:
        if args.sort_by is None:
            answer = client.list_checkpoints(experiment_id, best=args.top_n)
            chosen = list(answer.get("checkpoints") or [])  # best first, as the API ranks them
            metric = str(answer.get("searcher_metric") or "")
        else:
            listed = client.list_checkpoints(experiment_id).get("checkpoints") or []
            chosen = rank(listed, args.sort_by, args.smaller_is_better)[: args.top_n]
            metric = args.sort_by
        if not chosen:
            raise NotFoundError(
                f"experiment {experiment_id} has no COMPLETED checkpoint with a validation of {metric!r} "
                f"at its steps; `det experiment list-checkpoints {experiment_id}` shows its checkpoints",
                code="NotFound",
            )
        for checkpoint in chosen:
            uuid = str(checkpoint["uuid"])
            _checkpoint.download_into(rt, client, uuid, args.output_dir / uuid, quiet=args.quiet)
            if not args.quiet:
                rt.say("")
    return 0


def download_trial(args: argparse.Namespace, rt: Runtime) -> int:
    if args.sort_by is not None and not args.best:
        raise UsageError("--sort-by and --smaller-is-better only go with --best; drop them or pass --best")
    _check_sort(args)
    with rt.client() as client:
        if args.uuid is not None:
            uuid = str(args.uuid)
        elif args.latest:
            uuid = _latest_of_trial(client, args.trial_id)
        else:
            uuid = _best_of_trial(client, args.trial_id, args.sort_by, args.smaller_is_better)
        target = args.output_dir or Path(DEFAULT_DOWNLOAD_DIR) / uuid
        _checkpoint.download_into(rt, client, uuid, target, quiet=args.quiet)
    return 0


def _check_sort(args: argparse.Namespace) -> None:
    if (args.sort_by is None) != (args.smaller_is_better is None):
        raise UsageError(
            "--sort-by and --smaller-is-better go together, e.g. --sort-by accuracy --smaller-is-better "
            "false; without both, the searcher metric ranks the checkpoints"
        )


def _latest_of_trial(client: ApiClient, trial_id: int) -> str:
    checkpoints = client.get_trial(trial_id).get("checkpoints") or []
    completed = [c for c in checkpoints if c.get("state") == "COMPLETED"]
    if not completed:
        raise NotFoundError(
            f"trial {trial_id} has no COMPLETED checkpoint to download; "
            f"`det trial describe {trial_id}` shows its checkpoints",
            code="NotFound",
        )
    latest = max(completed, key=lambda c: (int(c.get("steps_completed") or 0), str(c.get("report_time"))))
    return str(latest["uuid"])


def _best_of_trial(client: ApiClient, trial_id: int, sort_by: str | None, smaller: bool | None) -> str:
    experiment_id = int(client.get_trial(trial_id)["trial"]["experiment_id"])
    answer = client.list_checkpoints(experiment_id)
    own = [c for c in answer.get("checkpoints") or [] if c.get("trial_id") == trial_id]
    if sort_by is None:
        metric, smaller = str(answer.get("searcher_metric") or ""), bool(answer.get("smaller_is_better"))
        ranked = _ranked(own, lambda c: _number(c.get("searcher_metric_value")), smaller)
    else:
        metric, ranked = sort_by, rank(own, sort_by, bool(smaller))
    if not ranked:
        raise NotFoundError(
            f"trial {trial_id} has no COMPLETED checkpoint with a validation of {metric!r} at its steps; "
            f"`det trial download {trial_id} --latest` takes its latest checkpoint",
            code="NotFound",
        )
    return str(ranked[0]["uuid"])


def rank(checkpoints: Sequence[Json], metric: str, smaller_is_better: bool) -> list[Json]:
    """The COMPLETED checkpoints whose validation at their steps has a number for `metric`, best first
    (ties: the earlier report first), as the API ranks `?best=N` by the searcher metric."""
    return _ranked(
        checkpoints, lambda c: _number((c.get("validation_metrics") or {}).get(metric)), smaller_is_better
    )


def _ranked(
    checkpoints: Sequence[Json], value: Callable[[Json], float | None], smaller_is_better: bool
) -> list[Json]:
    sign = 1.0 if smaller_is_better else -1.0
    scored = [(v, c) for c in checkpoints if c.get("state") == "COMPLETED" and (v := value(c)) is not None]
    scored.sort(key=lambda s: (sign * s[0], str(s[1].get("report_time") or "")))
    return [c for _, c in scored]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)
