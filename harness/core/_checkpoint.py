"""Storing and restoring checkpoints (Determined's `core.CheckpointContext`).

On the platform a checkpoint is written to a temporary folder, then uploaded through presigned S3
URLs with `metadata.json` last (a checkpoint without it does not exist, contracts.md §3), then
reported with `POST /trials/{id}/checkpoints` through the report sender, after the metrics reported
before it, and flushed: `store_path` returns once the checkpoint is registered. If the `store_path` block raises, nothing is uploaded
or reported. Only the chief stores checkpoints; on other ranks `store_path` yields a scratch folder
that is thrown away and an empty storage id. Every rank may restore.
"""

from __future__ import annotations

import abc
import contextlib
import json
import logging
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import Any

from stratus.harness._api import ApiClient
from stratus.harness.core._distributed import DistributedContext
from stratus.harness.core._events import LocalEvents
from stratus.harness.core._reports import ReportSender
from stratus.harness.errors import CheckpointError, HarnessError

log = logging.getLogger("stratus.harness.checkpoint")

METADATA_FILE = "metadata.json"
TRANSFER_THREADS = 8


class CheckpointContext(abc.ABC):
    """Stores checkpoints as folders of files, named by a storage id (a uuid)."""

    def __init__(self, distributed: DistributedContext) -> None:
        self._dist = distributed

    @contextlib.contextmanager
    def store_path(
        self, metadata: Mapping[str, Any] | None = None, *, shard: bool = False
    ) -> Iterator[tuple[Path, str]]:
        """Yield `(path, storage_id)`: write the checkpoint's files into `path`.

        `metadata` must carry `steps_completed` (the batches trained so far); it is saved as
        `metadata.json` next to the files. The checkpoint is stored when the block exits normally;
        if the block raises, nothing is stored. `shard=True` (every rank writes part of one
        checkpoint) is accepted for a single process only.
        """
        meta = check_metadata(metadata)
        if shard and self._dist.size > 1:
            raise CheckpointError(
                "store_path(shard=True) across several ranks is not supported yet; gather the state on "
                "the chief and call store_path(shard=False) there."
            )
        if not self._dist.is_chief:
            with tempfile.TemporaryDirectory(prefix="stratus-ckpt-worker-") as scratch:
                yield Path(scratch), ""
            return
        storage_id = str(uuid.uuid4())
        path = self._start(storage_id)
        try:
            yield path, storage_id
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        self._finish(path, storage_id, meta)

    def upload(
        self, ckpt_dir: str | Path, metadata: Mapping[str, Any] | None = None, *, shard: bool = False
    ) -> str:
        """Store the files of the folder `ckpt_dir` as a checkpoint; returns its storage id
        (Determined's `upload`; "" on other ranks)."""
        source = Path(ckpt_dir)
        if not source.is_dir():
            raise CheckpointError(f"{source} is not a folder; pass the folder holding the checkpoint files.")
        with self.store_path(metadata, shard=shard) as (path, storage_id):
            shutil.copytree(source, path, dirs_exist_ok=True, ignore=shutil.ignore_patterns(METADATA_FILE))
        return storage_id

    def download(self, storage_id: str, ckpt_dir: str | Path) -> None:
        """Copy checkpoint `storage_id` into the folder `ckpt_dir` (Determined's `download`)."""
        target = Path(ckpt_dir)
        with self.restore_path(storage_id) as path:
            shutil.copytree(path, target, dirs_exist_ok=True)

    @abc.abstractmethod
    @contextlib.contextmanager
    def restore_path(self, storage_id: str) -> Iterator[Path]:
        """Yield a folder holding the files of checkpoint `storage_id` (read it inside the block)."""

    @abc.abstractmethod
    def get_metadata(self, storage_id: str) -> dict[str, Any]:
        """The metadata stored with checkpoint `storage_id` (what `metadata.json` holds)."""

    @abc.abstractmethod
    def _start(self, storage_id: str) -> Path:
        """An empty folder for the chief to write checkpoint `storage_id` into."""

    @abc.abstractmethod
    def _finish(self, path: Path, storage_id: str, metadata: dict[str, Any]) -> None:
        """Store the written folder; `path` is the one `_start` gave."""


