"""`PUT /trials/{id}/adaptdl/hints`: the hints stratus.launchers.adaptdl forwards for its trial, over real HTTP to
the Chalice app on a moto stack with a live run (the `api` fixture of tests/aws/conftest.py). Stored on
the trial (`GET /trials/{id}` shows them), a repeat stores nothing new, a bad body is a 400 naming the
field, and only the trial's own run token may send them."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.aws


def _put(api, body: object, credential: str = "run", trial_id: int | None = None) -> tuple[int, dict]:
    path = f"/trials/{trial_id or api.trial_id}/adaptdl/hints"
    answer = api.call("PUT", path, credential, json.dumps(body).encode())
    return answer.status_code, answer.json()


def _elastic(api) -> dict | None:
    return api.http.get(f"/trials/{api.trial_id}").json()["trial"]["elastic"]


def test_hints_are_stored_on_the_trial_and_a_repeat_stores_nothing_new(api, adaptdl_hints):
    status, answer = _put(api, adaptdl_hints)

    assert status == 200, answer
    assert answer["hints"] == adaptdl_hints and answer["hints_at"]
    assert _elastic(api) == answer
    assert _put(api, adaptdl_hints) == (200, answer)  # the proxy retries; AdaptDL re-sends every 30 s
    assert _elastic(api) == answer


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ({"localBszBounds": [128, 16]}, "hints localBszBounds=[128, 16] has min > max"),
        ({"perfParams": {"alpha_c": 1.0}}, "hints perfParams="),
        ({"initBatchSize": "32"}, "invalid request body: initBatchSize"),
        ({"weather": "fine"}, "invalid request body: weather"),
    ],
)
def test_bad_hints_are_a_400_naming_the_field_and_change_nothing(api, bad, words, adaptdl_hints):
    before = _elastic(api)

    status, answer = _put(api, {**adaptdl_hints, **bad})

    assert (status, answer["error"]) == (400, "BadRequest")
    assert words in answer["message"]
    assert _elastic(api) == before


def test_only_the_trials_own_run_token_may_send_its_hints(api, adaptdl_hints):
    before = _elastic(api)

    assert _put(api, {**adaptdl_hints, "maxProfiledReplicas": 7}, "other_run")[0] == 403
    assert _put(api, {**adaptdl_hints, "maxProfiledReplicas": 7}, "none")[0] == 401
    assert _put(api, {**adaptdl_hints, "maxProfiledReplicas": 7}, "agent")[0] == 401
    dead_trial, dead_token = api.dead_run
    answer = api.http.put(
        f"/trials/{dead_trial}/adaptdl/hints", json=adaptdl_hints, headers={"Authorization": dead_token}
    )
    assert answer.status_code == 403
    assert _elastic(api) == before
