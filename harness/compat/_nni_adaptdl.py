"""NNI trial code under `stratus.launchers.adaptdl` (NNI's `adl` training service, issue 15).

Two things differ from a plain NNI trial:

- **Stopping is AdaptDL's.** A preempt (a pause, a rescale, a spot notice) reaches the replicas as SIGTERM
  from the launcher; AdaptDL saves every registered state at its next batch and exits 143, which the
  launcher turns into the preempt path's clean exit. The NNI shim's own way, exiting 0 at the next
  result, would end the run *without* AdaptDL's checkpoint (a clean exit saves nothing), and the trial
  would start again from epoch 0 when resumed. So under the launcher the shim never exits on a preempt.
- **The result count survives restarts.** Each result is the trial's next step; a restarted replica
  would count from 0 again and its results would land on steps already stored (and be dropped). The
  count is an `adaptdl.checkpoint.State`, saved with AdaptDL's own checkpoint and restored from it, so it
  matches the epoch AdaptDL resumes from.
"""

from __future__ import annotations

import importlib
import os
from typing import IO, Any

from stratus.contract import adaptdl

#: The state's name in AdaptDL's checkpoint folder.
STATE_NAME = "stratus-nni-results"


def under_adaptdl() -> bool:
    """Whether this process is a replica `stratus.launchers.adaptdl` started."""
    return os.environ.get(adaptdl.REPLICA_ENV) == "1"


class ResultCount:
    """The number of results reported, kept in AdaptDL's checkpoint (restored on creation)."""

    def __init__(self) -> None:
        # The trial's own dependency, not the compute side's (as `stratus.launchers._adaptdl_proxy` loads goodput):
        # only a replica of stratus.launchers.adaptdl gets here, and AdaptDL is what runs it.
        checkpoint = importlib.import_module("adaptdl.checkpoint")

        outer = self

        class _State(checkpoint.State):  # type: ignore[name-defined,misc]
            def save(self, fileobj: IO[bytes]) -> None:
                fileobj.write(str(outer.value).encode())

            def load(self, fileobj: IO[bytes]) -> None:
                raw = fileobj.read().decode().strip()
                outer.value = int(raw) if raw.isdigit() else 0

        self.value = 0
        self._state: Any = _State(STATE_NAME)
        checkpoint.load_state(self._state)


_count: ResultCount | None = None


def result_count() -> ResultCount:
    """The process's one count (AdaptDL allows one state of a name per process)."""
    global _count
    if _count is None:
        _count = ResultCount()
    return _count
