"""`det experiment create --test-mode` and `det experiment create --local --test-mode`.

Both run the experiment's code for one batch with a test config and check four steps, as
Determined's test mode does: **scheduling**, **training**, **validation**, **checkpointing**.

The test config is `det._test_config.make_test_config`'s; the checklist is `det._checklist.Checklist`.

Remote (``--test-mode``)
    The API validates the original config, then the test config (both ``validate_only``, so nothing is
    packed or uploaded when either is refused); the context is packed and uploaded as by a normal
    create, the test experiment is created and activated, and then watched every `POLL_INTERVAL`
    seconds until it is terminal. For its first trial:

    * scheduling ✓ when the trial is RUNNING or past it (STOPPING_*, COMPLETED), or has an exit, or
      any later step is ✓;
    * training ✓ when ``GET /trials/{id}/metrics?group=training`` has a record. A script that trains
      its batch but reports no training metric cannot show that, so training is also ✓ once a
      validation metric exists, or once the trial COMPLETED with ``total_batches ≥ 1``;
    * validation ✓ when ``GET /trials/{id}/metrics?group=validation`` has a record;
    * checkpointing ✓ when ``GET /trials/{id}`` lists a checkpoint.

    Passed (exit 0, ``Test experiment N passed`` on stdout) when the experiment ended COMPLETED with
    scheduling, training and validation ✓; a missing checkpoint is a ``Warning:`` line on stderr, not a
    failure, as Determined passes a Core API script that saves none. Otherwise (exit 1) stdout gets
    ``Test experiment N failed at STEP: why`` and then the trial's whole log.

    The test experiment is created archived, as Determined creates it: `det experiment list` shows it
    only with ``--all``.

Local (``--local --test-mode``): no control plane, nothing packed or uploaded
    The entrypoint runs on this machine, in a temporary copy of the context, with the test values;
    the steps are ticked from the events the harness's local twins report. See `det._testmode_local`.

An NNI config is refused with a usage error: the API translates NNI configs, so the CLI cannot make
a test config of one.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from det._checklist import WARNED_STEPS, Checklist
from det._client import ApiClient
from det._logs import POLL_INTERVAL, TERMINAL_STATES, format_line, read_log_pages
from det._runtime import Runtime
from det._test_config import make_test_config
from det._testmode_local import run_local
from det._upload import pack_and_upload
from det.errors import UsageError
from stratus.contract.nni import is_nni_config

Json = dict[str, Any]

# Trial states that mean the trial got its slots and was started.
_STARTED_STATES = frozenset(
    {
        "RUNNING",
        "STOPPING_COMPLETED",
        "STOPPING_ERROR",
        "STOPPING_CANCELED",
        "STOPPING_KILLED",
        "COMPLETED",
    }
)


def create(args: argparse.Namespace, rt: Runtime, config: Mapping[str, Any]) -> int:
    """`det experiment create` with ``--test-mode`` and/or ``--local``; `config` is loaded and overridden."""
    if args.local and not args.test_mode:
        raise UsageError(
            "--local needs --test-mode: only the test runs on this machine; "
            "add --test-mode, or drop --local to submit the experiment"
        )
    if is_nni_config(config):
        raise UsageError(
            f"{args.config_file} is an NNI config, which only the API translates, so the CLI cannot make "
            "a one-batch test of it; test the trial code with a Determined config (entrypoint, "
            "searcher, hyperparameters)"
        )
    test_config = make_test_config(config, default_name=Path(args.config_file).stem)
    if args.local:
        return run_local(args, rt, test_config)
    return run_remote(args, rt, config, test_config)


# --------------------------------------------------------------------------------------------------
# remote


def run_remote(args: argparse.Namespace, rt: Runtime, config: Mapping[str, Any], test_config: Json) -> int:
    with rt.client() as client:
        # The original first: the problems it has are the user's, at the paths of their file.
        client.create_experiment(config, context_sha256=None, validate_only=True, activate=True)
        client.create_experiment(test_config, context_sha256=None, validate_only=True, activate=True)
        sha256 = pack_and_upload(args, rt, client)
        answer = client.create_experiment(
            test_config, context_sha256=sha256, validate_only=False, activate=True, archived=True
        )
        experiment_id = int(answer["experiment"]["id"])
        rt.say(f"Created test experiment {experiment_id}")
        for warning in answer.get("warnings") or []:
            rt.note(f"Warning: {warning}")
        return watch_remote(rt, client, experiment_id)


def watch_remote(rt: Runtime, client: ApiClient, experiment_id: int) -> int:
    """Tick the steps until the experiment is terminal; 0 if it passed, else 1 after the trial's log."""
    checks = Checklist(rt)
    probe = _RemoteProbe(client, experiment_id)
    try:
        while True:
            probe.refresh()
            terminal = probe.state in TERMINAL_STATES  # checked before the steps: they see the end
            checks.tick(probe.reached(checks.done))
            if terminal:
                break
            checks.show(probe.describe())
            rt.sleep(POLL_INTERVAL)
    finally:
        checks.status.clear()  # also on Ctrl-C: leave the terminal clean
    checks.finish()
    missing = checks.missing()
    if probe.state == "COMPLETED" and not missing:
        for step in checks.skipped():
            rt.note(f"Warning: trial {probe.trial_id} {WARNED_STEPS[step]}")
        rt.say(f"Test experiment {experiment_id} passed")
        return 0
    if missing:
        rt.say(f"Test experiment {experiment_id} failed at {missing[0]}: {probe.why(missing[0])}")
    else:
        rt.say(f"Test experiment {experiment_id} failed: {probe.ending()}")
    if probe.trial_id is not None:
        rt.say(f"Log of trial {probe.trial_id}:")
        for page in read_log_pages(client, probe.trial_id, sleep=rt.sleep):
            rt.out.write("".join(format_line(line) + "\n" for line in page))
        rt.out.flush()
    return 1


