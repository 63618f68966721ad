"""CloudWatch's side, without AWS: the cardinality bound of trial metrics, the EMF documents and
PutMetricData requests the sink writes (within CloudWatch's limits), an experiment's dashboard body,
and the template's alarms, dashboard and log groups."""

from __future__ import annotations

import json

import pytest

from chalicelib.aws.metrics import (
    EMF_MAX_METRICS,
    EMF_MAX_VALUES,
    PUT_MAX_VALUES,
    EmfMetrics,
    emf_documents,
    put_requests,
)
from chalicelib.domain.dashboards import MAX_TRIAL_WIDGETS, experiment_dashboard
from chalicelib.domain.telemetry import (
    MAX_NAMES_PER_GROUP,
    Datum,
    PoolPass,
    charted,
    pool_datums,
    trial_datums,
)
from infra.aws.template import template
from infra.aws.template_iam import api_policy
from stratus.contract.pools import PoolSpec

TRIAL = (("experiment", "3"), ("trial", "7"))


def test_a_report_charts_the_searcher_metric_then_the_first_scalars_by_name():
    metrics = {"b": 2, "a": 1.5, "loss": 0.3, "text": "x", "flag": True, "inf": float("inf"), 'q"uote': 1}
    metrics |= {f"z{i}": i for i in range(20)}
    assert charted(metrics, "loss") == [("loss", 0.3), ("a", 1.5), ("b", 2.0), ("z0", 0.0), ("z1", 1.0)]
    assert len(charted(metrics, None)) == MAX_NAMES_PER_GROUP
    assert charted({"acc": 1}, "loss") == [("acc", 1.0)]  # no searcher metric in this report


def test_only_training_and_validation_are_charted_and_the_searcher_metric_only_for_validation():
    data = trial_datums(
        3,
        7,
        [("training", {"loss": 1.0, "x": 2}), ("validation", {"y": 4, "loss": 0.5}), ("custom", {"c": 1})],
        "y",
    )
    assert [(d.name, d.value) for d in data] == [
        ("training.loss", 1.0),
        ("training.x", 2.0),
        ("validation.y", 4.0),
        ("validation.loss", 0.5),
    ]
    assert {d.dimensions for d in data} == {TRIAL}


def test_pool_metrics_of_a_known_pass():
    seen = PoolPass(
        "gpu", queued=3, pending_slots=6, capacity=8, used=5, hosts=3, preempted=1, silent=2, oldest_wait_s=42
    )
    values = {d.name: (d.value, d.unit) for d in pool_datums(seen)}
    assert values == {
        "QueueDepth": (3, "Count"),
        "PendingSlots": (6, "Count"),
        "SlotsUsed": (5, "Count"),
        "SlotsIdle": (3, "Count"),
        "Instances": (3, "Count"),
        "Preemptions": (1, "Count"),
        "SilentRuns": (2, "Count"),
        "OldestWaitSeconds": (42, "Seconds"),
    }
    stack_wide = [(d.name, d.value) for d in pool_datums(seen) if d.dimensions == ()]
    assert stack_wide == [("SilentRuns", 2), ("OldestWaitSeconds", 42)]  # for the stack's alarms
    assert {d.dimensions for d in pool_datums(seen)} == {(("pool", "gpu"),), ()}


def test_an_emf_document_declares_its_namespace_dimensions_and_metrics():
    data = [
        Datum("training.loss", 0.5, TRIAL),
        Datum("training.loss", 0.4, TRIAL),
        Datum("QueueDepth", 2, (("pool", "p"),), "Count"),
    ]
    first, second = emf_documents("Stratus/s", data, 1_700_000_000.5)
    assert first == {
        "_aws": {
            "Timestamp": 1_700_000_000_500,
            "CloudWatchMetrics": [
                {
                    "Namespace": "Stratus/s",
                    "Dimensions": [["experiment", "trial"]],
                    "Metrics": [{"Name": "training.loss", "Unit": "None"}],
                }
            ],
        },
        "experiment": "3",
        "trial": "7",
        "training.loss": [0.5, 0.4],
    }
    assert second["pool"] == "p" and second["QueueDepth"] == 2
    assert second["_aws"]["CloudWatchMetrics"][0]["Metrics"] == [{"Name": "QueueDepth", "Unit": "Count"}]


