"""NNI's trial API (`import nni`) on top of `harness`.

| NNI call | what happens |
|---|---|
| `get_next_parameter()` | the trial's hyperparameters, flat: a nested group `{"opt": {"lr": 0.1}}` becomes `{"opt/lr": 0.1}` (names joined with `/`, as the NNI import names them); an NNI nested choice (a dict with `_name`) and dict-valued categoricals are passed as they are; off the platform `{}` (NNI's standalone mode) |
| `report_intermediate_result(x)` | a validation report at `steps_completed` = the number of results reported so far (1, 2, ...), metric `default` = x (a dict must hold `default`; its other keys are kept); then the searcher dialogue: when the count reaches the operation's length, `searcher/completed` with `default`, then the next operation; `stop` exits the process with code 0 (as NNI's assessor kills an early-stopped trial) |
| `report_final_result(x)` | a last validation report (the count goes on), then `searcher/completed` with `default` for the current operation |
| `get_trial_id()`, `get_experiment_id()` | the ids as strings (`"STANDALONE"` off the platform) |
| `get_sequence_id()` | the trial id (0 off the platform): Stratus numbers trials per deployment, not per experiment |

With the `hyperband` or `bohb` searcher (NNI's Hyperband and BOHB advisors), the trial sees its budget as
NNI passes it: `get_next_parameter()` adds `TRIAL_BUDGET`, the length of the searcher's current operation
(the rung's budget, in the unit of the advisor's `R` / `max_budget`). The script trains for that budget
and reports its final result, which is the result at `TRIAL_BUDGET` (reported as a validation at
`steps_completed = TRIAL_BUDGET`); its intermediate results are reported as training metrics (their
count says nothing about the budget, so they are not searcher results). When the process ends, the
searcher's answer is fetched: paused or stopped, it exits; promoted at once to a larger budget, the
script is started again in the same process (`os.execv`) and reads the new `TRIAL_BUDGET`. A promoted
NNI trial thus trains again from scratch, as NNI runs it (NNI scripts keep no checkpoints); a paused one
that is promoted later starts again the same way in its next run. Its intermediate results are numbered
from 1 again (epochs trained from scratch): those at epochs an earlier run of the trial reported are
already stored (a repeated step is a no-op), so the trial's curve keeps the first value of each epoch.

With the `pbt` searcher (NNI's PBTTuner), `get_next_parameter()` adds NNI's `load_checkpoint_dir` and
`save_checkpoint_dir`, intermediate results are not searcher results, and the round ends when the script
exits after its final result: what it saved is uploaded as the trial's checkpoint, then the round is
completed (`_nni_pbt.py`).

The harness context is opened on the first call and closed when the process exits. SIGTERM keeps its
default action (NNI scripts do not poll for preemption); a preemption asked through the heartbeat makes
the next report exit with code 0. Off the platform, reports are printed; with `STRATUS_LOCAL_CONFIG`
the local searcher twin's length applies (the test mode), without it there is no searcher dialogue.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

from stratus import harness
from stratus.harness.compat._nni_adaptdl import ResultCount, result_count, under_adaptdl
from stratus.harness.compat._nni_pbt import PbtRound, at_main_thread_exit, runs_pbt
from stratus.harness.core import Context, LocalSearcherContext, SearcherOperation

log = logging.getLogger("stratus.harness.nni")

GROUP_SEPARATOR = "/"
DEFAULT_METRIC = "default"
STANDALONE = "STANDALONE"
BUDGET_KEY = "TRIAL_BUDGET"
BUDGET_SEARCHERS = ("hyperband", "bohb")  # NNI's advisors that pass TRIAL_BUDGET


def run_script_again() -> None:
    """Replace this process with a new run of the same command line (same interpreter and options)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


