"""NNI's PBT checkpoint folders on top of the Core API: one round of Stratus' `pbt` searcher per run of
an NNI trial script (what `PBTTuner` becomes, `chalicelib.config._nni_pbt`).

NNI's PBTTuner hands each trial two folders among its parameters: `load_checkpoint_dir`, where the trial
code finds the model it continues (none on the first step), and `save_checkpoint_dir`, where it saves the
model at the end of its step (before or after `nni.report_final_result()`: NNI's own example saves after
it). Here, with the experiment's searcher `pbt`:

- `get_next_parameter()` adds both: `load_checkpoint_dir` holds the files of the trial's latest
  checkpoint (its own from its previous round, or, for a new member, the checkpoint of the member it
  was started from: `info.latest_checkpoint`), and is a folder that does not exist on a first round, as
  in NNI; `save_checkpoint_dir` is a fresh empty folder. Both are local (under a temporary folder
  removed at exit); checkpoints live in the platform's storage.
- the round ends when the trial script exits after its final result: the stand-in uploads the files of
  `save_checkpoint_dir` as the trial's checkpoint (`steps_completed` = the results the trial has
  reported, counted on from its own previous rounds; nothing is uploaded from an empty folder), then
  completes the searcher's operation with the final result, then waits for the searcher's answer, so
  the platform pauses the trial at the end of its round (or stops it after the last one).
- a script that exits without a final result (or is preempted) ends no round: the searcher replaces a
  member that exited, and a preempted one runs its round again.
"""

from __future__ import annotations

import atexit
import json
import logging
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from stratus.harness.core import Context, SearcherOperation

log = logging.getLogger("stratus.harness.nni")

PBT_SEARCHER = "pbt"
LOAD_KEY = "load_checkpoint_dir"
SAVE_KEY = "save_checkpoint_dir"
METADATA_FILE = "metadata.json"  # the Core API's own file in a checkpoint, not the trial's
TRIAL_KEY = "nni_pbt_trial_id"  # which trial stored a checkpoint (a warm start counts from 0)
ROUND_KEY = "nni_pbt_round"


def runs_pbt(config: Mapping[str, Any]) -> bool:
    """Whether the experiment's searcher is pbt (NNI's PBTTuner, or a Stratus config)."""
    searcher = config.get("searcher")
    return isinstance(searcher, Mapping) and searcher.get("name") == PBT_SEARCHER


def at_main_thread_exit(func: Callable[[], None]) -> None:
    """Run `func` when the main thread ends, before `concurrent.futures` stops taking work: the checkpoint
    upload uses a thread pool, which refuses new work by the time `atexit` handlers run. `threading`'s
    own exit hook (what `concurrent.futures` registers with) has no public name; `atexit` where absent."""
    register = getattr(threading, "_register_atexit", None)
    (register if callable(register) else atexit.register)(func)


class PbtRound:
    """This process's round: its folders, the results reported before it, and how it ends."""

    def __init__(self, core: Context, op: SearcherOperation | None, root: Path, results_before: int) -> None:
        self._core = core
        self._op = op
        self.root = root
        self.load_dir = root / "load"
        self.save_dir = root / "save"
        self.results_before = results_before
        self.final_metric: Any = None
        self.ended = False

    @classmethod
    def start(cls, core: Context, op: SearcherOperation | None) -> PbtRound:
        """The round of the operation `op` (None off the platform): the latest checkpoint restored into
        the load folder, an empty save folder."""
        root = Path(tempfile.mkdtemp(prefix="stratus-nni-pbt-"))
        info = core.info
        latest = info.latest_checkpoint if info is not None else None
        results_before = 0
        load_dir = root / "load"
        if latest:
            core.checkpoint.download(latest, load_dir)
            marker = load_dir / METADATA_FILE
            meta = json.loads(marker.read_text()) if marker.is_file() else {}
            marker.unlink(missing_ok=True)  # the trial gets back what it saved, nothing more
            own = info is not None and meta.get(TRIAL_KEY) == info.trial.trial_id
            steps = meta.get("steps_completed")
            results_before = int(steps) if own and isinstance(steps, int) else 0
            log.info("load_checkpoint_dir: checkpoint %s (%s)", latest, "its own" if own else "warm start")
        (root / "save").mkdir()
        return cls(core, op, root, results_before)

    def folders(self) -> dict[str, str]:
        """NNI's two parameters."""
        return {LOAD_KEY: str(self.load_dir), SAVE_KEY: str(self.save_dir)}

    def end(self, results: int) -> None:
        """At exit: store what the trial saved, then complete the round with its final result and wait
        for the searcher's answer (pause, or stop after the last round). Once; nothing without a final
        result."""
        if self.ended or self.final_metric is None:
            return
        self.ended = True
        saved = [p for p in self.save_dir.rglob("*") if p.is_file()] if self.save_dir.is_dir() else []
        if saved:
            info = self._core.info
            metadata: dict[str, Any] = {"steps_completed": results}
            if info is not None:
                metadata[TRIAL_KEY] = info.trial.trial_id
            if self._op is not None and self._op.length is not None:
                metadata[ROUND_KEY] = self._op.length
            storage_id = self._core.checkpoint.upload(self.save_dir, metadata)
            log.info("save_checkpoint_dir stored as checkpoint %s", storage_id)
        else:
            log.warning(
                "%s is empty: no checkpoint for this round; the next round (and any member started from "
                "this one) starts from scratch",
                SAVE_KEY,
            )
        if self._op is None:
            return
        self._op.report_completed(self.final_metric)
        answer = self._core.searcher.next_operation()  # waits until the searcher has decided
        if answer is not None:
            log.warning("the searcher asked for more (length %s) in the same run; exiting", answer.length)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
