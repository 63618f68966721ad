"""Against moto: a run's usage recorded at its exit and shown by the API's views; and the DynamoDB
requests of one report batch, one trial heartbeat and one agent heartbeat counted (moto's request counts,
`infra.local.moto_compat`), as `bench/control_plane_cost.py` prices them."""

from __future__ import annotations

from collections import Counter

import httpx
import pytest

from chalicelib.api import views
from chalicelib.services import runs, trial_reports
from infra.local.moto_compat import COUNTS_PATH

pytestmark = pytest.mark.aws

WRITES = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
READS = {"GetItem", "Query", "Scan", "BatchGetItem"}


def dynamo(moto_url: str, stack: str, *, reset: bool = False) -> Counter[str]:
    """The DynamoDB requests to `stack`'s tables since the last reset, by kind and table (`write trials`):
    the moto server is the worker's, and another test's stack may still be at work on it (a Step Functions
    execution moto runs in a thread of its own)."""
    answer = (httpx.delete if reset else httpx.get)(moto_url + COUNTS_PATH, timeout=10).raise_for_status()
    seen: Counter[str] = Counter()
    for row in answer.json():
        if row["service"] == "dynamodb by stack table":
            op, _, table = row["operation"].partition(" ")
            prefix, _, name = table.rpartition("-")
            if prefix == stack:
                kind = "write" if op in WRITES else "read" if op in READS else op
                seen[f"{kind} {name}"] += row["count"]
    return seen


def test_a_runs_usage_is_recorded_at_its_exit_once_and_shown(stack):
    p = stack.ports
    experiment = stack.submit_experiment()
    spec = stack.launch_on_agent()
    instance = {"type": "g5.xlarge", "spot": False, "gpus": 1, "slots": 1}
    runs.started(p, "agent-1", spec["run_id"], pid=123, instance=instance)
    runs.exited(p, "agent-1", spec["run_id"], 0, "exited with code 0")
    runs.exited(p, "agent-1", spec["run_id"], 0, "exited with code 0")  # a repeated report
    trial = p.trials.get(spec["trial_id"])
    assert list(trial.usage) == [spec["run_id"]]
    cost = views.trial(p, trial).cost
    assert cost is not None
    assert (cost.total.runs, cost.by_instance[0].instance_type) == (1, "g5.xlarge")
    assert cost.total.priced and cost.total.usd >= 0
    total = views.experiment_cost(p.trials.for_experiment(experiment.id))
    assert total is not None and total.total.runs == 1


def test_requests_per_report_and_heartbeat(stack, moto_url):
    """What the design prices (bench/results/control_plane_cost.md): a report batch of training metrics
    and progress is one row per metric report (the trial's data), two trial writes and, when the trial's
    share passed a whole percent, its experiment's progress; a trial's
    heartbeat reads and writes nothing but its trial; an agent's heartbeat writes one agent record."""
    p = stack.ports
    stack.submit_experiment()
    spec = stack.launch_on_agent()
    runs.started(p, "agent-1", spec["run_id"], pid=123)
    run = p.runs.get(spec["run_id"])
    batch = [trial_reports.MetricsReport("training", n, {"loss": 1 / n}) for n in (100, 200, 300)]
    dynamo(moto_url, stack.names.stack, reset=True)
    trial_reports.report_batch(p, run, [*batch, trial_reports.ProgressReport(0.3)])
    report = dynamo(moto_url, stack.names.stack)
    assert report["write metrics"] == 3  # one row per metric report: what the trial chose to report
    assert report["write trials"] <= 2
    # Its experiment's progress, raised when the trial's share passed a whole percent (at most 100 times
    # a trial, `chalicelib.services.progress`): once for the batch.
    assert report.get("write experiments", 0) == 1
    assert sum(n for key, n in report.items() if key.startswith("write")) <= 6

    dynamo(moto_url, stack.names.stack, reset=True)
    trial_reports.heartbeat(p, run)
    beat = dynamo(moto_url, stack.names.stack)
    assert sum(n for key, n in beat.items() if key.startswith("write")) == 0
    assert sum(beat.values()) <= 1

    dynamo(moto_url, stack.names.stack, reset=True)
    runs.heartbeat(p, "agent-1", "default", 1, [spec["run_id"]])
    agent = dynamo(moto_url, stack.names.stack)
    assert sum(n for key, n in agent.items() if key.startswith("write")) <= 1
    assert sum(n for key, n in agent.items() if key.startswith("read")) <= 2
