"""`det checkpoint delete UUID[,UUID...]` (Determined's DeleteCheckpoints): remove checkpoints' files from
S3 and mark them DELETED; their records stay, as after the retention policy, so the trials' tables still
show them.

Every uuid is checked before anything is deleted; one refused refuses the request:
- not a uuid (400) or no such checkpoint (404);
- the latest checkpoint of a trial that has not ended (409): its next run resumes from it (a pause, a
  preemption, a rescale), so deleting it would lose the trial's progress. Determined deletes it anyway;
  here the trial is paused or ended first, or a newer checkpoint is stored;
- the warm-start source of an experiment that has not ended (409, `searcher.source_checkpoint_uuid` or
  `source_trial_id`): its trials start (and restart) from it, `chalicelib.services.warm_start`.
A checkpoint already DELETED is left as it is (a repeated request deletes nothing more).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from chalicelib.domain import keys
from chalicelib.domain.records import Checkpoint
from chalicelib.errors import BadRequestError, ConflictError
from chalicelib.services import checkpoints, warm_start
from chalicelib.services.ports import Ports

#: At most this many checkpoints in one request (each is an S3 listing and deletion inside it).
MAX_DELETIONS = 100


@dataclass(frozen=True)
class Deletion:
    deleted: list[str]
    already_deleted: list[str]


def delete(ports: Ports, uuids: Sequence[str]) -> Deletion:
    wanted = list(dict.fromkeys(uuids))
    if not wanted:
        raise BadRequestError("no checkpoint given; name at least one uuid")
    if len(wanted) > MAX_DELETIONS:
        raise BadRequestError(f"{len(wanted)} checkpoints in one request; at most {MAX_DELETIONS}")
    found = [checkpoints.get(ports, uuid) for uuid in wanted]  # 400/404 before anything is deleted
    for checkpoint in found:
        _refuse_a_resume_point(ports, checkpoint)
    warm_start.refuse_deleting_checkpoints(ports, found)
    deleted, gone = [], []
    for checkpoint in found:
        if checkpoint.state == "DELETED":
            gone.append(checkpoint.uuid)
            continue
        prefix = keys.checkpoint_prefix(checkpoint.experiment_id, checkpoint.trial_id, checkpoint.uuid)
        ports.blobs.delete_prefix(prefix)
        ports.checkpoints.mark_deleted(checkpoint.uuid)
        deleted.append(checkpoint.uuid)
    return Deletion(deleted, gone)


def _refuse_a_resume_point(ports: Ports, checkpoint: Checkpoint) -> None:
    if checkpoint.state == "DELETED":
        return
    trial = ports.trials.get(checkpoint.trial_id)
    if trial is None or trial.state.terminal or trial.latest_checkpoint != checkpoint.uuid:
        return
    raise ConflictError(
        f"checkpoint {checkpoint.uuid} is the latest of trial {trial.id}, which is {trial.state} and resumes "
        "from it; wait until the trial ends or stores a newer checkpoint, then delete it"
    )
