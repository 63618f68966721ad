"""Contexts by content address, trusted only once the API has hashed them.

A context is stored under its SHA-256 (`contexts/<sha256>.tar.zst`) so that an unchanged folder is never
uploaded twice. The name is a claim: anyone who can upload could otherwise put other bytes under the
hash of someone else's folder, whose next `det experiment create` would skip its upload and run them.
So no client ever writes a content address:

1. `POST /contexts` offers a presigned PUT to a staging key of its own (`uploads/contexts/<sha256>/<n>`)
   whose signature binds the claimed SHA-256 (S3 refuses other bytes with BadDigest; moto does not check,
   which step 2 covers);
2. `POST /experiments` (`verified`) hashes the staged bytes itself: a match is copied to the content
   address, a mismatch is deleted and refused. Only then can a trial get the context.

`POST /contexts` answers "already uploaded" only for a context at its content address, which only step 2
writes.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass

from chalicelib.domain import keys
from chalicelib.errors import BadRequestError
from chalicelib.services.ports import Ports

log = logging.getLogger(__name__)

#: What `det` ships at most (det/_context.py): a bigger upload is refused before any byte moves.
MAX_CONTEXT_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True)
class UploadOffer:
    key: str
    exists: bool
    url: str | None = None
    headers: dict[str, str] | None = None


def offer_upload(ports: Ports, sha256: str, size: int) -> UploadOffer:
    """Where to upload context `sha256` of `size` bytes, or that it is stored (and verified) already."""
    key = keys.context_key(sha256)
    if ports.blobs.exists(key):
        return UploadOffer(key=key, exists=True)
    if size > MAX_CONTEXT_BYTES:
        raise BadRequestError(
            f"size: a context of {size:,} bytes is over the limit of {MAX_CONTEXT_BYTES:,}; "
            "leave data and outputs out of the folder with a .detignore"
        )
    staged = keys.context_upload_prefix(sha256) + secrets.token_hex(8)
    url, headers = ports.blobs.presign_put_checked(staged, sha256)
    return UploadOffer(key=key, exists=False, url=url, headers=headers)


def verified(ports: Ports, sha256: str) -> None:
    """Make sure context `sha256` is at its content address with bytes that hash to it: promote an
    upload that does, delete every upload that does not. Raises a 400 when none does."""
    key = keys.context_key(sha256)
    if ports.blobs.exists(key):
        return
    refused = 0
    prefix = keys.context_upload_prefix(sha256)
    for staged in ports.blobs.keys_under(prefix):
        found = ports.blobs.sha256_of(staged)
        if found is None:
            continue
        digest, size = found
        if digest == sha256 and size <= MAX_CONTEXT_BYTES:
            ports.blobs.copy(staged, key)
            ports.blobs.delete_prefix(prefix)  # this one and any other upload claiming the name
            return
        ports.blobs.delete(staged)
        refused += 1
        log.warning(
            "refused an upload under context %s: its bytes hash to %s (%d bytes)", sha256, digest, size
        )
    if refused:
        raise BadRequestError(
            f"context_sha256: the upload for context {sha256[:12]}… does not hash to that name, so it was "
            "refused and deleted; pack and upload the folder again (`det experiment create` does both)"
        )
    raise BadRequestError(
        f"context_sha256: context {sha256[:12]}… is not in S3; upload it through the URL POST /contexts "
        "returns, then retry"
    )
