"""The AdaptDL folders across restarts: restored before the replicas start, saved after they exit.

**Over the API, as a Stratus checkpoint** (not with S3 credentials: a trial has none; its only S3 access is
the presigned URLs the API gives for its own prefix). Node 0 saves the newest ``checkpoint-N`` and the
share folder as one ordinary checkpoint: ``POST /trials/{id}/checkpoints/uploads`` for presigned PUT URLs,
the files, ``metadata.json`` last (the marker: a checkpoint without it does not exist), then
``POST /trials/{id}/checkpoints`` with ``stratus.contract.adaptdl.checkpoint_metadata(N)``. Its
``steps_completed`` is N, so the trial's latest checkpoint, which the control plane only moves forward,
is the newest AdaptDL one and reaches the next run as ``STRATUS_LATEST_CHECKPOINT``. Every node restores it
through ``GET /checkpoints/{uuid}/downloads`` (every replica reads the checkpoint in AdaptDL). Why one
checkpoint for both folders rather than a second kind: the routes, the S3 layout, the retention and the
``det checkpoint`` commands exist and need no change, and the share folder is always the one that went
with that checkpoint. A file of 1 MiB or more unchanged since the checkpoint this node restored (its size
and modification time as the restore left them: the share folder's, the TensorBoard files written
before, the restored ``checkpoint-N`` a completed trial stores again) is not uploaded again: the new
checkpoint names it in ``copy_from`` and the control plane copies it within the trial's S3 prefix (a
shared dataset crosses the network once, not at every rescale); a share file already on the node with the
stored size is not downloaded again. Where the control plane cannot copy (the old checkpoint is gone),
everything is uploaded.

The TensorBoard folder (``ADAPTDL_TENSORBOARD_LOGDIR``) goes with them, so it lives as long as the trial's
checkpoints (NNI keeps it for the experiment): restored at every start, saved with every AdaptDL save, and
once more when the trial completes (`tensorboard_files`), since AdaptDL saves nothing at a normal exit.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
import urllib.parse
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from stratus.contract import adaptdl
from stratus.contract.errors import HttpCallError
from stratus.contract.http import Session
from stratus.launchers.errors import SyncError

METADATA_FILE = "metadata.json"
MAX_FILES = 10_000  # the API's limit per checkpoint
#: An unchanged file is copied by the control plane rather than uploaded from this size on (a smaller
#: one costs the node one quick PUT, and the API call's copies are limited: `MAX_COPIES`, largest first).
COPY_MIN_BYTES = 1 << 20
MAX_COPIES = 1_000
_CHECKPOINT = re.compile(r"checkpoint-(\d+)")


@dataclass(frozen=True)
class Folders:
    """This node's AdaptDL folders (absolute), created by `prepare`."""

    checkpoint: Path
    share: Path
    tensorboard: Path

    @classmethod
    def prepare(cls, root: str | Path) -> Folders:
        base = Path(root).absolute()
        folders = cls(base / adaptdl.CHECKPOINT_DIR, base / adaptdl.SHARE_DIR, base / adaptdl.TENSORBOARD_DIR)
        for path in (folders.checkpoint, folders.share, folders.tensorboard):
            path.mkdir(parents=True, exist_ok=True)  # AdaptDL lists the checkpoint folder: it must exist
        return folders


def highest_checkpoint(folder: Path) -> int | None:
    """The N of the highest ``checkpoint-N`` folder in ``folder`` (what AdaptDL restores), or None."""
    found = [
        int(m[1]) for p in folder.glob("checkpoint-*") if p.is_dir() and (m := _CHECKPOINT.fullmatch(p.name))
    ]
    return max(found, default=None)


def num_restarts(control_plane: int, highest: int | None) -> int:
    """``ADAPTDL_NUM_RESTARTS`` for this start: it must go up at every start (AdaptDL renames its save to
    ``checkpoint-<it>`` and fails on an existing one), so it is past the highest checkpoint present."""
    return max(control_plane, -1 if highest is None else highest + 1)


