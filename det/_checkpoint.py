"""`det checkpoint list | download | describe` and `det experiment list-checkpoints` (Determined's verbs).

A download goes straight to S3 through presigned GET URLs the API signs (`GET /checkpoints/{uuid}/files`):
the CLI holds no AWS credentials, and API Gateway caps bodies at 10 MB. Every file name the API lists
is checked before anything is written: a name that would leave the output folder (absolute, `..`, a
backslash) is refused, whoever sent it. Each file is written beside its place and renamed into it once
whole, so an interrupted download leaves no truncated file under its real name.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import httpx

from det._client import ApiClient
from det._client_uploads import UPLOAD_TIMEOUT
from det._commands import Subcommands, needs_subcommand
from det._render import Cell, field, format_bytes, format_json, plural, records_table, time_field
from det._runtime import Runtime
from det.errors import ApiError, ConnectionFailedError, UsageError

Json = dict[str, Any]

DOWNLOAD_CHUNK = 256 * 1024


def _resources(checkpoint: Mapping[str, Any]) -> str:
    return "\n".join(sorted(checkpoint.get("resources") or {}))


def _size(checkpoint: Mapping[str, Any]) -> str:
    return format_bytes(sum(int(v) for v in (checkpoint.get("resources") or {}).values()))


# Determined's columns for an experiment's checkpoints.
_LIST_CELLS: dict[str, Cell] = {
    "Trial ID": field("trial_id"),
    "# of Batches": field("steps_completed"),
    "State": field("state"),
    "Validation Metric": field("searcher_metric_value"),
    "UUID": field("uuid"),
    "Resources": _resources,
    "Size": _size,
}
_DESCRIBE_CELLS: dict[str, Cell] = {
    "Experiment ID": field("experiment_id"),
    "Trial ID": field("trial_id"),
    "Steps Completed": field("steps_completed"),
    "State": field("state"),
    "Report Time": time_field("report_time"),
    "Checkpoint UUID": field("uuid"),
    "Size": _size,
    "Metadata": lambda c: format_json(c.get("metadata") or {}),
}


def add_parsers(commands: Subcommands) -> None:
    checkpoint = commands.add_parser("checkpoint", aliases=["c"], help="manage checkpoints")
    sub = checkpoint.add_subparsers(title="checkpoint commands", metavar="COMMAND")
    checkpoint.set_defaults(command=needs_subcommand(checkpoint))

    listing = sub.add_parser("list", aliases=["ls"], help="list the checkpoints of an experiment")
    add_list_arguments(listing)

    download_cmd = sub.add_parser("download", help="download a checkpoint's files")
    download_cmd.add_argument("uuid", metavar="UUID", help="checkpoint uuid")
    download_cmd.add_argument(
        "-o",
        "--output-dir",
        type=Path,
        metavar="DIR",
        help="where to put the files (default: checkpoints/UUID)",
    )
    download_cmd.add_argument(
        "-q", "--quiet", action="store_true", help="print only the checkpoint's local path, no progress"
    )
    download_cmd.set_defaults(command=download)

    delete_cmd = sub.add_parser(
        "delete", aliases=["rm"], help="delete checkpoints' files (keeps their records)"
    )
    delete_cmd.add_argument("uuids", metavar="UUID[,UUID...]", help="checkpoint uuids, comma-separated")
    delete_cmd.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    delete_cmd.set_defaults(command=delete)

    describe_cmd = sub.add_parser("describe", help="describe a checkpoint")
    describe_cmd.add_argument("uuid", metavar="UUID", help="checkpoint uuid")
    describe_cmd.add_argument("--json", action="store_true", help="print the API's JSON")
    describe_cmd.set_defaults(command=describe)


def add_list_arguments(parser: argparse.ArgumentParser) -> None:
    """`ID [--best N] [--csv | --json]`, shared by `det checkpoint list` and `det experiment
    list-checkpoints`."""
    parser.add_argument("experiment_id", type=int, metavar="ID", help="experiment id")
    parser.add_argument(
        "--best",
        type=int,
        metavar="N",
        help="only the N best checkpoints by the searcher metric (those with a validation at their steps)",
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--csv", action="store_true", help="print as CSV")
    output.add_argument("--json", action="store_true", help="print the API's JSON")
    parser.set_defaults(command=list_checkpoints)


def list_checkpoints(args: argparse.Namespace, rt: Runtime) -> int:
    if args.best is not None and args.best < 1:
        raise UsageError(f"--best {args.best} must be 1 or more (the number of checkpoints to show)")
    with rt.client() as client:
        answer = client.list_checkpoints(args.experiment_id, args.best)
    if args.json:
        rt.say(json.dumps(answer, indent=4))
        return 0
    checkpoints = list(answer.get("checkpoints") or [])
    rt.say(records_table(_LIST_CELLS, list(_LIST_CELLS), checkpoints, as_csv=args.csv))
    return 0


def describe(args: argparse.Namespace, rt: Runtime) -> int:
    with rt.client() as client:
        answer = client.get_checkpoint(args.uuid)
    if args.json:
        rt.say(json.dumps(answer, indent=4))
        return 0
    rt.say(records_table(_DESCRIBE_CELLS, list(_DESCRIBE_CELLS), [answer["checkpoint"]]))
    return 0


def download(args: argparse.Namespace, rt: Runtime) -> int:
    target = Path(args.output_dir) if args.output_dir else Path("checkpoints") / args.uuid
    with rt.client() as client:
        download_into(rt, client, args.uuid, target, quiet=args.quiet)
    return 0


def download_into(rt: Runtime, client: ApiClient, uuid: str, target: Path, *, quiet: bool) -> None:
    """Write checkpoint `uuid`'s files under `target`, then print it as `det checkpoint download` does:
    its local path and its table (`quiet`: only the path, and no progress on stderr)."""
    answer = client.checkpoint_files(uuid)
    checkpoint: Json = answer["checkpoint"]
    places = {name: safe_place(target, name) for name in answer.get("urls") or {}}
    sizes = {str(k): int(v) for k, v in (checkpoint.get("resources") or {}).items()}
    if not quiet:
        total = format_bytes(sum(sizes.get(n, 0) for n in places))
        rt.note(f"Downloading checkpoint {uuid}: {plural(len(places), 'file')}, {total}, to {target}")
    for number, (name, place) in enumerate(sorted(places.items()), start=1):
        written = _fetch(rt, answer["urls"][name], place)
        if not quiet:
            rt.note(f"  [{number}/{len(places)}] {name} ({format_bytes(written)})")
    if quiet:
        rt.say(str(target))
        return
    rt.say(f"Local checkpoint path:\n{target}\n")
    rt.say(records_table(_DESCRIBE_CELLS, list(_DESCRIBE_CELLS), [checkpoint]))


_DELETE_WARNING = (
    "Deleting checkpoints will result in deletion of all data associated\n"
    "with each checkpoint in the checkpoint storage. Do you still want to proceed?"
)


def delete(args: argparse.Namespace, rt: Runtime) -> int:
    """Determined's lines; every uuid is checked before the question is asked (an unknown one is said
    at once, not after a `--yes` it did not need), and by the API again before any is deleted."""
    uuids = [u.strip() for u in args.uuids.split(",") if u.strip()]
    if not uuids:
        raise UsageError(f"{args.uuids!r} names no checkpoint; give UUID[,UUID...]")
    with rt.client() as client:
        for uuid in uuids:
            client.get_checkpoint(uuid)
    if not args.yes:
        if not rt.inp_is_tty():
            raise UsageError(
                "deleting checkpoints asks for confirmation, and there is no terminal; pass --yes"
            )
        if not rt.confirm(_DELETE_WARNING):
            rt.say("Stopping deletion of checkpoints.")
            return 0
    with rt.client() as client:
        answer = client.delete_checkpoints(uuids)
    rt.say(f"Deleted checkpoints {','.join(answer.get('deleted') or []) or '(none)'}")
    if gone := answer.get("already_deleted"):
        rt.say(f"Already deleted: {','.join(gone)}")
    return 0


def safe_place(root: Path, name: str) -> Path:
    """Where the checkpoint file `name` goes below `root`; ApiError for a name that would leave it."""
    parts = PurePosixPath(name).parts
    if (
        not name
        or "\\" in name
        or "\0" in name
        or name.startswith("/")
        or any(p in ("", ".", "..") for p in name.split("/"))
        or not parts
    ):
        raise ApiError(
            f"the API listed a checkpoint file named {name!r}, which would be written outside {root}; "
            "nothing was downloaded: check that DET_MASTER points at a Stratus API you trust",
            code="UnsafeFileName",
        )
    return root.joinpath(*parts)


def _fetch(rt: Runtime, url: str, place: Path) -> int:
    place.parent.mkdir(parents=True, exist_ok=True)
    partial = place.with_name(place.name + ".part")
    written = 0
    try:
        written = _stream_into(rt, url, place, partial)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, place)
    return written


def _stream_into(rt: Runtime, url: str, place: Path, partial: Path) -> int:
    written = 0
    # A client of its own: the URL points at S3, not at the API, and must carry none of its headers.
    with httpx.Client(transport=rt.transport, timeout=UPLOAD_TIMEOUT) as s3, partial.open("wb") as out:
        try:
            with s3.stream("GET", url) as response:
                if response.status_code >= 300:
                    raise ApiError(
                        f"downloading {place.name} failed with HTTP {response.status_code}; retry, or "
                        "check the storage configuration of the stack",
                        status=response.status_code,
                        code="DownloadFailed",
                    )
                for chunk in response.iter_bytes(DOWNLOAD_CHUNK):
                    out.write(chunk)
                    written += len(chunk)
        except httpx.TransportError as e:
            raise ConnectionFailedError(
                f"cannot download {place.name}: {e or type(e).__name__}; check your network and retry"
            ) from e
    return written
