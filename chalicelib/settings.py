"""The control plane's settings: the one place that reads environment variables.

In AWS the variables are set on every Lambda by `infra/`; on the embedded local stack, `infra.local.stack`
sets them before the app is imported. Read lazily, so tests can set the environment first.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

from stratus.contract.errors import InvalidPoolError, InvalidTagError
from stratus.contract.pools import DEFAULT_POOLS, PoolSpec, pools_from_json
from stratus.contract.prices import PriceTable, table_from_json
from stratus.contract.tags import CLUSTER_TAG, TAGS_ENV, tags_from_json

#: How often agents heartbeat (their liveness; work reaches them by their doorbell, `chalicelib.aws.bells`,
#: and stop requests by the doorbell too): minutes on AWS, where every beat is an API request and a few
#: DynamoDB requests; the local stack sets a few seconds. With the timeout below, a lost agent is noticed
#: within `AGENT_TIMEOUT_BEATS` x 120 s = 8 minutes; a spot notice (the agent's IMDS watcher) and SIGTERM
#: (a scale-in, a job's end) drain at once and do not wait on a heartbeat.
DEFAULT_AGENT_HEARTBEAT_S = 120.0
#: How long a trial's report sender gathers reports before it sends them (`STRATUS_REPORT_INTERVAL` in
#: its environment; the local stack sets 5). Every send is an API request and a few DynamoDB writes:
#: 120 s keeps the control plane's steady cost in AWS under $0.001 per trial-hour (0.000909 counted,
#: `bench/results/control_plane_cost.md`); checkpoints, preemption checks and the end of the trial flush
#: at once whatever the interval, so nothing waits on it but `det trial describe`'s latest numbers.
DEFAULT_REPORT_INTERVAL_S = 120.0
#: An agent silent for longer is presumed lost (its runs end; their trials restart elsewhere). Unless set,
#: it follows the heartbeat: `AGENT_TIMEOUT_BEATS` missed beats, and never under this.
DEFAULT_AGENT_TIMEOUT_S = 30.0
AGENT_TIMEOUT_BEATS = 4
#: The longest report interval a stack may set (the harness caps it the same).
MAX_REPORT_INTERVAL_S = 600.0
#: How long after a trial's run ends (or an experiment starts) the sweep looks at its experiment, if nothing
#: happened to it since (`chalicelib.services.searcher_watch`).
DEFAULT_SEARCHER_CHECK_S = 120.0
#: How long a presigned S3 URL stays valid.
DEFAULT_PRESIGN_EXPIRY_S = 3600


@dataclass(frozen=True)
class Settings:
    stack: str
    region: str
    endpoint_url: str | None
    bucket: str
    table_prefix: str
    scheduler_queue_url: str
    launch_queue_url: str
    events_queue_url: str
    state_machine_arn: str
    log_group: str
    api_url: str
    token_secret: str
    agent_token: str
    agent_timeout_s: float
    presign_expiry_s: int
    agent_heartbeat_s: float = DEFAULT_AGENT_HEARTBEAT_S
    report_interval_s: float = DEFAULT_REPORT_INTERVAL_S
    #: `STRATUS_SEARCHER_CHECK_S`: the sweep's look at an experiment comes this long after the last run of
    #: its trials ended (`chalicelib.services.searcher_watch`).
    searcher_check_s: float = DEFAULT_SEARCHER_CHECK_S
    #: The resource pools (`STRATUS_POOLS`, JSON: a list of `PoolSpec` fields; one "default" pool,
    #: priority scheduler with preemption, when unset).
    pools: tuple[PoolSpec, ...] = DEFAULT_POOLS
    #: The name of the stack's agent role (`STRATUS_AGENT_ROLE_NAME`): an EC2 agent that signs
    #: `POST /agents/{id}/iam-credential` as that role's session for its instance gets its credential.
    #: Empty (the local stack): that route refuses every caller.
    agent_role_name: str = ""
    #: The role SageMaker training jobs of `sagemaker` pools run as (the template's execution role).
    sagemaker_role_arn: str = ""
    #: The compute package's key in the bucket (`STRATUS_COMPUTE_KEY`, `compute/<sha256>/<wheel>`): what a
    #: SageMaker job installs before its agent runs (`stratus.contract.container_boot`).
    compute_key: str = ""
    #: A price table the operator pins (`STRATUS_PRICES`, `stratus.contract.prices`): it replaces the one the
    #: stack keeps from AWS (`chalicelib.services.prices`). None: the stack's own, then the committed one.
    prices: PriceTable | None = None
    #: The user's tags (`STRATUS_TAGS`, a JSON object, `det deploy aws up --add-tag`; `stratus.contract.tags`), as
    #: (key, value) pairs sorted by key: what the Batch and SageMaker jobs are tagged with (`job_tags`).
    tags: tuple[tuple[str, str], ...] = ()

    def job_tags(self) -> dict[str, str]:
        """The tags of every job the control plane starts: the user's, and the stack's cluster tag."""
        return {**dict(self.tags), CLUSTER_TAG: self.stack}

    def table(self, name: str) -> str:
        return f"{self.table_prefix}{name}"

    def pool(self, name: str) -> PoolSpec | None:
        """The configured pool of that name, or None."""
        return next((pool for pool in self.pools if pool.name == name), None)


def _required(name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        raise RuntimeError(f"environment variable {name} is not set; the stack's deployment sets it")
    return value


class SecretReader(Protocol):
    def __call__(self, secret_id: str, *, region: str, endpoint_url: str | None) -> str: ...


#: Reads a Secrets Manager secret (`chalicelib.aws.secrets.read_secret`, registered by `wiring`: the
#: services read settings, and must not reach AWS but through their ports).
_secret_reader: SecretReader | None = None


def read_secrets_with(reader: SecretReader) -> None:
    global _secret_reader
    _secret_reader = reader
    reset_settings()


def _secret(name: str, region: str, endpoint_url: str | None) -> str:
    """A secret: from Secrets Manager where `<name>_ARN` names one (in AWS), else the variable itself
    (the local stack and tests, which generate theirs)."""
    secret_id = os.environ.get(f"{name}_ARN", "")
    if secret_id:
        if _secret_reader is None:
            raise RuntimeError(
                f"{name}_ARN is set but nothing reads secrets (chalicelib.wiring registers the reader)"
            )
        return _secret_reader(secret_id, region=region, endpoint_url=endpoint_url)
    if not os.environ.get(name):
        raise RuntimeError(
            f"neither {name}_ARN (a Secrets Manager secret) nor {name} is set; the stack's deployment sets one"
        )
    return os.environ[name]


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    stack = os.environ.get("STRATUS_STACK", "stratus")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    endpoint_url = os.environ.get("AWS_ENDPOINT_URL") or None
    return Settings(
        stack=stack,
        region=region,
        endpoint_url=endpoint_url,
        bucket=_required("STRATUS_BUCKET"),
        table_prefix=os.environ.get("STRATUS_TABLE_PREFIX", f"{stack}-"),
        scheduler_queue_url=_required("STRATUS_SCHEDULER_QUEUE_URL"),
        launch_queue_url=_required("STRATUS_LAUNCH_QUEUE_URL"),
        events_queue_url=_required("STRATUS_EVENTS_QUEUE_URL"),
        state_machine_arn=_required("STRATUS_STATE_MACHINE_ARN"),
        log_group=os.environ.get("STRATUS_LOG_GROUP", f"/{stack}/trials"),
        api_url=os.environ.get("STRATUS_API_URL", ""),
        token_secret=_secret("STRATUS_TOKEN_SECRET", region, endpoint_url),
        agent_token=_secret("STRATUS_AGENT_TOKEN", region, endpoint_url),
        agent_timeout_s=_agent_timeout(),
        agent_heartbeat_s=_agent_heartbeat(),
        report_interval_s=_report_interval(),
        searcher_check_s=_searcher_check(),
        presign_expiry_s=int(os.environ.get("STRATUS_PRESIGN_EXPIRY_S", DEFAULT_PRESIGN_EXPIRY_S)),
        pools=_pools(),
        agent_role_name=os.environ.get("STRATUS_AGENT_ROLE_NAME", "").strip(),
        sagemaker_role_arn=os.environ.get("STRATUS_SAGEMAKER_ROLE_ARN", "").strip(),
        compute_key=os.environ.get("STRATUS_COMPUTE_KEY", "").strip(),
        prices=table_from_json(os.environ.get("STRATUS_PRICES", "")),
        tags=_tags(),
    )


def _agent_heartbeat() -> float:
    value = float(os.environ.get("STRATUS_AGENT_HEARTBEAT_S") or DEFAULT_AGENT_HEARTBEAT_S)
    if not 0 < value <= 300:
        raise RuntimeError(f"STRATUS_AGENT_HEARTBEAT_S={value:g} must be between 0 and 300 seconds")
    return value


def _report_interval() -> float:
    value = float(os.environ.get("STRATUS_REPORT_INTERVAL_S") or DEFAULT_REPORT_INTERVAL_S)
    if not 0 <= value <= MAX_REPORT_INTERVAL_S:
        raise RuntimeError(
            f"STRATUS_REPORT_INTERVAL_S={value:g} must be between 0 and {MAX_REPORT_INTERVAL_S:g} seconds"
        )
    return value


def _searcher_check() -> float:
    value = float(os.environ.get("STRATUS_SEARCHER_CHECK_S") or DEFAULT_SEARCHER_CHECK_S)
    if not 0 < value <= 3600:
        raise RuntimeError(f"STRATUS_SEARCHER_CHECK_S={value:g} must be between 0 and 3600 seconds")
    return value


def _agent_timeout() -> float:
    raw = os.environ.get("STRATUS_AGENT_TIMEOUT_S")
    if raw:
        return float(raw)
    return max(DEFAULT_AGENT_TIMEOUT_S, AGENT_TIMEOUT_BEATS * _agent_heartbeat())


def _pools() -> tuple[PoolSpec, ...]:
    try:
        return pools_from_json(os.environ.get("STRATUS_POOLS", ""))
    except InvalidPoolError as error:
        raise RuntimeError(f"environment variable STRATUS_POOLS: {error}") from error


def _tags() -> tuple[tuple[str, str], ...]:
    try:
        return tuple(tags_from_json(os.environ.get(TAGS_ENV, "")).items())
    except InvalidTagError as error:
        raise RuntimeError(f"environment variable {TAGS_ENV}: {error}") from error


def reset_settings() -> None:
    """Forget the cached settings (tests and the local stack change the environment)."""
    get_settings.cache_clear()


#: `submissions`: the bucket's notifications of `submissions/<name>/submit` (chalicelib.handlers.submissions).
QUEUES = {
    "scheduler": "scheduler.fifo",
    "launch": "launch",
    "events": "trial-events",
    "submissions": "submissions",
}


def queue_name(kind: str) -> str:
    """The SQS queue of a kind. Read at import by the event decorators, so only the stack name is used."""
    return f"{os.environ.get('STRATUS_STACK', 'stratus')}-{QUEUES[kind]}"
