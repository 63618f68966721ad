"""The HTTP client of the Stratus API (docs/contracts.md §1, user-facing routes).

One method per route; each returns the decoded JSON answer. Errors become the CLI's errors: an error
body `{"error", "message", "problems"}`, read by the contract's one parser (`stratus.contract.errors.ErrorBody`),
becomes `ApiError` (`NotFoundError` for 404), a refused or timed-out connection becomes
`ConnectionFailedError`. The CLI keeps httpx; the compute side's session is `stratus.contract.http`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import httpx

from det._client_uploads import ContextUploads
from det.errors import ApiError, ConnectionFailedError, NotFoundError
from stratus.contract.errors import ErrorBody
from stratus.contract.owner import USER_HEADER, clean_user_name
from stratus.contract.versions import VERSION, VERSION_HEADER, Side, Standing, compare

# API Gateway gives up on a request after 29 s; the local stack answers well within that.
API_TIMEOUT = httpx.Timeout(60.0, connect=5.0)

Json = dict[str, Any]


class ApiClient(ContextUploads):
    """A thin client of the user-facing routes. `transport` lets tests answer in memory; `user` (the OS
    user) goes in `stratus.contract.owner.USER_HEADER`, the owner label of what it creates; `auth` signs each
    request (`det._sigv4`, for an API in AWS)."""

    def __init__(
        self,
        master_url: str,
        transport: httpx.BaseTransport | None = None,
        user: str | None = None,
        auth: httpx.Auth | None = None,
    ) -> None:
        self.master_url = master_url.rstrip("/")
        self._transport = transport
        # The CLI's version: the API refuses a CLI too old for it, naming both versions (426).
        headers = {"Accept": "application/json", VERSION_HEADER: VERSION}
        if (name := clean_user_name(user)) is not None:
            headers[USER_HEADER] = name
        self._http = httpx.Client(
            base_url=self.master_url, transport=transport, timeout=API_TIMEOUT, headers=headers, auth=auth
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- experiments -------------------------------------------------------------------------

    def create_experiment(
        self,
        config: Mapping[str, Any],
        *,
        context_sha256: str | None,
        validate_only: bool,
        activate: bool,
        archived: bool = False,
    ) -> Json:
        body: Json = {
            "config": dict(config),
            "context_sha256": context_sha256,
            "validate_only": validate_only,
            "activate": activate,
        }
        if archived:
            body["archived"] = True
        return self._request("POST", "/experiments", json=body)

    def list_experiments(
        self, *, limit: int | None = None, cursor: str | None = None, archived: bool | None = None
    ) -> tuple[list[Json], str | None]:
        """One page, newest first, and the cursor of the next (None: the last). `archived` False: only
        the unarchived experiments, True: only the archived ones, None: all."""
        params = _params(limit=limit, cursor=cursor)
        if archived is not None:
            params["archived"] = "true" if archived else "false"
        answer = self._request("GET", "/experiments", params=params)
        following = answer.get("next_cursor")
        return list(answer.get("experiments", [])), str(following) if following else None

    def list_jobs(self, resource_pool: str | None = None) -> list[Json]:
        """A pool's job queue in scheduling order (the default pool unless given)."""
        answer = self._request("GET", "/jobs", params=_params(resource_pool=resource_pool))
        return list(answer.get("jobs", []))

    def update_job(self, job_id: str, change: Mapping[str, Any]) -> Json:
        """One change to a job (`priority`, `weight`, `resource_pool`, `ahead_of` or `behind_of`)."""
        return self._request(
            "PATCH",
            f"/jobs/{job_id}",
            json=dict(change),
            not_found=None,  # the API names which job (the moved one or the one it moves next to)
        )

    def update_jobs(self, updates: Sequence[Mapping[str, Any]]) -> Json:
        """Several changes, each `{"job_id": ..., <one change>}`, checked whole before any is applied."""
        return self._request("POST", "/job-queue", json={"updates": [dict(u) for u in updates]})

    def list_resource_pools(self) -> list[Json]:
        return list(self._request("GET", "/resource-pools").get("resource_pools", []))

    def mint_agent_credential(self, agent_id: str) -> Json:
        """`{"agent_id", "credential"}`: what an agent started by hand presents as that agent."""
        return self._request("POST", f"/agents/{quote(agent_id, safe='')}/credential")

    def set_agent_enabled(self, agent_id: str, enabled: bool, *, drain: bool = False) -> Json:
        """`{"agent", "moved", "remaining"}`: the agent after, the runs told to move off it, those left."""
        path = f"/agents/{quote(agent_id, safe='')}/{'enable' if enabled else 'disable'}"
        return self._request("POST", path, json=None if enabled else {"drain": drain})

    def list_agents(self) -> list[Json]:
        return list(self._request("GET", "/agents").get("agents", []))

    def list_slots(self) -> list[Json]:
        return list(self._request("GET", "/slots").get("slots", []))

    def get_experiment(self, experiment_id: int) -> Json:
        return self._request(
            "GET", f"/experiments/{experiment_id}", not_found=_experiment_not_found(experiment_id)
        )

    def activate_experiment(self, experiment_id: int) -> Json:
        return self._request(
            "POST", f"/experiments/{experiment_id}/activate", not_found=_experiment_not_found(experiment_id)
        )

    def pause_experiment(self, experiment_id: int) -> Json:
        return self._stop(f"/experiments/{experiment_id}/pause", f"experiment {experiment_id}")

    def cancel_experiment(self, experiment_id: int) -> Json:
        return self._stop(f"/experiments/{experiment_id}/cancel", f"experiment {experiment_id}")

    def kill_experiment(self, experiment_id: int) -> Json:
        return self._stop(f"/experiments/{experiment_id}/kill", f"experiment {experiment_id}")

    def kill_trial(self, trial_id: int) -> Json:
        return self._stop(f"/trials/{trial_id}/kill", f"trial {trial_id}")

    def _stop(self, path: str, what: str) -> Json:
        lister = "`det experiment list`" if what.startswith("experiment") else "`det experiment describe`"
        return self._request("POST", path, not_found=f"{what} does not exist; {lister} shows the ids")

    def edit_experiment(self, experiment_id: int, change: Mapping[str, Any]) -> Json:
        """`{"experiment"}` after changing its name, description, labels or max_slots (`PATCH`)."""
        path = f"/experiments/{experiment_id}"
        return self._request("PATCH", path, json=dict(change), not_found=_experiment_not_found(experiment_id))

    def archive_experiment(self, experiment_id: int) -> Json:
        return self._experiment_action(experiment_id, "archive")

    def unarchive_experiment(self, experiment_id: int) -> Json:
        return self._experiment_action(experiment_id, "unarchive")

    def experiment_dashboard(self, experiment_id: int) -> Json:  # {"name", "url", "trials"}
        return self._experiment_action(experiment_id, "dashboard")

    def _experiment_action(self, experiment_id: int, action: str) -> Json:
        return self._request(
            "POST",
            f"/experiments/{experiment_id}/{action}",
            not_found=f"experiment {experiment_id} does not exist; `det experiment list --all` shows the ids",
        )

    def list_trials(self, experiment_id: int) -> list[Json]:
        answer = self._request(
            "GET", f"/experiments/{experiment_id}/trials", not_found=_experiment_not_found(experiment_id)
        )
        return list(answer.get("trials", []))

    def list_checkpoints(self, experiment_id: int, best: int | None = None) -> Json:
        """`{"searcher_metric", "smaller_is_better", "checkpoints"}`: all by report time, or the best N."""
        return self._request(
            "GET",
            f"/experiments/{experiment_id}/checkpoints",
            params=_params(best=best),
            not_found=_experiment_not_found(experiment_id),
        )

    def delete_experiment(self, experiment_id: int) -> Json:
        return self._request(
            "DELETE", f"/experiments/{experiment_id}", not_found=_experiment_not_found(experiment_id)
        )

    # --- checkpoints -------------------------------------------------------------------------

    def get_checkpoint(self, uuid: str) -> Json:
        return self._request("GET", f"/checkpoints/{uuid}", not_found=_checkpoint_not_found(uuid))

    def delete_checkpoints(self, uuids: Sequence[str]) -> Json:
        """`{"deleted", "already_deleted"}`; a 404 names the unknown uuid."""
        return self._request("POST", "/checkpoint-deletions", json={"uuids": list(uuids)}, not_found=None)

    def checkpoint_files(self, uuid: str) -> Json:
        """`{"checkpoint", "urls": {path: presigned GET URL}}`."""
        return self._request("GET", f"/checkpoints/{uuid}/files", not_found=_checkpoint_not_found(uuid))

    # --- trials ------------------------------------------------------------------------------

    def get_trial(self, trial_id: int) -> Json:
        return self._request("GET", f"/trials/{trial_id}", not_found=_trial_not_found(trial_id))

    def trial_metrics(self, trial_id: int, group: str) -> list[Json]:
        answer = self._request(
            "GET",
            f"/trials/{trial_id}/metrics",
            params={"group": group},
            not_found=_trial_not_found(trial_id),
        )
        return list(answer.get("metrics", []))

    def trial_metric_groups(self, trial_id: int) -> list[str]:
        """The groups the trial reported metrics under (training, validation, then custom ones by name)."""
        answer = self._request(
            "GET", f"/trials/{trial_id}/metric-groups", not_found=_trial_not_found(trial_id)
        )
        return [str(g) for g in answer.get("groups", [])]

    def trial_logs(
        self,
        trial_id: int,
        *,
        limit: int | None = None,
        next_token: str | None = None,
        tail: int | None = None,
        rank: int | None = None,
        level: str | None = None,
    ) -> Json:
        params = _params(limit=limit, next_token=next_token, tail=tail, rank=rank, level=level)
        return self._request(
            "GET", f"/trials/{trial_id}/logs", params=params, not_found=_trial_not_found(trial_id)
        )

    # --- misc --------------------------------------------------------------------------------

    def health(self) -> Json:
        return self._request("GET", "/health")

    def info(self) -> Json:
        return self._request("GET", "/info")

    # --- plumbing ----------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int] | None = None,
        json: Any = None,
        not_found: str | None = None,
    ) -> Json:
        try:
            response = self._http.request(method, path, params=params, json=json)
        except httpx.ConnectError as e:
            raise ConnectionFailedError(
                f"cannot reach the Stratus API at {self.master_url}; "
                "start it with `det deploy local up` or set DET_MASTER"
            ) from e
        except httpx.TimeoutException as e:
            raise ConnectionFailedError(
                f"the Stratus API at {self.master_url} did not answer {method} {path} in time; "
                "check that it is healthy (`det deploy local status`) and retry"
            ) from e
        except httpx.TransportError as e:
            raise ConnectionFailedError(
                f"cannot talk to the Stratus API at {self.master_url} ({e or type(e).__name__}); "
                "check DET_MASTER and that the API is up"
            ) from e
        if response.status_code >= 400:
            raise self._error(response, method, path, not_found)
        try:
            answer = response.json()
        except ValueError as e:
            raise ApiError(
                f"the Stratus API at {self.master_url} answered {method} {path} with a body that is not "
                "JSON; check that DET_MASTER points at a Stratus API",
                status=response.status_code,
            ) from e
        if not isinstance(answer, dict):
            raise ApiError(
                f"the Stratus API answered {method} {path} with {type(answer).__name__}, not an object; "
                "check that the CLI and the API versions match",
                status=response.status_code,
            )
        return answer

    def _error(self, response: httpx.Response, method: str, path: str, not_found: str | None) -> ApiError:
        status = response.status_code
        try:
            decoded = response.json()
        except ValueError:
            decoded = None
        body = ErrorBody.parse(status, "", decoded)
        code = body.code
        # Only our error body's own message is shown as is; anything else gets the CLI's sentence below.
        message = body.message.strip() if isinstance(decoded, dict) and decoded.get("message") else ""
        problems = [dict(p) for p in body.problems]
        if status == 404:
            # The CLI knows which id the user typed: say it, whatever the API's wording.
            return NotFoundError(
                not_found
                or message
                or f"{method} {path} is not a route of the Stratus API at "
                f"{self.master_url}; check that the CLI and the API versions match",
                status=status,
                code=code or "NotFound",
                problems=problems,
            )
        if status == 403 and message == "Missing Authentication Token":
            # API Gateway's (and Chalice's local server's) answer for a path with no route: the URL is
            # wrong, not the credentials, unless the API is of another version (a route it lacks).
            if skew := self._skew():
                return ApiError(
                    f"the Stratus API at {self.master_url} has no route {method} {path}: {skew}",
                    status=status,
                    code="VersionSkew",
                )
            return ApiError(
                f"{self.master_url} has no route {method} {path} (it answered 'Missing Authentication "
                "Token'), so it is not the Stratus API's URL; set DET_MASTER (or -m) to the URL that "
                "`det deploy local up` printed (http://127.0.0.1:PORT, nothing after the port) or the "
                "ApiUrl of `det deploy aws up` (https://ID.execute-api.REGION.amazonaws.com/api)",
                status=status,
                code=code or "NoSuchRoute",
            )
        # A field the API does not know: an API older than this CLI, most likely.
        unknown_field = status == 400 and any(p.get("message") == _UNKNOWN_FIELD for p in problems)
        if unknown_field and (skew := self._skew()):
            message = f"{skew}; {message}"  # first: `report_error` keeps a message's head before its problems
        if not message:
            reason = response.reason_phrase or "error"
            message = (
                f"the Stratus API at {self.master_url} answered {method} {path} with HTTP {status} "
                f"{reason}; retry, or look at the API's logs"
            )
        return ApiError(message, status=status, code=code, problems=problems)

    def _skew(self) -> str:
        """How the API's version (`GET /info`) stands against this CLI's, as one sentence with the fix;
        "" when they are the same or the API cannot say. Asked only after an answer that a version
        mismatch explains (a route or a field the API does not know)."""
        try:
            response = self._http.get("/info")
            info = response.json()
        except (httpx.HTTPError, ValueError):
            return ""
        if response.status_code >= 300 or not isinstance(info, dict):
            return ""
        comparison = compare(
            Side.CLI,
            VERSION,
            api_version=str(info.get("version") or ""),
            oldest=str(info.get("oldest_client_version") or ""),
        )
        return "" if comparison.standing in (Standing.SAME, Standing.UNKNOWN) else comparison.message


#: pydantic's problem for a body field the API's model does not have.
_UNKNOWN_FIELD = "Extra inputs are not permitted"


def _params(**values: str | int | None) -> dict[str, str | int]:
    return {k: v for k, v in values.items() if v is not None}


def _experiment_not_found(experiment_id: int) -> str:
    return f"experiment {experiment_id} does not exist; `det experiment list --all` shows the ids"


def _checkpoint_not_found(uuid: str) -> str:
    return f"checkpoint {uuid} does not exist; `det experiment list-checkpoints ID` shows the uuids"


def _trial_not_found(trial_id: int) -> str:
    return f"trial {trial_id} does not exist; `det experiment describe EXPERIMENT_ID` lists the trial ids"