class _RemoteProbe:
    """What the API says about the test experiment and its (first) trial."""

    def __init__(self, client: ApiClient, experiment_id: int) -> None:
        self._client = client
        self.experiment_id = experiment_id
        self.experiment: Json = {}
        self.trial: Json | None = None

    @property
    def state(self) -> str:
        return str(self.experiment.get("state") or "")

    @property
    def trial_id(self) -> int | None:
        return None if self.trial is None else int(self.trial["id"])

    @property
    def trial_state(self) -> str:
        return str((self.trial or {}).get("state") or "")

    def refresh(self) -> None:
        answer = self._client.get_experiment(self.experiment_id)
        self.experiment = answer["experiment"]
        trials = list(answer.get("trials") or [])
        self.trial = min(trials, key=lambda t: int(t["id"])) if trials else None

    def reached(self, done: Mapping[str, bool]) -> set[str]:
        """The steps not yet done that the trial shows now (asks only about those)."""
        trial, trial_id = self.trial, self.trial_id
        if trial is None or trial_id is None:
            return set()
        reached: set[str] = set()
        if not done["validation"] and self._client.trial_metrics(trial_id, "validation"):
            reached.add("validation")
        validated = done["validation"] or "validation" in reached
        if not done["training"] and (
            validated
            or (self.trial_state == "COMPLETED" and int(trial.get("total_batches") or 0) >= 1)
            or self._client.trial_metrics(trial_id, "training")
        ):
            reached.add("training")
        if not done["checkpointing"]:
            answer = self._client.get_trial(trial_id)
            if answer.get("checkpoints") or (answer.get("trial") or {}).get("latest_checkpoint"):
                reached.add("checkpointing")
        if reached or self.trial_state in _STARTED_STATES or trial.get("exit"):
            reached.add("scheduling")
        return reached

    def describe(self) -> str:
        if self.trial is None:
            return f"experiment {self.experiment_id} {self.state}, waiting for its trial"
        return f"trial {self.trial_id} {self.trial_state}"

    def why(self, step: str) -> str:
        trial_id = self.trial_id
        if trial_id is None:
            return f"the experiment ended {self.state} without creating a trial"
        what = {
            "scheduling": f"trial {trial_id} never started",
            "training": f"trial {trial_id} reported no training metric and trained no batch",
            "validation": f"trial {trial_id} reported no validation metric",
        }[step]
        return f"{what} ({self.ending()})"

    def ending(self) -> str:
        parts = [f"experiment {self.state}"]
        if self.trial is not None:
            parts.append(f"trial {self.trial_state}")
            exit_info = self.trial.get("exit")
            if isinstance(exit_info, Mapping):
                reason = exit_info.get("reason")
                parts.append(f"exit code {exit_info.get('code')}" + (f": {reason}" if reason else ""))
        return ", ".join(parts)
