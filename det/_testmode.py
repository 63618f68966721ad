"""`det experiment create --test-mode` and `det experiment create --local --test-mode`.

Both run the experiment's code for one batch with a test config and check four steps, as
Determined's test mode does: **scheduling**, **training**, **validation**, **checkpointing**.

The test config (`make_test_config`), from the config as loaded (file + ``--config`` overrides):

* ``searcher``: ``{name: single, metric, smaller_is_better, max_length: {batches: 1}}`` (``metric`` and
  ``smaller_is_better`` copied when the original has them; ``time_metric``/``max_time`` dropped);
* ``hyperparameters``: every non-constant one becomes ``{type: const, val: ...}`` with a deterministic
  value: ``int``/``double`` their ``minval``, ``log`` ``base ** minval``, ``categorical`` its first
  value; nested groups recursively; constants (bare or ``type: const``) stay as written;
* ``min_validation_period`` and ``min_checkpoint_period`` removed, ``max_restarts: 0``,
  ``scheduling_unit: 1``, and `` (test mode)`` appended to the name (the config file's stem when the
  config has no name).

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

    Passed (exit 0, ``Test experiment N passed`` on stdout) when the experiment ended COMPLETED with all
    four ✓. Otherwise (exit 1) stdout gets ``Test experiment N failed at STEP: why`` and then the
    trial's whole log.

Local (``--local --test-mode``): no control plane, nothing packed or uploaded
    The entrypoint runs on this machine, in a temporary copy of the context, with the test values;
    the steps are ticked from the events the harness's local twins report. See `det._testmode_local`.

An NNI config is refused with a usage error: the API translates NNI configs, so the CLI cannot make
a test config of one.

The checklist goes to stderr: one line redrawn in place on a terminal, else one ``[✓] step`` line per
step as it is reached and a ``[✗] step`` line per step never reached.
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from contract.nni import is_nni_config
from det._client import ApiClient
from det._logs import POLL_INTERVAL, TERMINAL_STATES, StatusLine, format_line, read_log_pages
from det._runtime import Runtime
from det._submit import pack_and_upload
from det._testmode_local import (  # the first three are re-exported: they used to live here
    _EventsFile,  # noqa: F401
    entrypoint_command,  # noqa: F401
    local_environment,  # noqa: F401
    run_local,
)
from det.errors import UsageError

Json = dict[str, Any]

STEPS = ("scheduling", "training", "validation", "checkpointing")
NAME_SUFFIX = " (test mode)"
HP_TYPES = ("const", "int", "double", "log", "categorical")

# Trial states that mean the trial got its slots and was started.
_STARTED_STATES = frozenset(
    {"RUNNING", "STOPPING_COMPLETED", "STOPPING_ERROR", "STOPPING_CANCELED", "COMPLETED"}
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
# the test config


def make_test_config(config: Mapping[str, Any], *, default_name: str = "Experiment") -> dict[str, Any]:
    """The config of the one-batch test experiment (see the module docstring); `config` is not changed."""
    test = copy.deepcopy(dict(config))
    searcher = config.get("searcher")
    original = searcher if isinstance(searcher, Mapping) else {}
    single: dict[str, Any] = {"name": "single"}
    for key in ("metric", "smaller_is_better"):
        if key in original:
            single[key] = copy.deepcopy(original[key])
    single["max_length"] = {"batches": 1}
    test["searcher"] = single
    hyperparameters = config.get("hyperparameters")
    if isinstance(hyperparameters, Mapping):
        test["hyperparameters"] = test_hyperparameters(hyperparameters)
    test.pop("min_validation_period", None)
    test.pop("min_checkpoint_period", None)
    test["max_restarts"] = 0
    test["scheduling_unit"] = 1
    name = config.get("name")
    test["name"] = f"{name if name not in (None, '') else default_name}{NAME_SUFFIX}"
    return test


def test_hyperparameters(hyperparameters: Mapping[str, Any], where: str = "hyperparameters") -> Json:
    """Every hyperparameter as a constant: ranges at their low end, categoricals at their first value."""
    out: Json = {}
    for name, spec in hyperparameters.items():
        path = f"{where}.{name}"
        if isinstance(spec, Mapping) and "type" not in spec:
            out[name] = test_hyperparameters(spec, path)
        elif isinstance(spec, Mapping) and spec.get("type") != "const":
            out[name] = {"type": "const", "val": _test_value(spec, path)}
        else:
            out[name] = copy.deepcopy(spec)  # a constant, bare or `type: const`
    return out


def hparam_values(hyperparameters: Mapping[str, Any], where: str = "hyperparameters") -> Json:
    """The values a trial gets for (constant) `hyperparameters`, nested like the groups."""
    out: Json = {}
    for name, spec in hyperparameters.items():
        path = f"{where}.{name}"
        if isinstance(spec, Mapping) and "type" not in spec:
            out[name] = hparam_values(spec, path)
        elif isinstance(spec, Mapping):
            out[name] = _test_value(spec, path)
        else:
            out[name] = copy.deepcopy(spec)
    return out


def _test_value(spec: Mapping[str, Any], path: str) -> Any:
    kind = spec.get("type")
    try:
        if kind == "const":
            return copy.deepcopy(spec["val"])
        if kind == "int":
            return spec["minval"]
        if kind == "double":
            return float(spec["minval"])
        if kind == "log":
            base = spec.get("base")
            return float(10 if base is None else base) ** float(spec["minval"])
        if kind == "categorical":
            return copy.deepcopy(spec["vals"][0])
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise UsageError(
            f"{path} of type {kind} has no usable {_missing_field(kind)}; fix the hyperparameter"
        ) from e
    raise UsageError(f"{path} has type {kind!r}, which is not one of {', '.join(HP_TYPES)}; fix its type")


def _missing_field(kind: object) -> str:
    return {"const": "val", "categorical": "vals (a non-empty list)"}.get(str(kind), "minval")


# --------------------------------------------------------------------------------------------------
# the checklist


class Checklist:
    """The four steps, shown on stderr: one redrawn line on a terminal, else a line per step."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt
        self.done: dict[str, bool] = dict.fromkeys(STEPS, False)
        self.status = StatusLine(rt.err, enabled=rt.err_is_tty())
        self._shown = ""

    def tick(self, steps: Iterable[str]) -> None:
        wanted = set(steps)
        for step in STEPS:  # in their order, whatever the order they were seen in
            if step in wanted and not self.done[step]:
                self.done[step] = True
                if not self.status.enabled:
                    self._rt.note(f"[✓] {step}")

    def missing(self) -> list[str]:
        return [step for step in STEPS if not self.done[step]]

    def line(self, *, final: bool = False) -> str:
        marks = {True: "✓", False: "✗" if final else " "}
        return "  ".join(f"[{marks[self.done[step]]}] {step}" for step in STEPS)

    def show(self, detail: str = "") -> None:
        text = self.line() + (f" · {detail}" if detail else "")
        if text != self._shown:  # redrawn only when it changes
            self.status.show(text)
            self._shown = text

    def print_lines(self, lines: list[str]) -> None:
        self.status.print_lines(self._rt.out, lines)

    def finish(self) -> None:
        """Leave the final state on stderr: ✓ or ✗ for every step."""
        self.status.clear()
        if self.status.enabled:
            self._rt.note(self.line(final=True))
        else:
            for step in self.missing():
                self._rt.note(f"[✗] {step}")


# --------------------------------------------------------------------------------------------------
# remote


def run_remote(args: argparse.Namespace, rt: Runtime, config: Mapping[str, Any], test_config: Json) -> int:
    with rt.client() as client:
        # The original first: the problems it has are the user's, at the paths of their file.
        client.create_experiment(config, context_sha256=None, validate_only=True, activate=True)
        client.create_experiment(test_config, context_sha256=None, validate_only=True, activate=True)
        sha256 = pack_and_upload(args, rt, client)
        answer = client.create_experiment(
            test_config, context_sha256=sha256, validate_only=False, activate=True
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
            "checkpointing": f"trial {trial_id} reported no checkpoint",
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
