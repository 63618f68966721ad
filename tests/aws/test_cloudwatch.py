"""CloudWatch on the moto stack, with real boto3: a trial's reports and a scheduling pass become metrics
in the stack's namespace (`PutMetricData`, as on the local stack), `POST /experiments/{id}/dashboard`
creates the experiment's dashboard, a graph per trial, and the adapter deletes a dashboard (none of that
name: no error)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import boto3
import pytest

from chalicelib.services import scheduler, telemetry

pytestmark = pytest.mark.aws


def _cloudwatch(moto_url: str):  # noqa: ANN202
    return boto3.client("cloudwatch", endpoint_url=moto_url, region_name="us-east-1")


def _dashboard(api) -> dict:
    answer = api.call("POST", f"/experiments/{api.experiment_id}/dashboard", "user")
    assert answer.status_code == 200, answer.text
    return answer.json()


def _values(cloudwatch, space: str, name: str, dimensions: dict[str, str], stat: str) -> list[float]:
    now = datetime.now(UTC)
    answer = cloudwatch.get_metric_data(
        MetricDataQueries=[
            {
                "Id": "q",
                "MetricStat": {
                    "Metric": {
                        "Namespace": space,
                        "MetricName": name,
                        "Dimensions": [{"Name": k, "Value": v} for k, v in dimensions.items()],
                    },
                    "Period": 3600,
                    "Stat": stat,
                },
            }
        ],
        StartTime=now - timedelta(hours=1),
        EndTime=now + timedelta(hours=1),
    )
    return list(answer["MetricDataResults"][0]["Values"])


def _statistic(cloudwatch, space: str, name: str, dimensions: dict[str, str], stat: str) -> list[float]:
    now = datetime.now(UTC)
    answer = cloudwatch.get_metric_statistics(
        Namespace=space,
        MetricName=name,
        Dimensions=[{"Name": k, "Value": v} for k, v in dimensions.items()],
        StartTime=now - timedelta(hours=1),
        EndTime=now + timedelta(hours=1),
        Period=3600,
        Statistics=[stat],
    )
    return [point[stat] for point in answer["Datapoints"]]


def test_a_trials_reports_become_metrics_of_the_stacks_namespace(api, moto_url):
    reports = [
        {"kind": "metrics", "group": "training", "steps_completed": 10, "metrics": {"loss": 0.9, "lr": 0.1}},
        {"kind": "metrics", "group": "training", "steps_completed": 20, "metrics": {"loss": 0.7, "lr": 0.1}},
        {"kind": "metrics", "group": "validation", "steps_completed": 20, "metrics": {"loss": 0.8}},
        {"kind": "metrics", "group": "inference", "steps_completed": 20, "metrics": {"latency": 3}},
    ]
    body = json.dumps({"reports": reports}).encode()
    answer = api.call("POST", f"/trials/{api.trial_id}/reports", "run", body)
    assert answer.status_code == 200, answer.text
    stack = _dashboard(api)["name"].rsplit("-experiment-", 1)[0]
    space = f"Stratus/{stack}"
    cloudwatch = _cloudwatch(moto_url)
    trial = {"experiment": str(api.experiment_id), "trial": str(api.trial_id)}
    listed = cloudwatch.list_metrics(
        Namespace=space, Dimensions=[{"Name": "trial", "Value": str(api.trial_id)}]
    )["Metrics"]
    names = {m["MetricName"] for m in listed if {d["Name"]: d["Value"] for d in m["Dimensions"]} == trial}
    assert {"training.loss", "training.lr", "validation.loss"} <= names
    assert not any(name.startswith("inference.") for name in names)  # custom groups are not charted
    assert _values(cloudwatch, space, "training.loss", trial, "SampleCount") == [2.0]
    assert _statistic(cloudwatch, space, "validation.loss", trial, "Maximum") == [0.8]


def test_the_dashboard_route_creates_and_updates_the_experiments_dashboard(api, moto_url):
    first = _dashboard(api)
    assert first["name"].endswith(f"-experiment-{api.experiment_id}")
    assert first["url"] == (
        "https://us-east-1.console.aws.amazon.com/cloudwatch/home?region=us-east-1"
        f"#dashboards/dashboard/{first['name']}"
    )
    trial_ids = [t["id"] for t in api.http.get(f"/experiments/{api.experiment_id}/trials").json()["trials"]]
    assert first["trials"] == len(trial_ids) >= 1
    cloudwatch = _cloudwatch(moto_url)
    body = json.loads(cloudwatch.get_dashboard(DashboardName=first["name"])["DashboardBody"])
    titles = [w["properties"].get("title") for w in body["widgets"]]
    assert [t for t in titles if t and t.startswith("Trial ")] == [f"Trial {t}" for t in sorted(trial_ids)]
    assert _dashboard(api) == first  # again: the same dashboard, updated
    names = [d["DashboardName"] for d in cloudwatch.list_dashboards()["DashboardEntries"]]
    assert names.count(first["name"]) == 1
    missing = api.call("POST", "/experiments/999999/dashboard", "user")
    assert missing.status_code == 404


def test_a_scheduling_pass_puts_its_pools_metrics(stack):
    p = stack.ports
    stack.submit_experiment()
    stack.launch_on_agent("agent-1")  # a 1-slot agent, its slot held by the trial's run
    scheduler.schedule_pool(p, "default")
    cloudwatch = stack.client("cloudwatch")
    space = f"Stratus/{stack.names.stack}"
    listed = {m["MetricName"] for m in cloudwatch.list_metrics(Namespace=space)["Metrics"]}
    assert {"QueueDepth", "SlotsUsed", "SlotsIdle", "Instances", "OldestWaitSeconds", "SilentRuns"} <= listed
    pool = {"pool": "default"}
    # Every pass since the agent came: the last held its one slot.
    assert _statistic(cloudwatch, space, "Instances", pool, "Maximum") == [1.0]
    assert _statistic(cloudwatch, space, "SlotsUsed", pool, "Maximum") == [1.0]
    assert _statistic(cloudwatch, space, "SlotsIdle", pool, "Minimum") == [0.0]


def test_a_dashboard_is_deleted_and_deleting_one_that_is_gone_is_no_error(stack):
    p = stack.ports
    experiment = stack.submit_experiment()
    name = telemetry.experiment_dashboard(p, experiment.id).name
    cloudwatch = stack.client("cloudwatch")

    def listed() -> list[str]:
        answer = cloudwatch.list_dashboards(DashboardNamePrefix=f"{stack.names.stack}-")
        return [d["DashboardName"] for d in answer["DashboardEntries"]]

    assert listed() == [name]
    p.telemetry.delete_dashboard(name)
    assert listed() == []
    p.telemetry.delete_dashboard(name)  # DeleteDashboards' ResourceNotFound: nothing to delete
    assert listed() == []