def test_emf_documents_keep_to_100_metrics_and_100_values_each():
    many_names = [Datum(f"m{i}", i, TRIAL) for i in range(250)]
    many_values = [Datum("loss", i, TRIAL) for i in range(250)]
    documents = emf_documents("Stratus/s", many_names + many_values, 0)
    for document in documents:
        metrics = document["_aws"]["CloudWatchMetrics"][0]["Metrics"]
        assert len(metrics) <= EMF_MAX_METRICS
        for metric in metrics:
            value = document[metric["Name"]]
            assert not isinstance(value, list) or len(value) <= EMF_MAX_VALUES
    written = [
        (m["Name"], v)
        for d in documents
        for m in d["_aws"]["CloudWatchMetrics"][0]["Metrics"]
        for v in (d[m["Name"]] if isinstance(d[m["Name"]], list) else [d[m["Name"]]])
    ]
    assert sorted(written) == sorted([(d.name, d.value) for d in many_names + many_values])
    with pytest.raises(ValueError, match="31 dimensions"):
        emf_documents("Stratus/s", [Datum("x", 1, tuple((f"d{i}", "v") for i in range(31)))], 0)


def test_emf_is_one_json_line_per_document():
    lines: list[str] = []
    EmfMetrics("s", write=lines.append).put([Datum("QueueDepth", 1, (("pool", "p"),))], 10)
    assert len(lines) == 1 and "\n" not in lines[0] and json.loads(lines[0])["QueueDepth"] == 1


def test_put_metric_data_goes_in_requests_of_at_most_1000_values():
    requests = put_requests("Stratus/s", [Datum("loss", i, TRIAL) for i in range(2500)], 0)
    assert [len(r["MetricData"]) for r in requests] == [PUT_MAX_VALUES, PUT_MAX_VALUES, 500]
    item = requests[0]["MetricData"][0]
    assert item["Dimensions"] == [{"Name": "experiment", "Value": "3"}, {"Name": "trial", "Value": "7"}]
    assert requests[0]["Namespace"] == "Stratus/s"


def test_an_experiments_dashboard_draws_each_trial_the_best_metric_and_the_slots():
    body = experiment_dashboard(
        stack="lab",
        region="eu-west-1",
        experiment_id=4,
        pool="gpu",
        trial_ids=[9, 8],
        searcher_metric="loss",
        smaller_is_better=True,
    )
    widgets = {w["properties"].get("title"): w for w in body["widgets"] if w["type"] == "metric"}
    assert list(widgets) == [
        "Best validation.loss",
        "validation.loss, every trial",
        "Slots of pool gpu",
        "Trial 8",
        "Trial 9",
    ]
    best = widgets["Best validation.loss"]["properties"]["metrics"]
    assert best[0][0]["expression"] == "MIN(every)"
    assert best[1][0]["expression"] == (
        "SEARCH('{Stratus/lab,experiment,trial} experiment=\"4\" MetricName=\"validation.loss\"', 'Minimum', 60)"
    )
    trial = widgets["Trial 8"]["properties"]
    assert trial["region"] == "eu-west-1"
    assert trial["metrics"][0][0]["expression"] == (
        "SEARCH('{Stratus/lab,experiment,trial} experiment=\"4\" trial=\"8\"', 'Average', 60)"
    )
    slots = widgets["Slots of pool gpu"]["properties"]["metrics"]
    assert [m[1] for m in slots] == ["SlotsUsed", "SlotsIdle", "PendingSlots"]
    many = experiment_dashboard(
        stack="lab",
        region="r",
        experiment_id=4,
        pool="p",
        trial_ids=range(1, 400),
        searcher_metric="acc",
        smaller_is_better=False,
    )
    assert len(many["widgets"]) == 4 + MAX_TRIAL_WIDGETS
    assert "MAX(every)" in json.dumps(many)


