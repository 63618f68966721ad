"""`det experiment set name|description|max-slots` and `det experiment label add|remove`: change what a
user may change of an experiment after creating it (Determined's PatchExperiment).

- name (1-128 printable characters) and description (up to 4,000 characters): any experiment, running
  or ended;
- labels: added and removed by name, so two users labelling at once lose neither label (Determined's
  CLI reads the list and writes it back whole); at most `MAX_LABELS`, each 1-255 printable characters;
- max_slots (`resources.max_slots`, see `chalicelib.domain.job_limits`): an experiment that has not
  ended; 0 clears the limit. It may not go below `resources.slots_per_trial` (no trial could start). A
  lowered limit stops nothing: the job gets no more slots until its trials hold less. The job's live
  runs carry the new limit and its pool gets a pass, so waiting trials start at once when it is raised.

The write is conditional on the record's version (`update_versioned`), planned again after a concurrent
change (a pause, the searcher, `det job update`). Repeating a change writes nothing and answers the
record as it is (an idempotent PATCH).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from chalicelib.domain.records import Experiment
from chalicelib.errors import BadRequestError, ConflictError
from chalicelib.services import experiments, job_updates
from chalicelib.services.ports import Ports

MAX_NAME = 128
MAX_DESCRIPTION = 4000
MAX_LABEL = 255
MAX_LABELS = 100
#: How many times an edit is planned again after a concurrent change to the experiment.
EDIT_ATTEMPTS = 3


@dataclass(frozen=True)
class ExperimentEdit:
    """What to change; None (or empty) leaves a field as it is. ``max_slots`` 0 clears the limit."""

    name: str | None = None
    description: str | None = None
    add_labels: Sequence[str] = ()
    remove_labels: Sequence[str] = ()
    max_slots: int | None = None

    def empty(self) -> bool:
        return (
            self.name is None
            and self.description is None
            and not self.add_labels
            and not self.remove_labels
            and self.max_slots is None
        )


def edit(ports: Ports, experiment_id: int, change: ExperimentEdit) -> Experiment:
    """Apply ``change`` (see the module docstring); the record as it is afterwards."""
    if change.empty():
        raise BadRequestError(
            "nothing to change: give name, description, add_labels, remove_labels or max_slots, e.g. "
            f"`det experiment set description {experiment_id} 'baseline'`"
        )
    _check_values(change)
    for _attempt in range(EDIT_ATTEMPTS):
        before = experiments.get(ports, experiment_id)
        fields = _fields(before, change)
        if not fields:
            if change.max_slots is not None and not before.state.terminal:
                # A repeat: the first may have written the limit and failed before its runs got it.
                job_updates.refresh_live_runs(ports, before)
            return before
        after = ports.experiments.update_versioned(experiment_id, fields, before.version)
        if after is None:
            continue  # changed (or deleted) meanwhile: read it again
        if "max_slots" in fields:
            job_updates.refresh_live_runs(ports, after)
        return after
    raise ConflictError(
        f"experiment {experiment_id} kept changing while this edit was written; run the command again"
    )


def _check_values(change: ExperimentEdit) -> None:
    problems: list[str] = []
    if change.name is not None and not _printable(change.name, MAX_NAME):
        problems.append(f"name {change.name[:40]!r} must be 1 to {MAX_NAME} printable characters")
    if change.description is not None and len(change.description) > MAX_DESCRIPTION:
        problems.append(f"description has {len(change.description)} characters; at most {MAX_DESCRIPTION}")
    for label in [*change.add_labels, *change.remove_labels]:
        if not _printable(label, MAX_LABEL):
            problems.append(f"label {label[:40]!r} must be 1 to {MAX_LABEL} printable characters")
    if change.max_slots is not None and change.max_slots < 0:
        problems.append(f"max_slots {change.max_slots} must be 0 (no limit) or more")
    if set(change.add_labels) & set(change.remove_labels):
        both = sorted(set(change.add_labels) & set(change.remove_labels))
        problems.append(f"labels {both} are both added and removed; name each once")
    if problems:
        raise BadRequestError("; ".join(problems))


def _fields(before: Experiment, change: ExperimentEdit) -> dict[str, Any]:
    """The fields to write: only those the change alters."""
    fields: dict[str, Any] = {}
    if change.name is not None and change.name != before.name:
        fields["name"] = change.name
    if change.description is not None and change.description != before.description:
        fields["description"] = change.description
    labels = [label for label in before.labels if label not in set(change.remove_labels)]
    labels += [label for label in dict.fromkeys(change.add_labels) if label not in labels]
    if labels != list(before.labels):
        if len(labels) > MAX_LABELS:
            raise BadRequestError(
                f"experiment {before.id} would have {len(labels)} labels; at most {MAX_LABELS}: "
                "remove some first (`det experiment label remove`)"
            )
        fields["labels"] = labels
    if change.max_slots is not None and change.max_slots != _stored_limit(before):
        _check_limit(before, change.max_slots)
        fields["max_slots"] = change.max_slots
    return fields


def _stored_limit(experiment: Experiment) -> int:
    return experiment.job_max_slots or 0


def _check_limit(experiment: Experiment, max_slots: int) -> None:
    if experiment.state.terminal:
        raise ConflictError(
            f"experiment {experiment.id} is {experiment.state}; a slot limit only applies to an "
            "experiment that has not ended"
        )
    per_trial = experiment.parsed_config.resources.slots_per_trial
    if 0 < max_slots < per_trial:
        raise BadRequestError(
            f"max_slots {max_slots} is less than the experiment's resources.slots_per_trial "
            f"({per_trial}): no trial could start; give {per_trial} or more, or 0 for no limit"
        )


def _printable(text: str, most: int) -> bool:
    return 0 < len(text) <= most and text.isprintable()
