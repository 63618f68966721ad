"""Request and response bodies of the HTTP API. `GET /openapi.json` is generated from these models, and
docs/contracts.md describes the same shapes for the CLI and the harness."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from chalicelib.api.cost_models import Cost
from chalicelib.api.elastic_view_models import TrialElastic as TrialElastic
from chalicelib.domain.numbers import INT64_MAX, first_unstorable

#: Integers clients send: 64 bits, what every client holds (DynamoDB would take 38 digits).
Int64 = Annotated[int, Field(ge=-INT64_MAX - 1, le=INT64_MAX)]
Count = Annotated[int, Field(ge=0, le=INT64_MAX)]
#: A body field stored in one DynamoDB item (at most 400 KB with the rest of the record): its JSON size.
MAX_STORED_FIELD_BYTES = 300_000


def _fits_an_item(value: Any) -> Any:
    size = len(json.dumps(value, separators=(",", ":"), default=str).encode())
    if size > MAX_STORED_FIELD_BYTES:
        raise ValueError(
            f"is {size:,} bytes as JSON; at most {MAX_STORED_FIELD_BYTES:,} fit in the record it is stored "
            "in (DynamoDB's item limit is 400 KB): send less, or store it as a checkpoint file"
        )
    return value


#: A mapping stored as it is: every number storable, and small enough for one item.
StoredMap = Annotated[dict[str, Any], AfterValidator(_fits_an_item)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _numbers_fit_dynamodb(cls, data: Any) -> Any:
        """A number DynamoDB cannot store anywhere in the body is a 400 naming where, not a 500."""
        problem = first_unstorable(data)
        if problem is not None:
            raise ValueError(problem)
        return data


# ---- user-facing ----------------------------------------------------------------------------------


class ContextUploadRequest(_Body):
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: Count


class PresignedUpload(BaseModel):
    url: str
    method: Literal["PUT"] = "PUT"
    headers: dict[str, str] = {}


class ContextUploadResponse(BaseModel):
    key: str
    exists: bool
    upload: PresignedUpload | None


class CreateExperimentRequest(_Body):
    config: StoredMap
    context_sha256: str | None = None
    validate_only: bool = False
    activate: bool = True
    #: Created archived (hidden from `det experiment list`), as Determined creates a test-mode experiment.
    archived: bool = False


class Checkpoint(BaseModel):
    uuid: str
    trial_id: int
    experiment_id: int
    steps_completed: int
    state: str
    uri: str
    resources: dict[str, int]
    metadata: dict[str, Any]
    report_time: str


class TrialExit(BaseModel):
    code: int
    reason: str
    #: The rank (global, across nodes) that failed first in a distributed run, as its launcher saw it.
    failed_rank: int | None = None


class Trial(BaseModel):
    id: int
    experiment_id: int
    state: str
    early_stopped: bool = False  # the searcher stopped it before its full length (ASHA)
    hparams: dict[str, Any]
    restarts: int
    start_time: str | None
    end_time: str | None
    total_batches: int
    progress: float | None
    best_validation: float | None
    latest_validation: dict[str, Any] | None
    latest_checkpoint: Checkpoint | None
    exit: TrialExit | None
    warm_start_trial_id: int | None = None  # the trial whose checkpoint it started from (PBT)
    cost: Cost | None = None  # its runs' compute time, cost and waste; null before a run ended
    elastic: TrialElastic | None = None  # null: not an elastic trial, or nothing known of it yet


class Experiment(BaseModel):
    id: int
    name: str
    description: str
    labels: list[str]
    state: str
    progress: float | None
    searcher_type: str
    resource_pool: str
    owner: str
    archived: bool
    start_time: str | None
    end_time: str | None
    num_trials: int
    context_sha256: str | None
    config: dict[str, Any]
    max_slots: int | None = None  # the most slots its trials may hold at once (None: no limit)


class CreateExperimentResponse(BaseModel):
    experiment: Experiment | None
    warnings: list[str]


class ExperimentList(BaseModel):
    experiments: list[Experiment]
    #: Pass as `cursor` for the next page; null: this page was the last.
    next_cursor: str | None = None


class Job(BaseModel):
    """One experiment's demand in a pool's queue (`det job list`), in scheduling order."""

    position: int
    id: str
    type: str
    name: str
    priority: int
    submitted: str
    slots_acquired: int
    slots_needed: int
    status: Literal["QUEUED", "SCHEDULED"]
    user: str
    resource_pool: str
    #: Why its first waiting trial waits, as the last scheduling pass saw it; null when nothing waits.
    reason: str | None = None


class JobList(BaseModel):
    jobs: list[Job]


class ExperimentDetail(BaseModel):
    experiment: Experiment
    trials: list[Trial]
    cost: Cost | None = None  # every trial's, summed


class ExperimentOnly(BaseModel):
    experiment: Experiment


class TrialOnly(BaseModel):
    trial: Trial


class TrialDetail(BaseModel):
    trial: Trial
    checkpoints: list[Checkpoint]


class TrialList(BaseModel):
    trials: list[Trial]


class ValidatedCheckpoint(Checkpoint):
    """A checkpoint with the validation reported at its steps (null: none) and its searcher metric."""

    validation_metrics: dict[str, Any] | None
    searcher_metric_value: float | None


class ExperimentCheckpointList(BaseModel):
    #: The config's `searcher.metric` and `smaller_is_better`: what `best` ranks by.
    searcher_metric: str
    smaller_is_better: bool
    checkpoints: list[ValidatedCheckpoint]


class ExperimentDeletion(BaseModel):
    experiment_id: int
    #: True once every record is gone (a 404 from then on); else it goes on through the events queue.
    deleted: bool
    trials_left: int


class Metric(BaseModel):
    group: str
    steps_completed: int
    metrics: dict[str, Any]
    report_time: str


class MetricList(BaseModel):
    metrics: list[Metric]


class MetricGroupList(BaseModel):
    groups: list[str]  # the groups a trial reported metrics under: training, validation, then by name


class LogLine(BaseModel):
    timestamp: int
    message: str
    rank: int | None = None


class LogPage(BaseModel):
    logs: list[LogLine]
    next_token: str | None
    trial_state: str
    #: The lines the page covered before the rank and level filters (a filtered page may be empty).
    lines_read: int = 0


class Health(BaseModel):
    status: str
    version: str


class Info(BaseModel):
    """What `det version` and `det master info` show of the API (Determined's `GET /info`)."""

    version: str
    #: The stack's name: `det deploy aws up --cluster-id`, or the local stack's (`stratus`).
    cluster_id: str
    region: str
    #: The oldest CLI and agent this API answers (`stratus.contract.versions`): older ones are refused (426).
    oldest_client_version: str = ""
    oldest_agent_version: str = ""


class ErrorBody(BaseModel):
    error: str
    message: str
    problems: list[dict[str, str]] | None = None


class Empty(BaseModel):
    pass


# ---- trial-facing ---------------------------------------------------------------------------------


class RendezvousJoin(_Body):
    node_rank: Annotated[int, Field(ge=0, le=10_000)]
    addr: str = Field(min_length=1, max_length=255)
    port: int | None = Field(default=None, ge=1, le=65535)  # the chief's; null from the other nodes


class RendezvousNode(BaseModel):
    node_rank: int
    addr: str
    port: int | None


class Rendezvous(BaseModel):
    run_id: str
    num_nodes: int
    nodes: list[RendezvousNode]  # the nodes registered so far, by rank
    ready: bool  # every node is in


class TrialInfo(BaseModel):
    trial_id: int
    experiment_id: int
    run_id: str
    hparams: dict[str, Any]
    latest_checkpoint: str | None
    trial_seed: int
    config: dict[str, Any]


class MetricReport(_Body):
    group: str = Field(
        description="'training', 'validation' (the searcher reads its metric here) or a custom group: "
        "any non-empty name without '.'"
    )
    steps_completed: Count
    metrics: StoredMap


class ProgressReport(_Body):
    progress: float = Field(ge=0.0, le=1.0)


class TrialHeartbeat(_Body):
    pass


class HeartbeatAnswer(BaseModel):
    preempt: bool


class CheckpointUploadRequest(_Body):
    uuid: str
    files: list[str] = Field(min_length=1, max_length=10_000)
    #: File -> an earlier checkpoint of the trial holding it unchanged: copied in S3, not uploaded.
    copy_from: dict[str, str] = Field(default_factory=dict, max_length=10_000)


class CheckpointUploadAnswer(BaseModel):
    prefix: str
    urls: dict[str, str]
    copied: list[str] = []


class CheckpointReport(_Body):
    uuid: str
    steps_completed: Count
    resources: dict[str, Count] = {}
    metadata: StoredMap = {}


class SearcherOp(BaseModel):
    action: Literal["train", "wait", "stop"]
    length: int | None
    unit: str


class SearcherCompleted(_Body):
    length: Count
    metric: float


class InvalidHP(_Body):
    message: str = Field(default="", max_length=4000)


class CheckpointOnly(BaseModel):
    checkpoint: Checkpoint


class CheckpointDownloads(BaseModel):
    checkpoint: Checkpoint
    urls: dict[str, str]
