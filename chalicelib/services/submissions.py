"""S3-triggered submissions: a folder `submissions/<name>/` completed by its `submit` marker becomes an
experiment through the same create path as `POST /experiments`, answered by `status.json` beside it
(the layout and why a marker: `chalicelib.domain.submissions`).

Auth is IAM on the bucket: whoever may put objects under `submissions/*` may submit; nothing else is
asked. The owner is the uploader of the marker, from the notification's `userIdentity.principalId`
(`submissions.owner_from_principal`: an assumed role's session name, else the principal id).

Idempotent: SQS delivers at least once and S3 may announce an upload twice. The folder is always read as
it is now, and the submission is identified by a digest of its name, its config's bytes and its context's
content address; `Ids.claim` (a conditional write in the counters table) binds that digest to one
experiment id. A duplicate notification, or the same folder uploaded again, finds the experiment of its
id already there and rewrites the same `status.json` bytes; two deliveries racing both get the same id,
and the experiment table's conditional create lets one of them through (the other raises, and its retry
finds the experiment). A folder uploaded again with other bytes is another submission.

Nothing is created for a submission with a problem: the config is validated (every problem with its
path, as the CLI prints them), the context checked or packed, before anything is written but status.json.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from chalicelib import config as cfg
from chalicelib.domain import keys
from chalicelib.domain import submissions as sub
from chalicelib.domain.states import ExperimentState
from chalicelib.errors import BadRequestError
from chalicelib.services import context_archives, contexts, experiments, searching
from chalicelib.services.ports import Ports
from chalicelib.services.submission_ports import SubmissionFiles
from stratus.contract.nni import is_nni_config

log = logging.getLogger(__name__)

#: The most bytes a config (or an NNI search-space file) may have.
MAX_CONFIG_BYTES = 1 << 20


@dataclass
class _Prepared:
    """A submission read and checked: its config, its context (not yet stored) and its problems."""

    config_text: bytes = b""
    raw: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    context: IO[bytes] | None = None  # packed plain files, to upload
    context_source: str | None = None  # or the submitted archive's key, to copy
    context_sha256: str | None = None
    problems: list[sub.Problem] = field(default_factory=list)


def handle(ports: Ports, files: SubmissionFiles, notification: sub.Notification) -> None:
    """Answer every marker upload the notification announces (an `s3:TestEvent` announces none)."""
    for upload in notification.uploads:
        if upload.bucket != ports.settings.bucket:
            log.warning(
                "ignoring a notification of bucket %s (this stack's is %s)",
                upload.bucket,
                ports.settings.bucket,
            )
            continue
        submit(ports, files, upload)


def submit(ports: Ports, files: SubmissionFiles, upload: sub.MarkerUpload) -> bytes | None:
    """Create the experiment of one marker's folder (once), write its status.json; returns that status."""
    try:
        name = sub.name_of_marker(upload.key)
    except sub.SubmissionNameError as e:
        log.error("refusing submission marker %r: %s", upload.key, e)
        beside = sub.status_key_beside(upload.key)
        if beside is None:
            return None
        status = sub.refused_status(upload.key.rsplit("/", 2)[-2], [sub.Problem("name", str(e))])
        files.put(beside, status, "application/json")
        return status
    listing = files.listing(sub.folder(name))
    if sub.MARKER not in listing:
        log.info("submission %s: its marker is gone (deleted since); nothing to do", name)
        return None
    prepared = _prepare(ports, files, name, listing)
    if prepared.problems:
        status = sub.refused_status(name, prepared.problems)
    else:
        status = _create_once(ports, files, name, prepared, sub.owner_from_principal(upload.principal_id))
    files.put(sub.status_key(name), status, "application/json")
    log.info("submission %s: %s", name, status.decode().replace("\n", " "))
    return status