def checkpoint_files(folders: Folders, n: int) -> dict[str, Path]:
    """What a save of ``checkpoint-n`` stores: stored name -> local file."""
    files: dict[str, Path] = {}
    base = folders.checkpoint / f"checkpoint-{n}"
    for kind, root in (
        (f"{adaptdl.CHECKPOINT_DIR}/checkpoint-{n}", base),
        (adaptdl.SHARE_DIR, folders.share),
        (adaptdl.TENSORBOARD_DIR, folders.tensorboard),
    ):
        for path in sorted(root.rglob("*")):
            if path.is_file() and not path.is_symlink():
                files[f"{kind}/{path.relative_to(root).as_posix()}"] = path
    return files


def tensorboard_files(folders: Folders) -> bool:
    """Whether the TensorBoard folder holds a file (then a completed trial saves once more)."""
    return any(path.is_file() for path in folders.tensorboard.rglob("*"))


def local_target(folders: Folders, name: str) -> Path | None:
    """Where a stored file goes on this node; None for ``metadata.json`` and names outside the folders."""
    rel = PurePosixPath(name)
    if rel.is_absolute() or ".." in rel.parts or "\\" in name or len(rel.parts) < 2:
        return None
    roots = {
        adaptdl.CHECKPOINT_DIR: folders.checkpoint,
        adaptdl.SHARE_DIR: folders.share,
        adaptdl.TENSORBOARD_DIR: folders.tensorboard,
    }
    root = roots.get(rel.parts[0])
    return None if root is None else root.joinpath(*rel.parts[1:])