class NniTrial:
    """The process's NNI state: one harness context, the report count and the current operation."""

    def __init__(self, restart: Callable[[], None] = run_script_again) -> None:
        self._lock = threading.RLock()
        self._core: Context | None = None
        self._reports = 0
        self._op: SearcherOperation | None = None
        self._params: dict[str, Any] | None = None
        self._budget: int | None = None  # TRIAL_BUDGET, with the hyperband and bohb searchers
        self._budget_done = False  # the final result at that budget is reported
        self._restart = restart
        self._pbt: PbtRound | None = None  # with the pbt searcher: this run's round
        self._adaptdl: ResultCount | None = None  # under stratus.launchers.adaptdl: the count AdaptDL keeps

    # ---- the API -------------------------------------------------------------------------------

    def get_next_parameter(self) -> dict[str, Any]:
        with self._lock:
            core = self._context()
            info = core.info
            if info is None:
                log.warning(
                    "nni.get_next_parameter(): not running on Stratus; returning {} (standalone mode)"
                )
                self._params = {}
            else:
                space = info.config.get("hyperparameters")
                self._params = flatten_hparams(
                    info.trial.hparams, space if isinstance(space, Mapping) else None
                )
                if self._budget is None and _passes_budget(info.config) and self._has_dialogue(core):
                    self._budget = self._operation(core).length
                    atexit.register(self._after_budget)  # runs before `close` (registered earlier)
                if self._budget is not None:
                    self._params[BUDGET_KEY] = self._budget
                if self._pbt is None and runs_pbt(info.config):
                    self._start_pbt_round(core)
                if self._pbt is not None:
                    self._params.update(self._pbt.folders())
            return dict(self._params)

    def get_current_parameter(self, tag: str | None = None) -> Any:
        with self._lock:
            params = self._params if self._params is not None else self.get_next_parameter()
            return dict(params) if tag is None else params[tag]

    def report_intermediate_result(self, metric: Any) -> None:
        with self._lock:
            if self._budget is not None:  # a point on the way to TRIAL_BUDGET: not a searcher result
                core = self._context()
                self._count()
                core.train.report_training_metrics(steps_completed=self._reports, metrics=as_metrics(metric))
                self._exit_if_preempted(core)
                return
            core, metrics = self._report_validation(metric)
            self._exit_if_preempted(core)
            if not self._has_dialogue(core) or self._pbt is not None:
                return
            op = self._operation(core)
            if op.length is not None and self._reports >= op.length:
                op.report_completed(metrics[DEFAULT_METRIC])
                self._op = None
                self._operation(core)  # the next one now: a stop ends the trial here

    def report_final_result(self, metric: Any) -> None:
        with self._lock:
            if self._budget is not None:
                self._report_at_budget(metric)
                return
            core, metrics = self._report_validation(metric)
            if self._pbt is not None:  # the round ends at exit, once the script has saved its model
                self._pbt.final_metric = metrics[DEFAULT_METRIC]
                return
            if not self._has_dialogue(core):
                return
            op = self._operation(core)
            op.report_completed(metrics[DEFAULT_METRIC], length=self._reports if op.length is None else None)
            self._op = None

    def get_trial_id(self) -> str:
        info = self._context().info
        return str(info.trial.trial_id) if info is not None and not info.is_local else STANDALONE

    def get_experiment_id(self) -> str:
        info = self._context().info
        return str(info.trial.experiment_id) if info is not None and not info.is_local else STANDALONE

    def get_sequence_id(self) -> int:
        info = self._context().info
        return info.trial.trial_id if info is not None else 0

    def close(self) -> None:
        with self._lock:
            if self._core is not None:
                self._core.close()
                self._core = None

    # ---- inside --------------------------------------------------------------------------------

    def _report_at_budget(self, metric: Any) -> None:
        """The final result of a TRIAL_BUDGET run: the searcher result at that budget."""
        if self._budget_done:
            raise RuntimeError(
                "nni.report_final_result() was already called for this TRIAL_BUDGET; call it once."
            )
        metrics = as_metrics(metric)
        core = self._context()
        budget = int(self._budget or 0)
        core.train.report_validation_metrics(steps_completed=budget, metrics=metrics)
        self._operation(core).report_completed(metrics[DEFAULT_METRIC])
        self._op = None
        self._budget_done = True

    def _after_budget(self) -> None:
        """At exit, after a final result at TRIAL_BUDGET: ask the searcher what comes next. Paused or
        stopped: the process ends. Promoted to a larger budget: the script runs again from the start."""
        with self._lock:
            if not self._budget_done or self._core is None:
                return
            op = self._core.searcher.next_operation()
            if op is None or op.length is None or op.length <= int(self._budget or 0):
                return
            log.info("promoted to %s=%d; starting the trial script again", BUDGET_KEY, op.length)
            print(f"[nni] promoted to {BUDGET_KEY}={op.length}; running the trial script again", flush=True)
            self.close()
        self._restart()

    def _start_pbt_round(self, core: Context) -> None:
        """NNI's PBT folders for this run's round; its end is registered to run when the script ends,
        before `close` (an `atexit` handler). The caller holds the lock."""
        op = self._operation(core) if self._has_dialogue(core) else None
        self._pbt = PbtRound.start(core, op)
        self._reports = self._pbt.results_before
        at_main_thread_exit(self.end_pbt_round)

    def end_pbt_round(self) -> None:
        """End this run's PBT round (see `_nni_pbt.py`): registered to run at exit, as NNI trial code
        saves its model after its final result; once."""
        with self._lock:
            pbt, self._pbt = self._pbt, None
            if pbt is None:
                return
            try:
                if self._core is not None:
                    pbt.end(self._reports)
            except Exception:  # the round is not completed: the searcher replaces a member that exits
                log.exception("the PBT round could not be ended (its checkpoint or its result was not sent)")
            finally:
                pbt.remove()

    def _report_validation(self, metric: Any) -> tuple[Context, dict[str, Any]]:
        """Report `metric` as the next validation (`steps_completed` = results reported so far); the
        caller holds the lock."""
        metrics = as_metrics(metric)
        core = self._context()
        self._count()
        core.train.report_validation_metrics(steps_completed=self._reports, metrics=metrics)
        return core, metrics

    def _context(self) -> Context:
        if self._core is None:
            self._core = harness.core.init(handle_sigterm=False)
            atexit.register(self.close)
        return self._core

    def _count(self) -> None:
        """One more result (under AdaptDL, counted on from its checkpoint: `_nni_adaptdl`)."""
        if self._adaptdl is None and under_adaptdl():
            self._adaptdl = result_count()
            self._reports = max(self._reports, self._adaptdl.value)
        self._reports += 1
        if self._adaptdl is not None:
            self._adaptdl.value = self._reports

    def _has_dialogue(self, core: Context) -> bool:
        searcher = core.searcher
        return not (isinstance(searcher, LocalSearcherContext) and not searcher.configured)

    def _operation(self, core: Context) -> SearcherOperation:
        if self._op is None:
            self._op = core.searcher.next_operation()
            if self._op is None:
                self._exit_process("the searcher stopped the trial")
        assert self._op is not None
        return self._op

    def _exit_if_preempted(self, core: Context) -> None:
        if under_adaptdl():
            return  # AdaptDL stops on the launcher's SIGTERM, after saving (`_nni_adaptdl`)
        if core.preempt.should_preempt():
            self._exit_process("the platform asked the trial to stop")

    def _exit_process(self, why: str) -> None:
        """End the trial's process with code 0 (success): NNI's way to stop a trial early."""
        log.info("%s after %d results; exiting with code 0", why, self._reports)
        print(f"[nni] {why}; exiting", flush=True)
        self.close()
        sys.exit(0)