def test_the_template_alarms_on_dead_letters_failures_lambdas_stuck_queues_and_silent_trials():
    built = template([PoolSpec(name="default"), PoolSpec(name="gpu-spot")])
    resources = built["Resources"]
    alarms = {k: r["Properties"] for k, r in resources.items() if r["Type"] == "AWS::CloudWatch::Alarm"}
    dlqs = [k for k, r in resources.items() if r["Type"] == "AWS::SQS::Queue" and k.endswith("Dlq")]
    functions = [k for k, r in resources.items() if r["Type"] == "AWS::Lambda::Function"]
    assert dlqs and functions
    for dlq in dlqs:
        assert alarms[f"{dlq}NotEmptyAlarm"]["MetricName"] == "ApproximateNumberOfMessagesVisible"
    for function in functions:
        for metric in ("Errors", "Throttles"):
            assert alarms[f"{function}{metric}Alarm"]["Namespace"] == "AWS/Lambda"
            assert resources[f"{function}{metric}Alarm"]["Condition"] == "HasCode"
    assert alarms["FailedExecutionsAlarm"]["Dimensions"] == [
        {"Name": "StateMachineArn", "Value": {"Ref": "TrialRunStateMachine"}}
    ]
    wait = alarms["QueueWaitAlarm"]
    assert (wait["MetricName"], wait["Threshold"]) == ("OldestWaitSeconds", {"Ref": "QueueWaitAlarmSeconds"})
    assert wait["Namespace"] == {"Fn::Sub": "Stratus/${AWS::StackName}"}
    assert wait["Dimensions"] == [] and wait["Statistic"] == "Maximum"  # the worst pool, whichever
    assert alarms["SilentTrialsAlarm"]["MetricName"] == "SilentRuns"
    assert built["Resources"].keys() - template()["Resources"].keys() == set()  # none per pool
    assert all(a["AlarmActions"] == [{"Ref": "AlarmTopic"}] for a in alarms.values())
    assert resources["AlarmEmailSubscription"]["Condition"] == "HasAlarmEmail"
    assert built["Parameters"]["AlarmEmail"]["Default"] == ""


def test_the_template_has_the_stacks_dashboard_and_every_log_group_keeps_a_retention():
    built = template()
    resources = built["Resources"]
    dashboard = resources["StackDashboard"]["Properties"]
    body = json.loads(dashboard["DashboardBody"]["Fn::Sub"])
    titles = [w["properties"]["title"] for w in body["widgets"]]
    assert {
        "QueueDepth by pool",
        "SlotsUsed by pool",
        "Errors by pool",
        "Dead-letter queues (messages)",
    } <= set(titles)
    assert all(w["properties"]["region"] == "${AWS::Region}" for w in body["widgets"])
    groups = {k: r["Properties"] for k, r in resources.items() if r["Type"] == "AWS::Logs::LogGroup"}
    functions = [k for k, r in resources.items() if r["Type"] == "AWS::Lambda::Function"]
    assert all(f"{f}Logs" in groups for f in functions)
    assert all("RetentionInDays" in g for g in groups.values())
    assert all(groups[f"{f}Logs"]["RetentionInDays"] == {"Ref": "LogRetentionDays"} for f in functions)
    assert built["Parameters"]["LogRetentionDays"]["Default"] == 30
    machine = resources["TrialRunStateMachine"]
    logging = machine["Properties"]["LoggingConfiguration"]
    assert logging["Destinations"] == [
        {"CloudWatchLogsLogGroup": {"LogGroupArn": {"Fn::GetAtt": ["StatesLogGroup", "Arn"]}}}
    ]
    assert "StatesLoggingPolicy" in machine["DependsOn"]
    assert resources["StatesLoggingPolicy"]["Properties"]["Roles"] == [{"Ref": "StatesRole"}]
    # The one statement on every resource: log delivery's actions have no resource type in IAM.
    (statement,) = resources["StatesLoggingPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Resource"] == "*" and all(a.startswith("logs:") for a in statement["Action"])
    (dashboards,) = [s for s in api_policy()["Statement"] if s["Sid"] == "OwnDashboards"]
    assert dashboards["Resource"] == {
        "Fn::Sub": "arn:${AWS::Partition}:cloudwatch::${AWS::AccountId}:dashboard/${AWS::StackName}-*"
    }
