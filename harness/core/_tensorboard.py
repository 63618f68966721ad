"""Where a trial writes TensorBoard files (Determined's `core.train.get_tensorboard_path()`).

Stratus does not upload TensorBoard files: the folder is a local one, per trial and rank, under the
system's temporary folder, and the first call says so in the trial's log.
"""

from __future__ import annotations

import logging
import tempfile
import threading
from pathlib import Path

from stratus.harness._info import load_cluster_info

log = logging.getLogger("stratus.harness.tensorboard")

_said = threading.Event()


def tensorboard_path(rank: int, root: Path | None = None) -> Path:
    """The trial's TensorBoard folder for ``rank`` (created): ``<tmp>/stratus-tensorboard/<trial>/rank-N``;
    ``<trial>`` is ``trial-<id>`` on the platform, ``local`` off it."""
    info = load_cluster_info()
    trial = f"trial-{info.trial.trial_id}" if info is not None else "local"
    path = (root or Path(tempfile.gettempdir())) / "stratus-tensorboard" / trial / f"rank-{rank}"
    path.mkdir(parents=True, exist_ok=True)
    if not _said.is_set():
        _said.set()
        log.warning(
            "TensorBoard files go to %s and stay on this machine: Stratus does not upload them; copy "
            "them into a checkpoint (core.checkpoint.store_path) to keep them.",
            path,
        )
    return path
