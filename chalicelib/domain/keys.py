"""Names and keys shared by every part of the control plane: S3 keys, run ids, execution names, the
keys of metric reports.

The S3 layout is a contract with the CLI and the harness (docs/contracts.md §3).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from stratus.contract.metric_groups import BUILT_IN_GROUPS

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_RUN_ID = re.compile(r"^(\d+)\.(\d+)$")


def is_sha256(value: str) -> bool:
    return bool(_SHA256.match(value))


def is_uuid(value: str) -> bool:
    return bool(_UUID.match(value))


def context_key(sha256: str) -> str:
    """Where a context lives under its content address, once the API has checked its bytes hash to it."""
    if not is_sha256(sha256):
        raise ValueError(f"context sha256 must be 64 lowercase hex digits, got {sha256!r}")
    return f"contexts/{sha256}.tar.zst"


def context_upload_prefix(sha256: str) -> str:
    """Where uploads that claim to be context `sha256` wait until the API has hashed them."""
    if not is_sha256(sha256):
        raise ValueError(f"context sha256 must be 64 lowercase hex digits, got {sha256!r}")
    return f"uploads/contexts/{sha256}/"


def checkpoint_prefix(experiment_id: int, trial_id: int, uuid: str) -> str:
    if not is_uuid(uuid):
        raise ValueError(f"checkpoint uuid must be a lowercase UUID, got {uuid!r}")
    return f"checkpoints/{experiment_id}/{trial_id}/{uuid}/"


def trial_checkpoints_prefix(experiment_id: int, trial_id: int) -> str:
    """Where every checkpoint of one trial lies (`det experiment delete` removes it whole)."""
    return f"checkpoints/{experiment_id}/{trial_id}/"


def experiment_checkpoints_prefix(experiment_id: int) -> str:
    """Where every checkpoint of one experiment lies, reported or not."""
    return f"checkpoints/{experiment_id}/"


def trial_request_claim(experiment_id: int, request_id: str) -> str:
    """The id claim binding a searcher's trial request to its trial id (`Ids.claim`)."""
    return f"trial-request:{experiment_id}:{request_id}"


def checkpoint_object_key(experiment_id: int, trial_id: int, uuid: str, relative_path: str) -> str:
    """The key of one checkpoint file; refuses paths that would leave the checkpoint's prefix."""
    parts = relative_path.split("/")
    if (
        not relative_path
        or relative_path.startswith("/")
        or any(p in ("", ".", "..") for p in parts)
        or "\\" in relative_path
    ):
        raise ValueError(
            f"checkpoint file path {relative_path!r} must be relative with no '..' or empty parts"
        )
    return checkpoint_prefix(experiment_id, trial_id, uuid) + relative_path


def run_id(trial_id: int, attempt: int) -> str:
    return f"{trial_id}.{attempt}"


def parse_run_id(value: str) -> tuple[int, int]:
    match = _RUN_ID.match(value)
    if not match:
        raise ValueError(f"run id must look like '<trial>.<attempt>', got {value!r}")
    return int(match.group(1)), int(match.group(2))


def node_id(run_id: str, node_rank: int) -> str:
    """The record of one node of a multi-node run (its agent reports under this id)."""
    return f"{run_id}-node{node_rank}"


def execution_name(trial_id: int, generation: int) -> str:
    """One Step Functions execution per trial run; starting the same name twice is a no-op in AWS."""
    return f"trial-{trial_id}-{generation}"


def log_stream(trial_id: int) -> str:
    return f"trial-{trial_id}"


def metric_group_prefix(group: str) -> str:
    """What the key of every report of `group` begins with, within its trial, and no other group's.

    The built-in groups keep `<group>#` (their keys since the start); a custom group's name may hold any
    character (`#`, `%`, `/`, spaces) at any length, so its prefix is `custom#<sha256 of the name>#`:
    fixed length, and never the prefix of another group's keys.
    """
    if group in BUILT_IN_GROUPS:
        return f"{group}#"
    return f"custom#{hashlib.sha256(group.encode('utf-8')).hexdigest()}#"


def metric_report_key(group: str, steps_completed: int) -> str:
    """The key of one metric report within its trial (one report per group and steps completed); the
    zero-padded steps sort a group's reports in order."""
    return f"{metric_group_prefix(group)}{steps_completed:012d}"


def ordered_metric_groups(groups: Iterable[str]) -> list[str]:
    """Metric groups as they are listed: the built-in ones first (training, validation), then by name."""
    unique = set(groups)
    return [g for g in BUILT_IN_GROUPS if g in unique] + sorted(unique - set(BUILT_IN_GROUPS))
