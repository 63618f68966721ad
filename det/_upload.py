"""The context of `det experiment create` (with or without ``--test-mode``): packed, and uploaded straight
to S3 through a presigned URL (API Gateway caps bodies at 10 MB), skipped altogether when an archive with
the same sha256 is already there."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from det._client import ApiClient
from det._render import format_bytes, plural
from det._runtime import PackedContext, Runtime
from det._signals import step
from det.errors import ApiError

#: What an interrupted pack or upload leaves: nothing (the partial archive is removed; an upload that
#: did not finish is no object in S3).
NOTHING_CREATED = "nothing was created, and no temporary file is left: run the command again"


def pack_and_upload(args: argparse.Namespace, rt: Runtime, client: ApiClient) -> str | None:
    """Pack the CONTEXT folder (if any) and upload it unless S3 has it; its SHA-256, or None. An
    unchanged folder is not packed again to learn its hash (the manifest cache, `det._context`)."""
    if args.model_def is None:
        return None
    includes = list(args.include)
    packing = f"packing the context {args.model_def}"
    with step(packing, NOTHING_CREATED):
        packed = rt.pack(args.model_def, includes, rt.context_cache())
    try:
        rt.note(
            f"Preparing files to send to master... {format_bytes(packed.file_bytes)} and "
            f"{plural(packed.num_files, 'file')}"
        )
        with step(f"uploading the context {args.model_def}", NOTHING_CREATED):
            if upload_context(rt, client, packed):
                return str(packed.sha256)
    finally:
        packed.discard()
    # The folder is as it was when its hash was cached, but the store lost that archive: pack it now.
    with step(packing, NOTHING_CREATED):
        repacked = rt.pack(args.model_def, includes, None)
    try:
        with step(f"uploading the context {args.model_def}", NOTHING_CREATED):
            upload_context(rt, client, repacked)
        return str(repacked.sha256)
    finally:
        repacked.discard()


def upload_context(rt: Runtime, client: ApiClient, packed: PackedContext) -> bool:
    """Upload the archive unless the store has it; False when it must be uploaded but was not packed
    (the manifest cache answered its hash)."""
    size = packed.size
    short = packed.sha256[:12]
    answer = client.request_context_upload(packed.sha256, size)
    if answer.get("exists"):
        unchanged = " (unchanged since it was packed, not packed again)" if packed.reused else ""
        rt.note(f"context already uploaded (sha256 {short}…){unchanged}, skipping upload")
        return True
    if packed.reused:
        return False
    upload = answer.get("upload")
    if not upload:
        raise ApiError(
            f"the API has no copy of context {short}… and offered no upload URL; "
            "check that the CLI and the API versions match",
            code="NoUploadUrl",
        )
    tty = rt.err_is_tty()
    columns = (
        TextColumn("Uploading context"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(file=rt.err), disable=not tty) as progress:
        task = progress.add_task("upload", total=size)
        client.upload(upload, packed.pieces(), size, on_chunk=lambda n: progress.advance(task, n))
    if not tty:
        rt.note(f"Uploaded context ({format_bytes(size)}, sha256 {short}…)")
    return True