def _create_once(ports: Ports, files: SubmissionFiles, name: str, prepared: _Prepared, owner: str) -> bytes:
    digest = sub.submission_digest(name, prepared.config_text, prepared.context_sha256 or "")
    experiment_id = ports.ids.claim(sub.submission_claim(digest), "experiment")
    existing = ports.experiments.get(experiment_id)
    if existing is not None and existing.state == ExperimentState.ACTIVE and not existing.searcher_started:
        searching.start(ports, existing)  # a delivery that stopped between the record and its searcher
    if existing is None:
        try:
            if prepared.context_sha256 is not None:
                _store_context(ports, files, prepared, prepared.context_sha256)
            experiments.create(
                ports, prepared.raw, prepared.context_sha256, owner=owner, experiment_id=experiment_id
            )
        except BadRequestError as e:  # the context changed under us, or the pool went: the user's to fix
            return sub.refused_status(name, _problems(e, "context" if "context" in str(e) else "config.yaml"))
    return sub.created_status(name, experiment_id, prepared.warnings)


def _store_context(ports: Ports, files: SubmissionFiles, prepared: _Prepared, sha256: str) -> None:
    """Put the context at its content address the way every context gets there: staged, then hashed by
    `contexts.verified` (so bytes changed since they were checked are refused, not trusted)."""
    if ports.blobs.exists(keys.context_key(sha256)):
        return
    staged = keys.context_upload_prefix(sha256) + secrets.token_hex(8)
    if prepared.context is not None:
        files.put(staged, prepared.context, "application/zstd")
    elif prepared.context_source is not None:
        ports.blobs.copy(prepared.context_source, staged)
    contexts.verified(ports, sha256)


def _prepare(ports: Ports, files: SubmissionFiles, name: str, listing: Mapping[str, int]) -> _Prepared:
    prepared = _Prepared()
    _read_config(ports, files, name, listing, prepared)
    _read_context(files, name, listing, prepared)
    return prepared


def _read_config(
    ports: Ports, files: SubmissionFiles, name: str, listing: Mapping[str, int], prepared: _Prepared
) -> None:
    text = _small_file(files, name, listing, sub.CONFIG, prepared)
    if text is None:
        return
    prepared.config_text = text
    try:
        raw = cfg.load_yaml_config(text.decode("utf-8"))
        if is_nni_config(raw):
            _inline_search_space(files, name, listing, raw, prepared)
        elif "name" not in raw:
            raw["name"] = name  # as `det` names an NNI experiment after its folder
        prepared.raw = raw
        prepared.warnings = experiments.create(ports, raw, None, validate_only=True).warnings
    except UnicodeDecodeError:
        prepared.problems.append(sub.Problem(sub.CONFIG, "is not UTF-8 text; save it as UTF-8"))
    except BadRequestError as e:  # ConfigInvalidError among them: every problem with its path
        prepared.problems.extend(_problems(e, sub.CONFIG))


def _inline_search_space(
    files: SubmissionFiles, name: str, listing: Mapping[str, int], raw: dict[str, Any], prepared: _Prepared
) -> None:
    """An NNI config's `searchSpaceFile` (`searchSpacePath`), a file of the folder, inlined as the CLI does."""
    for key in ("searchSpaceFile", "searchSpacePath"):
        value = raw.get(key)
        if raw.get("searchSpace") is not None or not isinstance(value, str):
            continue
        text = _small_file(files, name, listing, value.removeprefix("./"), prepared)
        if text is None:
            return
        try:
            raw["searchSpace"] = cfg.load_yaml_config(text.decode("utf-8"))  # JSON is YAML
            del raw[key]
        except (UnicodeDecodeError, BadRequestError) as e:
            prepared.problems.append(sub.Problem(key, f"search space file {value!r} cannot be read: {e}"))
        return