def _passes_budget(config: Mapping[str, Any]) -> bool:
    """Whether the experiment's searcher gives NNI trials a TRIAL_BUDGET (hyperband and bohb)."""
    searcher = config.get("searcher")
    return isinstance(searcher, Mapping) and searcher.get("name") in BUDGET_SEARCHERS


def as_metrics(metric: Any) -> dict[str, Any]:
    """An NNI result as metrics: a number is `{"default": x}`; a dict must hold `default`."""
    if isinstance(metric, Mapping):
        if DEFAULT_METRIC not in metric:
            raise ValueError(
                f"an NNI result dict must hold the key 'default' (the metric the tuner uses); got {sorted(metric)}."
            )
        return {str(k): v for k, v in metric.items()}
    return {DEFAULT_METRIC: metric}


def flatten_hparams(hparams: Mapping[str, Any], space: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Hyperparameters as NNI gives them: nested groups flattened to `group/name`.

    With the config's `hyperparameters` section (`space`), a value is a group only where the space has a
    group (a mapping without `type`); without it, any dict without NNI's `_name` key is taken as a group.
    """
    out: dict[str, Any] = {}

    def walk(prefix: str, values: Mapping[str, Any], specs: Mapping[str, Any] | None) -> None:
        for name, value in values.items():
            spec = specs.get(name) if specs is not None else None
            if isinstance(value, Mapping) and _is_group(value, spec, specs is not None):
                walk(f"{prefix}{name}{GROUP_SEPARATOR}", value, spec if isinstance(spec, Mapping) else None)
            else:
                out[f"{prefix}{name}"] = value

    walk("", hparams, space)
    return out


def _is_group(value: Mapping[str, Any], spec: Any, have_space: bool) -> bool:
    if have_space:
        return isinstance(spec, Mapping) and "type" not in spec
    return "_name" not in value


def merge_parameter(base_params: Any, override_params: Mapping[str, Any]) -> Any:
    """NNI's `nni.utils.merge_parameter`: `base_params` (an argparse Namespace or a dict) updated with
    the tuner's values, each cast to the type of the value it replaces."""
    is_dict = isinstance(base_params, dict)
    for key, value in override_params.items():
        known = key in base_params if is_dict else hasattr(base_params, key)
        if not known:
            raise ValueError(f"key {key!r} of the parameters is not among the base parameters.")
        current = base_params[key] if is_dict else getattr(base_params, key)
        cast = value
        if current is not None and not isinstance(value, type(current)):
            try:
                cast = type(current)(value)
            except (TypeError, ValueError) as e:
                raise TypeError(f"parameter {key!r}: {value!r} is not a {type(current).__name__}.") from e
        if is_dict:
            base_params[key] = cast
        else:
            setattr(base_params, key, cast)
    return base_params


trial = NniTrial()
