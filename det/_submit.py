"""`det experiment create`: validate, pack, upload, submit, and optionally follow the first trial.

The order matters: the API validates the config (`validate_only`) before anything is packed or
uploaded (`det._upload`). With ``--test-mode`` or ``--local`` the config goes to `det._testmode` instead.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from det import _testmode
from det._client import ApiClient
from det._commands import Subcommands
from det._config import load_config, nni_code_directory
from det._logs import POLL_INTERVAL, TERMINAL_STATES, StatusLine, format_line, read_log_pages
from det._render import format_percent, plural
from det._runtime import Runtime
from det._signals import step
from det._upload import NOTHING_CREATED, pack_and_upload
from det.errors import UsageError
from stratus.contract.nni import is_nni_config

Json = dict[str, Any]


def add_create_parser(sub: Subcommands) -> None:
    """`det experiment create CONFIG [CONTEXT]`, with Determined's flags."""
    create_cmd = sub.add_parser("create", help="create an experiment")
    create_cmd.add_argument("config_file", type=Path, metavar="CONFIG", help="experiment config file (.yaml)")
    create_cmd.add_argument(
        "model_def", type=Path, nargs="?", metavar="CONTEXT", help="folder with the model code to upload"
    )
    create_cmd.add_argument(
        "-i",
        "--include",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="additional file or folder to put into the context (repeatable)",
    )
    create_cmd.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --config resources.slots_per_trial=2 (repeatable)",
    )
    how = create_cmd.add_mutually_exclusive_group()  # as in Determined
    how.add_argument(
        "-f",
        "--follow-first-trial",
        action="store_true",
        help="follow the logs of the first trial that is created",
    )
    how.add_argument("--paused", action="store_true", help="do not activate the experiment")
    how.add_argument(
        "-t",
        "--test-mode",
        action="store_true",
        help="test the config and the model code with a one-batch experiment: checks scheduling, "
        "training, validation and checkpointing, prints the trial's log on failure",
    )
    create_cmd.add_argument(
        "--local",
        action="store_true",
        help="with --test-mode: run the test on this machine, without the control plane",
    )
    for flag in (
        "--project",
        "--workspace",
        "--project_id",
    ):  # accepted for Determined scripts; no projects here
        create_cmd.add_argument(flag, help=argparse.SUPPRESS)
    create_cmd.set_defaults(command=create)


def add_activate_parser(sub: Subcommands) -> None:
    """`det experiment activate|unpause ID`."""
    activate_cmd = sub.add_parser("activate", aliases=["unpause"], help="activate (unpause) an experiment")
    activate_cmd.add_argument("experiment_id", type=int, metavar="ID", help="experiment id")
    activate_cmd.set_defaults(command=activate)


def create(args: argparse.Namespace, rt: Runtime) -> int:
    config = load_config(args.config_file, args.config)
    if args.model_def is None and is_nni_config(config):
        # NNI uploads the trial code folder its config names; so does Stratus when CONTEXT is omitted.
        args.model_def = nni_code_directory(config, args.config_file)
        rt.note(f"Using the NNI trial code directory {args.model_def} as the context")
    if args.include and args.model_def is None:
        raise UsageError("--include adds files to a context: pass the CONTEXT folder too")
    if getattr(args, "test_mode", False) or getattr(args, "local", False):
        return _testmode.create(args, rt, config)
    activate = not args.paused
    with rt.client() as client:
        with step("checking the config with the API", NOTHING_CREATED):
            client.create_experiment(config, context_sha256=None, validate_only=True, activate=activate)
        sha256 = pack_and_upload(args, rt, client)
        with step(
            "creating the experiment",
            "it may have been created: `det experiment list` shows it if it was",
        ):
            answer = client.create_experiment(
                config, context_sha256=sha256, validate_only=False, activate=activate
            )
        experiment: Json = answer["experiment"]
        rt.say(f"Created experiment {experiment['id']}")
        for warning in answer.get("warnings") or []:
            rt.note(f"Warning: {warning}")
        if args.follow_first_trial:
            if args.paused:
                rt.note(
                    f"Experiment {experiment['id']} is paused, so there is no trial to follow; "
                    f"activate it with `det experiment activate {experiment['id']}`"
                )
                return 0
            return follow_experiment(rt, client, int(experiment["id"]))
    return 0


def activate(args: argparse.Namespace, rt: Runtime) -> int:
    with rt.client() as client:
        client.activate_experiment(args.experiment_id)
    rt.say(f"Activated experiment {args.experiment_id}")
    return 0


def follow_experiment(rt: Runtime, client: ApiClient, experiment_id: int) -> int:
    """Stream the first trial's logs, then wait for the experiment; 0 if it COMPLETED."""
    status = StatusLine(rt.err, enabled=rt.err_is_tty())
    try:
        return _follow(rt, client, experiment_id, status)
    finally:
        status.clear()  # also on Ctrl-C: leave the terminal clean


def _follow(rt: Runtime, client: ApiClient, experiment_id: int, status: StatusLine) -> int:
    watch = _Watch(client, experiment_id)
    rt.say("Waiting for first trial to begin...")
    while not watch.trials and watch.state not in TERMINAL_STATES:
        status.show(watch.describe())
        rt.sleep(POLL_INTERVAL)
        watch.refresh()

    if watch.trials:
        trial_id = min(int(t["id"]) for t in watch.trials)
        watch.trial_id = trial_id
        status.clear()
        rt.say(f"Following first trial with ID {trial_id}")

        def on_idle(trial_state: str) -> None:
            watch.trial_state = trial_state
            if status.enabled:
                watch.refresh()
                status.show(watch.describe())

        for page in read_log_pages(client, trial_id, follow=True, sleep=rt.sleep, on_idle=on_idle):
            status.print_lines(rt.out, [format_line(line) for line in page])
        status.clear()
        rt.say(f"Trial log stream ended. To reopen log stream, run: det trial logs -f {trial_id}")

    watch.refresh()
    while watch.state not in TERMINAL_STATES:
        status.show(watch.describe())
        rt.sleep(POLL_INTERVAL)
        watch.refresh()
    status.clear()
    rt.say(f"Experiment {experiment_id} {watch.state}")
    return 0 if watch.state == "COMPLETED" else 1


class _Watch:
    """The latest view of an experiment being followed, for the status line and the loops."""

    def __init__(self, client: ApiClient, experiment_id: int) -> None:
        self._client = client
        self.experiment_id = experiment_id
        self.trial_id: int | None = None
        self.trial_state = ""
        self.experiment: Json = {}
        self.trials: list[Json] = []
        self.refresh()

    @property
    def state(self) -> str:
        return str(self.experiment.get("state") or "")

    def refresh(self) -> None:
        answer = self._client.get_experiment(self.experiment_id)
        self.experiment = answer["experiment"]
        self.trials = list(answer.get("trials") or [])

    def describe(self) -> str:
        parts = [f"experiment {self.experiment_id} {self.state}"]
        trial = next((t for t in self.trials if t.get("id") == self.trial_id), None)
        if self.trial_id is None:
            parts.append("waiting for the first trial")
        else:
            state = (trial or {}).get("state") or self.trial_state
            parts.append(f"trial {self.trial_id} {state}")
            batches = (trial or {}).get("total_batches")
            if batches:
                parts.append(plural(int(batches), "batch", "batches"))
        progress = format_percent(self.experiment.get("progress"))
        if progress:
            parts.append(progress)
        if len(self.trials) > 1:
            done = sum(1 for t in self.trials if t.get("state") in TERMINAL_STATES)
            parts.append(f"{done}/{len(self.trials)} trials done")
        return " · ".join(parts)