def _small_file(
    files: SubmissionFiles, name: str, listing: Mapping[str, int], relative: str, prepared: _Prepared
) -> bytes | None:
    size = listing.get(relative)
    stream = files.open(sub.folder(name) + relative) if size is not None else None
    if stream is None:
        prepared.problems.append(
            sub.Problem(relative, f"is missing: upload submissions/{name}/{relative} before the marker")
        )
        return None
    data = stream.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        prepared.problems.append(sub.Problem(relative, f"is over {MAX_CONFIG_BYTES:,} bytes"))
        return None
    return bytes(data)


def _read_context(files: SubmissionFiles, name: str, listing: Mapping[str, int], prepared: _Prepared) -> None:
    plain = {
        relative: size
        for relative, size in listing.items()
        if relative not in sub.RESERVED
        and not (relative.endswith("/") and size == 0)  # console "folders"
        and relative != _search_space_file(prepared.raw)
    }
    if sub.CONTEXT_ARCHIVE in listing:
        if plain:
            shown = ", ".join(sorted(plain)[:5])
            prepared.problems.append(
                sub.Problem(
                    sub.CONTEXT_ARCHIVE,
                    f"comes with other files ({shown}); give the context "
                    "either as context.tar.zst or as plain files, not both",
                )
            )
            return
        _check_archive(files, name, listing[sub.CONTEXT_ARCHIVE], prepared)
    elif plain:
        _pack_plain(files, name, plain, prepared)


def _search_space_file(raw: Mapping[str, Any]) -> str | None:
    value = raw.get("searchSpaceFile", raw.get("searchSpacePath"))
    return value.removeprefix("./") if isinstance(value, str) else None


def _check_archive(files: SubmissionFiles, name: str, size: int, prepared: _Prepared) -> None:
    key = sub.folder(name) + sub.CONTEXT_ARCHIVE
    if size > contexts.MAX_CONTEXT_BYTES:
        prepared.problems.append(_too_big(sub.CONTEXT_ARCHIVE, size))
        return
    stream = files.open(key)
    if stream is None:
        prepared.problems.append(
            sub.Problem(sub.CONTEXT_ARCHIVE, "went away while it was read; upload again")
        )
        return
    try:
        checked = context_archives.check_archive(stream)
    except context_archives.UnsafeContextError as e:
        prepared.problems.append(sub.Problem(sub.CONTEXT_ARCHIVE, str(e)))
        return
    prepared.context_source, prepared.context_sha256 = key, checked.sha256


def _pack_plain(files: SubmissionFiles, name: str, plain: Mapping[str, int], prepared: _Prepared) -> None:
    bad = [r for r in plain if any(p in ("", ".", "..") for p in r.split("/")) or "\\" in r or "\0" in r]
    for relative in bad:
        prepared.problems.append(
            sub.Problem(relative, "is not a plain relative file name (an empty, '.' or '..' part); rename it")
        )
    total = sum(plain.values())
    if total > contexts.MAX_CONTEXT_BYTES:
        prepared.problems.append(_too_big("context", total))
    if bad or total > contexts.MAX_CONTEXT_BYTES:
        return
    folder = sub.folder(name)

    def opener(key: str) -> Any:
        return lambda: files.open(key)

    members = [context_archives.PlainFile(r, size, opener(folder + r)) for r, size in plain.items()]
    try:
        prepared.context, checked = context_archives.pack_files(members)
    except (OSError, ValueError, BadRequestError) as e:  # a file changed or went while it was read
        prepared.problems.append(sub.Problem("context", f"could not be packed ({e}); upload it again"))
        return
    prepared.context_sha256 = checked.sha256


def _too_big(path: str, size: int) -> sub.Problem:
    return sub.Problem(
        path,
        f"is {size:,} bytes, over the limit of {contexts.MAX_CONTEXT_BYTES:,}; leave data "
        "and outputs out of the context",
    )


def _problems(error: BadRequestError, path: str) -> list[sub.Problem]:
    if isinstance(error, cfg.ConfigInvalidError):
        return [sub.Problem(p.path, p.message) for p in error.problems]
    return [sub.Problem(path, str(error))]
