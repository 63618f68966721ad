"""Monitoring on the local stack: an adaptive ASHA experiment of the digits example runs to its end (the
`digits_adaptive` run, which test_experiments.py looks at too);
`det experiment plot` draws every trial's curves into a PNG, its metrics are in the stack's CloudWatch
namespace (moto), and the API's dashboard route (what `det experiment dashboard` calls on a stack in AWS)
creates the experiment's dashboard there. `det experiment dashboard` itself, on the local stack, creates
nothing (a console URL would lead nowhere: moto has no console) and names `det experiment plot`."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest

from det._client import ApiClient

pytestmark = pytest.mark.e2e


def test_an_asha_experiments_curves_are_plotted_charted_and_on_a_dashboard(
    det, local_stack, digits_adaptive, tmp_path: Path
):
    _, experiment_id = digits_adaptive  # `det experiment create ... -f` exited 0 (the fixture checks)
    trials = det.describe_experiment(experiment_id)["trials"]
    assert len(trials) == 6 and all(t["state"] == "COMPLETED" for t in trials)

    image = tmp_path / "asha.png"
    plotted = det("experiment", "plot", str(experiment_id), "-o", str(image))
    assert plotted.code == 0, plotted.err
    assert image.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert plotted.out.startswith(f"Wrote {image}: 6 trials, ")

    cloudwatch = boto3.client(
        "cloudwatch",
        endpoint_url=local_stack.moto_url,
        region_name="us-east-1",
        aws_access_key_id="stratus-local",
        aws_secret_access_key="stratus-local",
    )
    listed = cloudwatch.list_metrics(
        MetricName="validation.validation_accuracy",
        Dimensions=[{"Name": "experiment", "Value": str(experiment_id)}],
    )["Metrics"]
    charted = {d["Value"] for m in listed for d in m["Dimensions"] if d["Name"] == "trial"}
    assert charted == {str(t["id"]) for t in trials}
    assert {m["Namespace"] for m in listed} == {"Stratus/stratus"}

    name = f"stratus-experiment-{experiment_id}"
    shown = det("experiment", "dashboard", str(experiment_id))
    assert (shown.code, shown.out) == (1, ""), shown.err
    assert f"`det experiment plot {experiment_id}`" in shown.err
    assert name not in {d["DashboardName"] for d in cloudwatch.list_dashboards()["DashboardEntries"]}

    with ApiClient(local_stack.api_url) as client:
        answer = client.experiment_dashboard(experiment_id)
    assert answer["name"] == name and answer["url"].endswith(f"#dashboards/dashboard/{name}")
    body = json.loads(cloudwatch.get_dashboard(DashboardName=name)["DashboardBody"])
    titles = {w["properties"].get("title") for w in body["widgets"]}
    assert {f"Trial {t['id']}" for t in trials} <= titles
