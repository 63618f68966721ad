"""The control plane's records as typed values: experiments, trials and checkpoints (runs and their
nodes: `chalicelib.domain.run_records`). The adapters build them from their stores' items with
`from_item` and write them with `to_item`; the services read attributes, never a dict.

Optional fields are None when the store has no value (the adapters store no attribute for None).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any, Literal, Self

from chalicelib.config import ExperimentConfig, parse_experiment_config
from chalicelib.domain.states import ExperimentState, TrialState

#: What the searcher wants of a trial (the trial reads it through `GET /trials/{id}/searcher`).
SearcherWish = Literal["train", "pause", "stop"]

Item = dict[str, Any]


class StoredRecord:
    """What every record shares: `from_item` and `to_item` for a frozen dataclass whose fields are named
    as the store's attributes."""

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> Self:
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in item.items() if k in names})

    def to_item(self) -> Item:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class Experiment(StoredRecord):
    id: int
    state: ExperimentState
    name: str = ""
    description: str = ""
    labels: list[str] = field(default_factory=list)
    #: Who created it, as a label (never used to authorize): `chalicelib.api.auth.UserPrincipal.owner`.
    owner: str = ""
    #: Hidden from `det experiment list` unless `--all` (a test-mode experiment is created archived).
    archived: bool = False
    #: The validated config as submitted, defaults filled in (JSON); `parsed_config` is its typed form.
    config: dict[str, Any] = field(default_factory=dict)
    context_sha256: str | None = None
    searcher_type: str = ""
    resource_pool: str = ""
    start_time: str | None = None
    end_time: str | None = None
    num_trials: int = 0
    progress: float | None = None
    version: int = 0
    #: The searcher's snapshot, once it started; saved under `searcher_version`.
    searcher: dict[str, Any] | None = None
    searcher_version: int = 0
    #: The job's place in its pool's queue (`det job update`): its priority (None: the config's
    #: `resources.priority`), its fair-share weight, and its position among jobs of one priority
    #: (the submission time in epoch seconds unless moved; None on records older than positions).
    priority: int | None = None
    weight: float = 1.0
    queue_position: float | None = None
    #: The checkpoint its trials start from (`searcher.source_checkpoint_uuid`, or the latest of
    #: `searcher.source_trial_id` when it was created): Determined's warm start.
    warm_start_checkpoint: str | None = None
    #: The most slots its runs may hold at once as `det experiment set max-slots` left it: None means the
    #: config's `resources.max_slots`, 0 no limit (cleared).
    max_slots: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", ExperimentState(self.state))

    @property
    def job_max_slots(self) -> int | None:
        """The most slots its runs may hold at once (None: no limit)."""
        if self.max_slots is not None:
            return self.max_slots or None
        configured = (self.config.get("resources") or {}).get("max_slots")  # read without parsing all
        return configured if isinstance(configured, int) and configured > 0 else None

    @property
    def job_priority(self) -> int:
        """The priority its runs are scheduled with: the job's own, else the config's."""
        return self.priority if self.priority is not None else self.parsed_config.resources.priority

    @property
    def job_pool(self) -> str:
        """The pool its runs are queued in (moved by `det job update --resource-pool`)."""
        return self.resource_pool or self.parsed_config.resources.resource_pool

    @property
    def searcher_started(self) -> bool:
        return self.searcher is not None

    @cached_property
    def parsed_config(self) -> ExperimentConfig:
        """The config, typed: parsed once per record (once per request or event, which read it once)."""
        return parse_experiment_config(self.config).config

    def with_parsed_config(self, parsed: ExperimentConfig) -> Experiment:
        """This record, knowing its config's typed form already (built from it: nothing to parse again)."""
        self.__dict__["parsed_config"] = parsed
        return self


@dataclass(frozen=True, kw_only=True)
class Trial(StoredRecord):
    id: int
    experiment_id: int
    state: TrialState
    hparams: dict[str, Any] = field(default_factory=dict)
    request_id: str = ""
    #: Runs that entered the queue (the workflow counts them); resumes after a pause are generations.
    attempts: int = 0
    generation: int = 0
    #: Restarts after a failure (the workflow counts them against `max_restarts`); a requeue after a
    #: preemption, an agent's stop or a pause is not one.
    restarts: int = 0
    trial_seed: int = 0
    start_time: str | None = None
    end_time: str | None = None
    searcher_action: SearcherWish = "train"
    target_length: int | None = None
    searcher_length: int | None = None
    searcher_pending: bool = False
    early_stopped: bool = False
    invalid_hp: bool = False
    exit_code: int | None = None
    exit_reason: str | None = None
    failed_rank: int | None = None
    total_batches: int = 0
    progress: float | None = None
    best_validation: float | None = None
    latest_validation: dict[str, Any] | None = None
    latest_validation_steps: int | None = None
    latest_checkpoint: str | None = None
    latest_checkpoint_steps: int | None = None
    #: The trial a searcher (PBT) started this one from, and that trial's checkpoint it starts with.
    warm_start_trial_id: int | None = None
    warm_start_checkpoint: str | None = None
    #: What each of its runs used, by run id (`chalicelib.domain.usage.RunUsage` items), set at each exit.
    usage: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: An elastic trial's latest AdaptDL hints (`stratus.contract.adaptdl.validate_hints`'s shape) and when they
    #: were first stored as they are (`chalicelib.services.elastic`).
    elastic_hints: dict[str, Any] | None = None
    hints_at: str | None = None
    #: An elastic trial's size for its next run, set by the allocator's last rescale, and that rescale
    #: (``{"run", "from", "to", "reason", "at"}``); each run's replicas as it was granted its slots
    #: (``{run id: {"at", "replicas", "reason"}}``) (`chalicelib.services.elastic_scheduling`).
    elastic_target: int | None = None
    elastic_rescale: dict[str, Any] | None = None
    elastic_runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    version: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", TrialState(self.state))

    @property
    def work_done(self) -> float:
        """The share of its work the trial did, 0 to 1: all of it once COMPLETED, else the progress it
        reported, else the batches it trained over its target (0 without a target)."""
        if self.state == TrialState.COMPLETED:
            return 1.0
        if self.progress is not None:
            return min(max(self.progress, 0.0), 1.0)
        if self.target_length:
            return min(self.total_batches / self.target_length, 1.0)
        return 0.0

    @property
    def told_to_stop(self) -> bool:
        """The searcher asked the trial to stop its process (to pause, or for good)."""
        return self.searcher_action in ("pause", "stop")


@dataclass(frozen=True, kw_only=True)
class Checkpoint(StoredRecord):
    uuid: str
    trial_id: int
    experiment_id: int
    steps_completed: int
    state: Literal["COMPLETED", "DELETED"] = "COMPLETED"
    run_id: str | None = None
    resources: dict[str, int] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    report_time: str = ""
    #: The experiments whose trials start from it (Determined's warm start), claimed at their creation
    #: (`chalicelib.services.warm_start`): while one of them runs, the checkpoint is kept.
    used_by: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class LogLine:
    """One line of a trial's log: when (epoch milliseconds), what, and which rank wrote it, if known."""

    timestamp: int
    message: str
    rank: int | None = None


@dataclass(frozen=True, kw_only=True)
class MetricReport(StoredRecord):
    trial_id: int
    group: str
    steps_completed: int
    metrics: dict[str, Any]
    report_time: str