class PlatformCheckpointContext(CheckpointContext):
    """Checkpoints in the platform's S3 bucket, through the trial-facing API."""

    def __init__(
        self, api: ApiClient, trial_id: int, distributed: DistributedContext, sender: ReportSender
    ) -> None:
        super().__init__(distributed)
        self._api = api
        self._trial_id = trial_id
        self._sender = sender

    def _start(self, storage_id: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=f"stratus-ckpt-{storage_id}-"))

    def _finish(self, path: Path, storage_id: str, metadata: dict[str, Any]) -> None:
        try:
            self._upload(path, storage_id, metadata)
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def _upload(self, path: Path, storage_id: str, metadata: dict[str, Any]) -> None:
        files = list_files(path)
        write_metadata(path, metadata)
        names = [*files, METADATA_FILE]
        resources = {name: (path / name).stat().st_size for name in names}
        try:
            answer = self._api.post(
                f"/trials/{self._trial_id}/checkpoints/uploads", {"uuid": storage_id, "files": names}
            )
            urls = _urls(answer, names, f"checkpoint {storage_id}")
            with ThreadPoolExecutor(TRANSFER_THREADS, thread_name_prefix="stratus-upload") as pool:
                list(pool.map(lambda name: self._api.put_file(urls[name], path / name), files))
            self._api.put_file(urls[METADATA_FILE], path / METADATA_FILE)  # last: it marks completion
            body = {
                "uuid": storage_id,
                "steps_completed": metadata["steps_completed"],
                "resources": resources,
                "metadata": metadata,
            }
            # Registered in its place among the reports, and delivered before training goes on.
            self._sender.call(f"/trials/{self._trial_id}/checkpoints", body, f"checkpoint {storage_id}")
            self._sender.flush()
        except HarnessError as e:
            raise CheckpointError(f"checkpoint {storage_id} could not be stored: {e}") from e
        log.info("stored checkpoint %s (%d files, %d bytes)", storage_id, len(names), sum(resources.values()))

    @contextlib.contextmanager
    def restore_path(self, storage_id: str) -> Iterator[Path]:
        check_storage_id(storage_id)
        urls = self._download_urls(storage_id)
        if METADATA_FILE not in urls:
            raise CheckpointError(
                f"checkpoint {storage_id} has no {METADATA_FILE}, so it was never completed."
            )
        with tempfile.TemporaryDirectory(prefix=f"stratus-restore-{storage_id}-") as tmp:
            root = Path(tmp)
            targets = {name: safe_join(root, name) for name in urls}
            for target in targets.values():
                target.parent.mkdir(parents=True, exist_ok=True)
            try:
                with ThreadPoolExecutor(TRANSFER_THREADS, thread_name_prefix="stratus-download") as pool:
                    list(pool.map(lambda name: self._api.download_file(urls[name], targets[name]), urls))
            except HarnessError as e:
                raise CheckpointError(f"checkpoint {storage_id} could not be downloaded: {e}") from e
            yield root

    def get_metadata(self, storage_id: str) -> dict[str, Any]:
        check_storage_id(storage_id)
        checkpoint = self._downloads(storage_id).get("checkpoint")
        metadata = checkpoint.get("metadata") if isinstance(checkpoint, Mapping) else None
        if not isinstance(metadata, Mapping):
            raise CheckpointError(f"the control plane gave no metadata for checkpoint {storage_id}.")
        return dict(metadata)

    def _downloads(self, storage_id: str) -> dict[str, Any]:
        try:
            return self._api.get(f"/checkpoints/{storage_id}/downloads")
        except HarnessError as e:
            raise CheckpointError(f"checkpoint {storage_id} cannot be restored: {e}") from e

    def _download_urls(self, storage_id: str) -> dict[str, str]:
        urls = self._downloads(storage_id).get("urls")
        if not isinstance(urls, Mapping):
            raise CheckpointError(f"the control plane gave no download URLs for checkpoint {storage_id}.")
        return {str(k): str(v) for k, v in urls.items()}


