"""Use cases on experiments: create (validate, record, start the searcher), read, list, archive and
unarchive (pause and activate: `chalicelib.services.pausing`)."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chalicelib import config as cfg
from chalicelib.domain import keys
from chalicelib.domain.numbers import INT64_MAX
from chalicelib.domain.records import Experiment
from chalicelib.domain.searchers import SearcherNotSupportedError, new_searcher
from chalicelib.domain.states import ExperimentState
from chalicelib.errors import BadRequestError, ConflictError, NotFoundError
from chalicelib.services import contexts, lookups, pools, search_specs, searching, warm_start
from chalicelib.services.ports import Ports
from stratus.contract.nni import is_nni_config


@dataclass(frozen=True)
class CreateResult:
    experiment: Experiment | None
    warnings: list[str]


def validate(raw_config: Mapping[str, Any]) -> cfg.ParsedConfig:
    """The parsed config (defaults filled in) and its warnings, or ConfigInvalidError.

    An NNI config (v1 or v2, with its search space inline as `searchSpace`) is translated first;
    the translation's warnings follow the parser's.
    """
    nni_warnings: list[str] = []
    if is_nni_config(raw_config):
        translation = cfg.translate_nni(raw_config, raw_config.get("searchSpace"))
        raw_config, nni_warnings = translation.config, translation.warnings
    parsed = cfg.parse_experiment_config(raw_config)
    if nni_warnings:
        parsed = cfg.ParsedConfig(config=parsed.config, warnings=[*parsed.warnings, *nni_warnings])
    try:
        new_searcher(search_specs.search_spec(parsed.config))
    except SearcherNotSupportedError as error:
        raise cfg.ConfigInvalidError([cfg.ConfigProblem("searcher.name", str(error))]) from error
    except (ValueError, ArithmeticError) as error:
        # A config the schema let through but the searcher cannot plan: the user's to fix, never a 500.
        problem = cfg.ConfigProblem(
            "searcher", f"the {parsed.config.searcher.name} searcher cannot run it: {error}"
        )
        raise cfg.ConfigInvalidError([problem]) from error
    return parsed


def create(
    ports: Ports,
    raw_config: Mapping[str, Any],
    context_sha256: str | None,
    *,
    validate_only: bool = False,
    activate: bool = True,
    owner: str = "user",
    archived: bool = False,
    experiment_id: int | None = None,
) -> CreateResult:
    """Validate and, unless `validate_only`, create and start the experiment: under `experiment_id` when
    given (an id claimed beforehand, `chalicelib.services.submissions`), else under a new one."""
    parsed = validate(raw_config)
    warnings = list(parsed.warnings)
    pools.check_request_fits(ports.settings, parsed.config.resources)
    source = warm_start.check_source(ports, parsed.config)  # one that cannot be restored: 400/404
    if validate_only:
        return CreateResult(experiment=None, warnings=warnings)
    if context_sha256 is not None and not keys.is_sha256(context_sha256):
        raise BadRequestError(
            f"context_sha256 {context_sha256!r} is not a SHA-256 hex digest; upload the context through POST /contexts first"
        )
    if context_sha256 is not None:
        contexts.verified(ports, context_sha256)  # its bytes hash to its name, or a 400: before any id
    if experiment_id is None:
        experiment_id = ports.ids.next("experiment")
    if source is not None:
        warm_start.claim(ports, source, experiment_id, parsed.config)  # kept while the experiment runs
    # Determined seeds from the submission time; the seed is kept in the stored config so a rerun matches.
    config = parsed.config.with_service_defaults(
        experiment_id=experiment_id, experiment_seed=int(ports.clock.now())
    )
    experiment = Experiment(
        id=experiment_id,
        state=ExperimentState.ACTIVE if activate else ExperimentState.PAUSED,
        name=config.name or "",
        description=config.description or "",
        labels=list(config.labels),
        owner=owner,
        archived=archived,
        config=config.model_dump(mode="json"),
        context_sha256=context_sha256,
        searcher_type=config.searcher.name,
        resource_pool=config.resources.resource_pool,
        start_time=ports.clock.now_iso(),
        weight=config.resources.weight,
        queue_position=ports.clock.now(),  # FIFO among jobs of one priority until `det job update`
        warm_start_checkpoint=source,
    )
    ports.experiments.create(experiment)
    if activate:
        searching.start(ports, experiment.with_parsed_config(config))  # the config parsed once
    return CreateResult(experiment=ports.experiments.get(experiment_id), warnings=warnings)


def get(ports: Ports, experiment_id: int) -> Experiment:
    """The experiment, or NotFoundError naming it (`lookups.get_experiment`)."""
    return lookups.get_experiment(ports, experiment_id)


def list_experiments(
    ports: Ports, limit: int, cursor: str | None = None, *, archived: bool | None = None
) -> tuple[list[Experiment], str | None]:
    """Newest first; `archived` False hides the archived ones (`det experiment list` without `--all`).
    Pages with a cursor (the opaque `next_cursor` of the page before): stable under creates meanwhile."""
    records, before = ports.experiments.list(limit, decode_cursor(cursor), archived=archived)
    return records, encode_cursor(before)


def encode_cursor(before: int | None) -> str | None:
    if before is None:
        return None
    return base64.urlsafe_b64encode(json.dumps({"before": before}).encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> int | None:
    if not cursor:
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        before = data["before"]
        if isinstance(before, int) and not isinstance(before, bool) and 0 < before <= INT64_MAX:
            return before
    except (ValueError, TypeError, KeyError):
        pass
    raise BadRequestError(
        f"cursor {cursor[:40]!r} is not one this API gave out; pass the next_cursor of the page before, "
        "or leave it out to start from the newest"
    )


def archive(ports: Ports, experiment_id: int) -> Experiment:
    """Hide an experiment that has ended from `det experiment list` (Determined refuses an active one)."""
    return _set_archived(ports, experiment_id, archived=True)


def unarchive(ports: Ports, experiment_id: int) -> Experiment:
    return _set_archived(ports, experiment_id, archived=False)


def _set_archived(ports: Ports, experiment_id: int, *, archived: bool) -> Experiment:
    experiment = get(ports, experiment_id)
    verb = "archived" if archived else "unarchived"
    if not experiment.state.terminal:
        raise ConflictError(
            f"experiment {experiment_id} is {experiment.state}; only an experiment that has ended "
            f"(COMPLETED, CANCELED or ERROR) can be {verb}: wait for it to end, or cancel it first"
        )
    if experiment.archived == archived:
        undo = f"det experiment {'unarchive' if archived else 'archive'} {experiment_id}"
        raise ConflictError(f"experiment {experiment_id} is already {verb}; `{undo}` undoes it")
    updated = ports.experiments.set_archived(experiment_id, archived)
    if updated is None:  # gone meanwhile (an ended experiment does not move again)
        raise NotFoundError(
            f"experiment {experiment_id} not found; `det experiment list --all` shows the ids"
        )
    return updated
