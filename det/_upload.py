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
from det._render import format_bytes
from det._runtime import PackedContext, Runtime
from det.errors import ApiError


def pack_and_upload(args: argparse.Namespace, rt: Runtime, client: ApiClient) -> str | None:
    """Pack the CONTEXT folder (if any) and upload it unless S3 has it; its SHA-256, or None."""
    if args.model_def is None:
        return None
    packed = rt.pack(args.model_def, list(args.include))
    rt.note(
        f"Preparing files to send to master... {format_bytes(packed.file_bytes)} and {packed.num_files} files"
    )
    upload_context(rt, client, packed)
    return str(packed.sha256)


def upload_context(rt: Runtime, client: ApiClient, packed: PackedContext) -> None:
    size = len(packed.data)
    short = packed.sha256[:12]
    answer = client.request_context_upload(packed.sha256, size)
    if answer.get("exists"):
        rt.note(f"context already uploaded (sha256 {short}…), skipping upload")
        return
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
        client.upload(upload, packed.data, on_chunk=lambda n: progress.advance(task, n))
    if not tty:
        rt.note(f"Uploaded context ({format_bytes(size)}, sha256 {short}…)")