class CheckpointSync:
    """The two transfers, over the compute side's HTTP session with the run token."""

    def __init__(self, session: Session, trial_id: str) -> None:
        self._session = session
        self._trial = urllib.parse.quote(trial_id, safe="")
        #: The checkpoint this node's files last came from or went to, and each file's (size, mtime_ns)
        #: then: what a save may copy from it instead of uploading.
        self._source: str | None = None
        self._stored: dict[str, tuple[int, int]] = {}

    def restore(self, storage_id: str, folders: Folders) -> int | None:
        """Download AdaptDL checkpoint ``storage_id`` into ``folders``; its N, or None (and nothing
        downloaded) when it is not an AdaptDL checkpoint."""
        try:
            answer = self._session.call(
                "GET", f"/checkpoints/{urllib.parse.quote(storage_id, safe='')}/downloads"
            )
        except HttpCallError as e:
            raise SyncError(f"cannot restore the AdaptDL folders from checkpoint {storage_id}: {e}") from e
        found = answer.get("checkpoint")
        checkpoint: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        metadata = checkpoint.get("metadata")
        n = adaptdl.restarts_of(metadata) if isinstance(metadata, Mapping) else None
        if n is None:
            _say(f"checkpoint {storage_id} is not an AdaptDL one; the replicas start without a checkpoint")
            return None
        urls = answer.get("urls")
        if not isinstance(urls, Mapping) or METADATA_FILE not in urls:
            raise SyncError(f"checkpoint {storage_id} has no {METADATA_FILE}, so it was never completed.")
        resources = checkpoint.get("resources")
        sizes: Mapping[str, Any] = resources if isinstance(resources, Mapping) else {}
        fetched = 0
        stored: dict[str, tuple[int, int]] = {}
        for name, url in sorted(urls.items()):
            target = local_target(folders, str(name))
            if target is None:
                continue
            if not _already_there(target, sizes.get(name), folders):
                target.parent.mkdir(parents=True, exist_ok=True)
                try:
                    self._session.download(str(url), target)
                except HttpCallError as e:
                    raise SyncError(f"cannot download {name} of checkpoint {storage_id}: {e}") from e
                fetched += 1
            stored[str(name)] = _state(target)
        self._source, self._stored = storage_id, stored
        _say(f"restored checkpoint-{n} from checkpoint {storage_id} ({fetched} files downloaded)")
        return n

    def save(self, folders: Folders, n: int) -> str:
        """Store ``checkpoint-n`` and the share folder as a new checkpoint, marker last; its storage id."""
        files = checkpoint_files(folders, n)
        if len(files) + 1 > MAX_FILES:
            raise SyncError(
                f"checkpoint-{n} and the share folder hold {len(files)} files, more than the {MAX_FILES - 1} a "
                f"checkpoint may have; keep fewer, larger files in {folders.share}."
            )
        storage_id = str(uuid.uuid4())
        metadata = adaptdl.checkpoint_metadata(n)
        states = {name: _state(path) for name, path in files.items()}
        copy_from = self._copy_from(states)
        base = f"/trials/{self._trial}/checkpoints"
        with tempfile.TemporaryDirectory(prefix="stratus-adaptdl-") as tmp:
            marker = Path(tmp) / METADATA_FILE
            marker.write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n")
            resources = {name: state[0] for name, state in states.items()}
            resources[METADATA_FILE] = marker.stat().st_size
            try:
                answer, copy_from = self._ask_uploads(base, storage_id, files, copy_from)
                uploaded = [name for name in files if name not in copy_from]
                names = [*uploaded, METADATA_FILE]
                urls = _upload_urls(answer, names)
                for name in uploaded:
                    self._session.put_file(urls[name], files[name])
                self._session.put_file(urls[METADATA_FILE], marker)  # last: it marks completion
                body: dict[str, Any] = {
                    "uuid": storage_id,
                    "steps_completed": n,
                    "resources": resources,
                    "metadata": metadata,
                }
                self._session.call("POST", base, body)
            except HttpCallError as e:
                raise SyncError(f"checkpoint-{n} could not be stored as checkpoint {storage_id}: {e}") from e
        also = f", {len(copy_from)} unchanged copied from checkpoint {self._source}" if copy_from else ""
        self._source, self._stored = storage_id, states
        _say(f"stored checkpoint-{n} as checkpoint {storage_id} ({len(names)} files uploaded{also})")
        return storage_id

    def _copy_from(self, states: Mapping[str, tuple[int, int]]) -> dict[str, str]:
        """What a save copies from the last checkpoint (name -> its uuid): the files of `COPY_MIN_BYTES` or
        more as they were then, the `MAX_COPIES` largest."""
        if self._source is None:
            return {}
        unchanged = [
            name
            for name, state in states.items()
            if state[0] >= COPY_MIN_BYTES and self._stored.get(name) == state
        ]
        largest = sorted(unchanged, key=lambda name: -states[name][0])[:MAX_COPIES]
        return dict.fromkeys(sorted(largest), self._source)

    def _ask_uploads(
        self, base: str, storage_id: str, files: Mapping[str, Path], copy_from: dict[str, str]
    ) -> tuple[Mapping[str, Any], dict[str, str]]:
        """The upload URLs of the files not in ``copy_from``, which the control plane copies; where it
        cannot (that checkpoint is gone: a 404), the URLs of every file. The answer and what was copied."""
        if copy_from:
            uploads = [name for name in files if name not in copy_from]
            body = {"uuid": storage_id, "files": [*uploads, METADATA_FILE], "copy_from": copy_from}
            try:
                return self._session.call("POST", f"{base}/uploads", body), copy_from
            except HttpCallError as e:
                if e.status != 404:
                    raise
                _say(f"cannot copy from checkpoint {self._source} ({e}); uploading every file")
        body = {"uuid": storage_id, "files": [*files, METADATA_FILE]}
        return self._session.call("POST", f"{base}/uploads", body), {}


def prune_older(folder: Path, keep: int) -> None:
    """Remove the ``checkpoint-N`` folders below ``keep`` (AdaptDL does the same after its own save)."""
    for path in folder.glob("checkpoint-*"):
        m = _CHECKPOINT.fullmatch(path.name)
        if m and int(m[1]) < keep and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)


def _state(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns


def _already_there(target: Path, size: Any, folders: Folders) -> bool:
    if not target.is_file():
        return False
    if folders.checkpoint in target.parents:
        return True  # this node already holds that checkpoint-N (a run on the same host)
    return isinstance(size, int) and target.stat().st_size == size


def _upload_urls(answer: Mapping[str, Any], names: list[str]) -> dict[str, str]:
    urls = answer.get("urls")
    if not isinstance(urls, Mapping) or any(n not in urls for n in names):
        raise SyncError(f"the control plane gave no upload URL for some of {names[:3]}…")
    return {str(k): str(v) for k, v in urls.items()}


def _say(message: str) -> None:
    print(f"[launcher] adaptdl: {message}", file=sys.stderr, flush=True)
