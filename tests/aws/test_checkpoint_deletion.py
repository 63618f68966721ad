"""`det checkpoint delete` as a user runs it: the real CLI over real HTTP to the Chalice app on a moto stack
(`POST /checkpoint-deletions`). The stack's checkpoint is the latest of a running trial: refused, kept."""

from __future__ import annotations

import io
import os

import pytest

from det import cli
from det._runtime import Runtime

pytestmark = [
    pytest.mark.aws,
    pytest.mark.filterwarnings("ignore:IAMAuthorizer is not a supported in local mode"),
]


def _det(api, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    runtime = Runtime(environ={**os.environ, "DET_MASTER": api.url}, out=out, err=err, inp=io.StringIO())
    return cli.main(list(args), runtime=runtime), out.getvalue(), err.getvalue()


def test_a_running_trials_latest_checkpoint_is_refused_and_kept(api):
    code, _, err = _det(api, "checkpoint", "delete", api.checkpoint, "--yes")
    assert code == 1
    assert f"checkpoint {api.checkpoint} is the latest of trial {api.trial_id}" in err
    assert api.http.get(f"/checkpoints/{api.checkpoint}").json()["checkpoint"]["state"] == "COMPLETED"


def test_without_yes_and_without_a_terminal_it_asks_to_pass_yes_and_deletes_nothing(api):
    code, _, err = _det(api, "c", "rm", api.checkpoint)
    assert code == 2 and "pass --yes" in err
    unknown = "00000000-0000-4000-8000-000000000000"
    code, _, err = _det(api, "checkpoint", "delete", f"{unknown},{api.checkpoint}", "--yes")
    assert code != 0 and f"checkpoint {unknown} does not exist" in err  # said before anything is deleted
    assert api.http.get(f"/checkpoints/{api.checkpoint}").json()["checkpoint"]["state"] == "COMPLETED"
