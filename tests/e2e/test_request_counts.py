"""What one trial asks of AWS, counted on the local stack (the moto server counts every request by
service and operation, `infra.local.moto_compat`; the API's own requests are counted too): the requests it
makes once are what `bench/control_plane_cost.py` prices as a trial's fixed cost, so a change that adds a
Step Functions transition, an execution or an API round trip per trial shows here."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import boto3
import httpx
import pytest

from det.deploy.background import BackgroundStack
from infra.local.moto_compat import COUNTS_PATH

pytestmark = pytest.mark.e2e

SCRIPT = """
from stratus import harness

with harness.init() as core:
    for op in core.searcher.operations():
        for step in range(1, op.length + 1):
            core.train.report_training_metrics(steps_completed=step, metrics={"loss": 1.0 / step})
        core.train.report_validation_metrics(steps_completed=op.length, metrics={"accuracy": 0.5})
        with core.checkpoint.store_path({"steps_completed": op.length}) as (path, _):
            (path / "state.bin").write_bytes(b"0" * 1000)
        op.report_completed(0.5)
"""

CONFIG = """
name: counted
entrypoint: python3 counted.py
searcher: {name: single, metric: accuracy, smaller_is_better: false, max_length: 20}
max_restarts: 0
"""


def _counts(moto_url: str, *, reset: bool = False) -> Counter[tuple[str, str]]:
    answer = (httpx.delete if reset else httpx.get)(moto_url + COUNTS_PATH, timeout=10).raise_for_status()
    return Counter({(row["service"], row["operation"]): row["count"] for row in answer.json()})


def _transitions(moto_url: str, trial_id: int) -> list[str]:
    sfn = boto3.client(
        "stepfunctions",
        endpoint_url=moto_url,
        region_name="us-east-1",
        aws_access_key_id="stratus-local",
        aws_secret_access_key="stratus-local",
    )
    entered: list[str] = []
    for machine in sfn.list_state_machines()["stateMachines"]:
        for execution in sfn.list_executions(stateMachineArn=machine["stateMachineArn"])["executions"]:
            if f"trial-{trial_id}-" in execution["name"]:
                history = sfn.get_execution_history(executionArn=execution["executionArn"], maxResults=1000)
                entered += [e["stateEnteredEventDetails"]["name"] for e in history["events"] if e["type"].endswith("StateEntered")]  # fmt: skip
    return entered


def test_one_trial_asks_aws_for_what_the_design_prices_once(det_runner, tmp_path: Path):
    # A stack of its own: nothing but this trial (and the stack's sweeps and heartbeats) is counted.
    stack = BackgroundStack(tmp_path / "stack", slots=1)
    try:
        moto_url = stack.state["moto_url"]
        _counts(moto_url, reset=True)
        folder = tmp_path / "context"
        folder.mkdir()
        result, trial = det_runner(stack.state["api_url"]).follow_experiment(
            folder, CONFIG, {"counted.py": SCRIPT}
        )
        assert trial["state"] == "COMPLETED", result.out + result.err
        seen = _counts(moto_url)
        entered = _transitions(moto_url, trial["id"])
    finally:
        stack.stop()

    def api(suffix: str, method: str = "POST") -> int:
        return sum(
            n for (s, op), n in seen.items() if s == "api" and op.startswith(method) and op.endswith(suffix)
        )

    # One execution for the one run, driven through its slot request and its launch: a handful of
    # transitions (25 µUSD each), never a loop.
    assert seen[("stepfunctions", "StartExecution")] == 1
    assert 0 < len(entered) <= 12, entered
    assert len(entered) == len(set(entered)), f"a state entered twice: {entered}"
    # The trial's API round trips that happen once: created, started, exited, its searcher's work.
    assert api(" /experiments") == 2  # `det experiment create` validates the config, then creates
    assert seen[("stepfunctions", "SendTaskSuccess")] == 2  # the slots granted, the run's exit
    assert api("/started") == 1 and api("/exit") == 1
    assert api("/searcher/completed") == 1
    # Twenty training reports and a validation in a few batches (the report interval), not 21 requests.
    assert 1 <= api("/reports") < 21
    # Its one checkpoint: offered, uploaded and recorded once.
    assert api("/checkpoints/uploads") == 1 and api("/checkpoints") == 1