class LocalCheckpointContext(CheckpointContext):
    """Off the platform: checkpoints are folders `<checkpoint_dir>/<uuid>/` (default `./checkpoints`);
    each stored one is also appended to the `STRATUS_LOCAL_EVENTS` file when one is given."""

    def __init__(
        self, checkpoint_dir: Path, distributed: DistributedContext, *, events: LocalEvents | None = None
    ) -> None:
        super().__init__(distributed)
        self.checkpoint_dir = checkpoint_dir.absolute()
        self._events = events or LocalEvents(None)

    def _start(self, storage_id: str) -> Path:
        path = self.checkpoint_dir / storage_id
        path.mkdir(parents=True)
        return path

    def _finish(self, path: Path, storage_id: str, metadata: dict[str, Any]) -> None:
        try:
            list_files(path)  # refuses a user-written metadata.json
            write_metadata(path, metadata)  # last: it marks completion
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        self._events.emit(
            "checkpoint", metadata["steps_completed"], uuid=storage_id, path=str(path), metadata=metadata
        )

    @contextlib.contextmanager
    def restore_path(self, storage_id: str) -> Iterator[Path]:
        yield self._existing(storage_id)

    def get_metadata(self, storage_id: str) -> dict[str, Any]:
        return read_metadata(self._existing(storage_id))

    def _existing(self, storage_id: str) -> Path:
        check_storage_id(storage_id)
        path = self.checkpoint_dir / storage_id
        if not (path / METADATA_FILE).is_file():
            raise CheckpointError(
                f"no checkpoint {storage_id} under {self.checkpoint_dir} (no {METADATA_FILE}); "
                "pass init(checkpoint_dir=...) where it was stored."
            )
        return path


def check_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    meta = dict(metadata or {})
    steps = meta.get("steps_completed")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise CheckpointError(
            f"checkpoint metadata needs steps_completed (batches trained, an int >= 0), got {steps!r}; "
            'call store_path({"steps_completed": n, ...}).'
        )
    try:
        json.dumps(meta)
    except (TypeError, ValueError) as e:
        raise CheckpointError(
            f"checkpoint metadata is not JSON ({e}); keep it to numbers, strings, lists, dicts."
        ) from e
    return meta


def check_storage_id(storage_id: str) -> None:
    if not storage_id or storage_id in {".", ".."} or "/" in storage_id or "\\" in storage_id:
        raise CheckpointError(
            f"{storage_id!r} is not a checkpoint storage id; pass the uuid store_path gave."
        )


def list_files(path: Path) -> list[str]:
    """The checkpoint's files, as sorted POSIX paths relative to `path`."""
    files = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())
    if METADATA_FILE in files:
        raise CheckpointError(
            f"{METADATA_FILE} is written by the harness; pass your metadata to store_path(metadata) instead."
        )
    return files


def write_metadata(path: Path, metadata: dict[str, Any]) -> None:
    (path / METADATA_FILE).write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n")


def read_metadata(path: Path) -> dict[str, Any]:
    value = json.loads((path / METADATA_FILE).read_text())
    if not isinstance(value, dict):
        raise CheckpointError(f"{path / METADATA_FILE} does not hold a JSON object.")
    return value


def safe_join(root: Path, name: str) -> Path:
    """`root / name` for a relative POSIX path that stays inside `root`."""
    rel = PurePosixPath(name)
    if rel.is_absolute() or not rel.parts or ".." in rel.parts or "\\" in name:
        raise CheckpointError(f"checkpoint file name {name!r} escapes the checkpoint folder; refusing it.")
    return root.joinpath(*rel.parts)


def _urls(answer: Mapping[str, Any], names: list[str], what: str) -> dict[str, str]:
    urls = answer.get("urls")
    missing = [n for n in names if not isinstance(urls, Mapping) or n not in urls]
    if missing or not isinstance(urls, Mapping):
        raise CheckpointError(f"the control plane gave no upload URL for {missing[:3]} of {what}.")
    return {str(k): str(v) for k, v in urls.items()}
