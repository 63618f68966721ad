"""S3-triggered submissions, the pure part: the keys of a submission folder, the S3 notifications that
announce one, who submitted it, the digest that makes it idempotent, and the status document written back.

A submission is a folder of the stack's bucket (docs/contracts.md §3)::

    submissions/<name>/config.yaml        the experiment config (Determined or NNI format)
    submissions/<name>/context.tar.zst    the context as `det` packs it, or else
    submissions/<name>/<any/other/file>   the context's files, packed by the control plane
    submissions/<name>/submit             the marker, written LAST: its creation starts the submission
    submissions/<name>/status.json        written back by the control plane (`created` / `refused`)

Why a `submit` marker and not "the config written last": a plain-file context is many objects, and
S3 has no notion of "the upload is done"; only an object the uploader writes after every other one
tells. With the marker, the order of config and context does not matter, an upload tool that writes
files in parallel (`aws s3 sync`) is fine, and the bucket's notification needs one filter (prefix
`submissions/`, suffix `/submit`), so writing status.json (or any other file) never triggers anything.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_plus

from chalicelib.errors import BadRequestError
from stratus.contract.errors import InvalidMessageError

PREFIX = "submissions/"
MARKER = "submit"
CONFIG = "config.yaml"
CONTEXT_ARCHIVE = "context.tar.zst"
STATUS = "status.json"
#: Files of the folder that are never part of a plain-file context.
RESERVED = frozenset({MARKER, CONFIG, CONTEXT_ARCHIVE, STATUS})
#: The notification filter of the bucket (`infra/aws/template_submissions.py`, the local stack too).
FILTER_PREFIX = PREFIX
FILTER_SUFFIX = "/" + MARKER
MAX_NAME = 128
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
#: The owner of a submission whose notification names no uploader (moto's carry none).
UNKNOWN_UPLOADER = "user"


class SubmissionNameError(BadRequestError):
    """A marker key whose folder is not a valid submission name (the message says what to fix)."""


@dataclass(frozen=True)
class MarkerUpload:
    """One `submit` marker written: in which bucket, under which key (decoded), by whom (the
    notification's `userIdentity.principalId`; None when it names none)."""

    bucket: str
    key: str
    principal_id: str | None = None


@dataclass(frozen=True)
class Notification:
    """What one queue message of the bucket announces: marker uploads (none for `s3:TestEvent`)."""

    uploads: tuple[MarkerUpload, ...] = ()


def folder(name: str) -> str:
    return f"{PREFIX}{name}/"


def status_key(name: str) -> str:
    return folder(name) + STATUS


def check_name(name: str) -> str:
    """`name` when it is a valid submission name; SubmissionNameError naming the fix otherwise."""
    if not name:
        raise SubmissionNameError("the submission's folder name is empty; upload to submissions/<name>/")
    if name in (".", "..") or ".." in name:
        raise SubmissionNameError(f"submission name {name!r} may not hold '..'; rename the folder")
    if "/" in name:
        raise SubmissionNameError(
            f"submission name {name!r} has a '/': a submission is one folder right under submissions/ "
            "(submissions/<name>/submit); move it up"
        )
    if len(name) > MAX_NAME or not _NAME.match(name):
        raise SubmissionNameError(
            f"submission name {name!r} must be 1 to {MAX_NAME} letters, digits, '.', '_' or '-', "
            "starting with a letter or digit; rename the folder"
        )
    return name


def name_of_marker(key: str) -> str:
    """The submission a marker key belongs to (`submissions/<name>/submit`), or SubmissionNameError."""
    if not key.startswith(PREFIX) or not key.endswith(FILTER_SUFFIX):
        raise SubmissionNameError(
            f"key {key!r} is not a submission marker; write submissions/<name>/{MARKER} last"
        )
    return check_name(key[len(PREFIX) : -len(FILTER_SUFFIX)])


def status_key_beside(key: str) -> str | None:
    """Where to answer a marker whose name is refused: its own folder, unless that folder's key holds
    a '.'/'..'/empty segment (nothing is written through such a key: the refusal is only logged)."""
    parent = key.rsplit("/", 1)[0]
    segments = parent.split("/")
    if not key.startswith(PREFIX) or any(s in ("", ".", "..") for s in segments):
        return None
    return parent + "/" + STATUS


def parse_notification(body: str) -> Notification:
    """The marker uploads an S3 event notification announces (`s3:TestEvent`: none; events other than
    object creation: skipped). InvalidMessageError when the body is not an S3 notification at all."""
    try:
        message = json.loads(body)
    except ValueError as e:
        raise InvalidMessageError(f"an S3 notification is not JSON ({e}): {body[:80]!r}") from e
    if not isinstance(message, dict):
        raise InvalidMessageError(f"an S3 notification is a JSON object, not {type(message).__name__}")
    if message.get("Event") == "s3:TestEvent":
        return Notification()
    records = message.get("Records")
    if not isinstance(records, list):
        raise InvalidMessageError(
            f"an S3 notification has 'Records' (or is an s3:TestEvent); got keys {sorted(message)[:8]}"
        )
    return Notification(tuple(_uploads(records)))


def _uploads(records: Sequence[Any]) -> Iterable[MarkerUpload]:
    for record in records:
        if not isinstance(record, dict):
            raise InvalidMessageError(f"an S3 notification record is an object, not {type(record).__name__}")
        if not str(record.get("eventName", "")).startswith("ObjectCreated:"):
            continue
        s3: Any = record.get("s3")
        try:
            bucket = s3["bucket"]["name"]
            key = s3["object"]["key"]
        except (TypeError, KeyError) as e:
            raise InvalidMessageError(
                f"an S3 notification record has no s3.bucket.name or s3.object.key ({e})"
            ) from e
        if not isinstance(bucket, str) or not isinstance(key, str):
            raise InvalidMessageError("an S3 notification record's bucket name and object key are strings")
        identity = record.get("userIdentity")
        principal = identity.get("principalId") if isinstance(identity, dict) else None
        # S3 sends keys URL-encoded as in a form (a space is '+').
        yield MarkerUpload(bucket, unquote_plus(key), str(principal) if principal else None)


def owner_from_principal(principal_id: str | None) -> str:
    """The owner recorded for an uploader. S3 names the uploader by its IAM principal id, not its ARN:
    `AWS:AROA…:alice@example.com` (an assumed role's session) gives the session name `alice@example.com`,
    as `chalicelib.api.auth.owner_from_arn` does for the API; `AWS:AIDA…` (an IAM user) gives that
    unique id (S3 does not send the user's name); anything else is kept as it is; none gives "user"."""
    if not principal_id:
        return UNKNOWN_UPLOADER
    parts = principal_id.split(":")
    if parts[0] == "AWS" and len(parts) >= 3 and parts[2]:
        return ":".join(parts[2:])[:64]
    if parts[0] == "AWS" and len(parts) == 2 and parts[1]:
        return parts[1][:64]
    return principal_id[:64]


def submission_digest(name: str, config_text: bytes, context_sha256: str) -> str:
    """What identifies a submission: its name, its config's bytes and its context's content address.
    The same folder uploaded again (or announced twice) has the same digest, hence one experiment; the
    same files under another name are another submission."""
    digest = hashlib.sha256()
    for part in (name.encode(), hashlib.sha256(config_text).hexdigest().encode(), context_sha256.encode()):
        digest.update(len(part).to_bytes(8, "big") + part)
    return digest.hexdigest()


def submission_claim(digest: str) -> str:
    """The id claim (`Ids.claim`, a conditional write in the counters table) binding a submission to its
    experiment id."""
    return f"submission:{digest}"


@dataclass(frozen=True)
class Problem:
    """What is wrong with a submission, where: a config path (`searcher.metric`), or a file of the folder."""

    path: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


def created_status(name: str, experiment_id: int, warnings: Sequence[str]) -> bytes:
    return _document(
        {"submission": name, "status": "created", "experiment_id": experiment_id, "warnings": list(warnings)}
    )


def refused_status(name: str, problems: Sequence[Problem]) -> bytes:
    return _document({"submission": name, "status": "refused", "problems": [p.to_dict() for p in problems]})


def _document(body: Mapping[str, Any]) -> bytes:
    # No timestamp: the same submission answered twice writes the same bytes (an idempotent rewrite).
    return (json.dumps(body, indent=2, sort_keys=True) + "\n").encode()
