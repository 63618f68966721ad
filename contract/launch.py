"""The launch spec: what an agent needs to start a run, or one node of a multi-node run (docs/contracts.md
§1, `POST /agents/{agent_id}/heartbeat` answers a list of them).

The control plane builds it (`chalicelib/services/runs.py`) and answers it as JSON (`to_json`); the agent
parses it (`from_json`), refusing one it cannot run with `InvalidLaunchSpecError`. The API's pydantic
model of it (`chalicelib.api.agent_models.LaunchSpec`, for the OpenAPI document) has the same fields, which
`tests/contract` checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stratus.contract import env as names
from stratus.contract.errors import InvalidLaunchSpecError


@dataclass(frozen=True)
class LaunchSpec:
    run_id: str
    trial_id: int
    experiment_id: int
    #: The slots this agent gives the run (a node's share on several nodes; the trial's total is in
    #: ``STRATUS_SLOTS``).
    slots: int
    #: Shell words (run as is), or one string (run with ``sh -c``).
    entrypoint: tuple[str, ...] | str
    #: The trial's variables (`stratus.contract.env.TrialEnv.to_env` and the config's), over the agent's own.
    environment: Mapping[str, str] = field(default_factory=dict)
    #: A presigned URL of the context archive; None: the experiment has no context (an empty folder).
    context_url: str | None = None
    api_url: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "trial_id": self.trial_id,
            "experiment_id": self.experiment_id,
            "slots": self.slots,
            "entrypoint": self.entrypoint if isinstance(self.entrypoint, str) else list(self.entrypoint),
            "environment": dict(self.environment),
            "context_url": self.context_url,
            "api_url": self.api_url,
        }

    @classmethod
    def from_json(cls, data: Any) -> LaunchSpec:
        if not isinstance(data, dict):
            raise InvalidLaunchSpecError(f"a launch spec is an object, not {type(data).__name__}")
        run_id = data.get("run_id")
        if not isinstance(run_id, str | int) or isinstance(run_id, bool) or not str(run_id):
            raise InvalidLaunchSpecError("run_id is missing")
        entry = data.get("entrypoint")
        entrypoint: tuple[str, ...] | str
        if isinstance(entry, str) and entry.strip():
            entrypoint = entry
        elif isinstance(entry, list) and entry and all(isinstance(w, str) for w in entry):
            entrypoint = tuple(entry)
        else:
            raise InvalidLaunchSpecError("entrypoint must be a non-empty list of words or a string")
        env = data.get("environment") or {}
        if not isinstance(env, dict):
            raise InvalidLaunchSpecError("environment must be an object")
        slots = data.get("slots", 1)
        if not isinstance(slots, int) or isinstance(slots, bool) or slots < 0:
            raise InvalidLaunchSpecError("slots must be an integer >= 0")
        context_url = data.get("context_url")
        if context_url is not None and not isinstance(context_url, str):
            raise InvalidLaunchSpecError("context_url must be a string or null")
        return cls(
            run_id=str(run_id),
            trial_id=_id(data, "trial_id"),
            experiment_id=_id(data, "experiment_id"),
            slots=slots,
            entrypoint=entrypoint,
            environment={str(k): "" if v is None else str(v) for k, v in env.items()},
            context_url=context_url or None,
            api_url=str(data.get("api_url") or ""),
        )

    def identity_env(self, default_master: str) -> dict[str, str]:
        """The trial's ids as variables, from the spec's own fields: what the agent sets before the spec's
        ``environment`` (which the control plane fills with every variable, and which wins)."""
        return {
            names.MASTER: self.api_url or default_master,
            names.TRIAL_ID: str(self.trial_id),
            names.EXPERIMENT_ID: str(self.experiment_id),
            names.RUN_ID: self.run_id,
            names.SLOTS: str(self.slots),
        }


def _id(data: Mapping[str, Any], key: str) -> int:
    """A trial's or an experiment's id: a whole number (a string of digits is taken too)."""
    value = data.get(key)
    if value is None or value == "":
        raise InvalidLaunchSpecError(f"{key} is missing")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    raise InvalidLaunchSpecError(f"{key} must be a whole number, not {value!r}")
