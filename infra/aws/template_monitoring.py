"""Monitoring in the stack's template: the alarms, the stack's dashboard, and the log groups of every
Lambda and of the state machine with a retention (`add_monitoring`, applied to the rendered template).

- **Alarms**, all notifying the `AlarmTopic` (SNS; `AlarmEmail` subscribes an address): each
  dead-letter queue not empty; the state machine's failed executions (a trial that fails with no
  restarts left fails its execution too); each Lambda's errors and throttles; a pool whose queue's
  oldest request read by a pass has waited longer than `QueueWaitAlarmSeconds`, and a trial without a
  heartbeat (runs ended because their agents went silent: `SilentRuns`), both on the metrics'
  dimension-less twins (the worst pool), so the template needs no alarm per pool. Missing data is not a
  breach (an idle stack reports nothing).
- **The stack's dashboard** (`<stack>`): per pool queue depth, pending/used/idle slots, instances,
  preemptions, restarts and errors (searched over the pool dimension, so every pool shows), the
  dead-letter queues, failed executions, and the Lambdas' errors and throttles. Its body is one
  `Fn::Sub` string, so the region and the stack's name resolve at deploy time.
- **Log groups**: every `/aws/lambda/<function>` group (declared with its function,
  `infra/aws/template_app.py`) and the trial logs keep `LogRetentionDays` (30 by default; trial logs keep
  90 unless changed); the state machine logs its errors (`Level: ERROR`, no execution data: ALL would log
  every transition, several per trial-minute) to `/aws/vendedlogs/states/<stack>-trial-run`.

Metric names and dimensions are `chalicelib.domain.telemetry`'s.
"""

from __future__ import annotations

import json
import re
from typing import Any

from chalicelib.domain import telemetry as t

NAMESPACE = "Stratus/${AWS::StackName}"
#: Seconds per alarm evaluation period, and per dashboard point.
PERIOD_S = 300
STATE_MACHINE = "TrialRunStateMachine"

PARAMETERS: dict[str, Any] = {
    "LogRetentionDays": {
        "Type": "Number",
        "Default": 30,
        "AllowedValues": [1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 3653],
        "Description": "Days the control plane's and the state machine's logs are kept",
    },
    "AlarmEmail": {
        "Type": "String",
        "Default": "",
        "Description": "An address the alarms are sent to (empty: subscribe to the AlarmTopic yourself)",
    },
    "QueueWaitAlarmSeconds": {
        "Type": "Number",
        "Default": 3600,
        "MinValue": 60,
        "Description": "Alarm when the oldest request a scheduling pass reads has waited longer",
    },
}
CONDITIONS: dict[str, Any] = {"HasAlarmEmail": {"Fn::Not": [{"Fn::Equals": [{"Ref": "AlarmEmail"}, ""]}]}}


def _sub(text: str) -> dict[str, str]:
    return {"Fn::Sub": text}


def _logical(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", name) if part)


def _alarm(
    description: str,
    namespace: Any,
    metric: str,
    dimensions: list[dict[str, Any]],
    *,
    statistic: str = "Sum",
    threshold: Any = 1,
    condition: str | None = None,
) -> dict[str, Any]:
    alarm: dict[str, Any] = {
        "Type": "AWS::CloudWatch::Alarm",
        "Properties": {
            "AlarmDescription": description,
            "Namespace": namespace,
            "MetricName": metric,
            "Dimensions": dimensions,
            "Statistic": statistic,
            "Period": PERIOD_S,
            "EvaluationPeriods": 1,
            "Threshold": threshold,
            "ComparisonOperator": "GreaterThanOrEqualToThreshold",
            "TreatMissingData": "notBreaching",
            "AlarmActions": [{"Ref": "AlarmTopic"}],
            "OKActions": [{"Ref": "AlarmTopic"}],
        },
    }
    if condition:
        alarm["Condition"] = condition
    return alarm


def _alarms(resources: dict[str, Any]) -> dict[str, Any]:
    alarms: dict[str, Any] = {}
    for logical, resource in resources.items():
        if resource["Type"] == "AWS::SQS::Queue" and logical.endswith("Dlq"):
            alarms[f"{logical}NotEmptyAlarm"] = _alarm(
                f"Messages in the dead-letter queue {logical}: a handler failed them 5 times",
                "AWS/SQS",
                "ApproximateNumberOfMessagesVisible",
                [{"Name": "QueueName", "Value": {"Fn::GetAtt": [logical, "QueueName"]}}],
                statistic="Maximum",
            )
        elif resource["Type"] == "AWS::Lambda::Function":
            name = resource["Properties"]["FunctionName"]
            for metric in ("Errors", "Throttles"):
                alarms[f"{logical}{metric}Alarm"] = _alarm(
                    f"Lambda {logical}: {metric.lower()}",
                    "AWS/Lambda",
                    metric,
                    [{"Name": "FunctionName", "Value": name}],
                    condition=resource.get("Condition"),
                )
    alarms["FailedExecutionsAlarm"] = _alarm(
        "Trial-run executions failed (a state's error, or a trial that failed with no restarts left)",
        "AWS/States",
        "ExecutionsFailed",
        [{"Name": "StateMachineArn", "Value": {"Ref": STATE_MACHINE}}],
    )
    # Stack-wide (the metrics' dimension-less twins: the worst pool), so a pool added later is watched too.
    alarms["QueueWaitAlarm"] = _alarm(
        "A pool's queued trial has waited longer than QueueWaitAlarmSeconds (the dashboard shows which pool)",
        _sub(NAMESPACE),
        t.OLDEST_WAIT,
        [],
        statistic="Maximum",
        threshold={"Ref": "QueueWaitAlarmSeconds"},
    )
    alarms["SilentTrialsAlarm"] = _alarm(
        "A running trial's agent stopped heartbeating: its run was ended as lost (the dashboard shows the pool)",
        _sub(NAMESPACE),
        t.SILENT_RUNS,
        [],
    )
    return alarms


def _graph(title: str, metrics: list[Any], x: int, y: int, stat: str = "Maximum") -> dict[str, Any]:
    return {
        "type": "metric",
        "x": x,
        "y": y,
        "width": 8,
        "height": 6,
        "properties": {
            "title": title,
            "region": "${AWS::Region}",
            "view": "timeSeries",
            "stat": stat,
            "period": 60,
            "metrics": metrics,
        },
    }


def _search(metric: str, stat: str) -> list[dict[str, Any]]:
    query = f"SEARCH('{{{NAMESPACE},pool}} MetricName=\"{metric}\"', '{stat}', 60)"
    return [{"expression": query, "id": metric[:1].lower() + metric[1:], "label": ""}]


def stack_dashboard_body(resources: dict[str, Any]) -> str:
    """The stack dashboard's body: JSON with `${AWS::Region}` and `${AWS::StackName}` left for `Fn::Sub`."""
    per_pool = [
        (t.QUEUE_DEPTH, "Maximum"),
        (t.PENDING_SLOTS, "Maximum"),
        (t.OLDEST_WAIT, "Maximum"),
        (t.SLOTS_USED, "Maximum"),
        (t.SLOTS_IDLE, "Maximum"),
        (t.INSTANCES, "Maximum"),
        (t.PREEMPTIONS, "Sum"),
        (t.RESTARTS, "Sum"),
        (t.ERRORS, "Sum"),
    ]
    widgets = [
        _graph(f"{name} by pool", [_search(name, stat)], 8 * (i % 3), 6 * (i // 3), stat)
        for i, (name, stat) in enumerate(per_pool)
    ]
    dlqs = sorted(k for k, r in resources.items() if r["Type"] == "AWS::SQS::Queue" and k.endswith("Dlq"))
    queue_names = {k: resources[k]["Properties"]["QueueName"]["Fn::Sub"] for k in dlqs}
    lambdas = sorted(k for k, r in resources.items() if r["Type"] == "AWS::Lambda::Function")
    names = {k: resources[k]["Properties"]["FunctionName"]["Fn::Sub"] for k in lambdas}
    arn = "arn:${AWS::Partition}:states:${AWS::Region}:${AWS::AccountId}:stateMachine:${AWS::StackName}-trial-run"
    y = 18
    widgets += [
        _graph(
            "Dead-letter queues (messages)",
            [["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", queue_names[k]] for k in dlqs],
            0,
            y,
        ),
        _graph(
            "Trial-run executions failed",
            [["AWS/States", "ExecutionsFailed", "StateMachineArn", arn]],
            8,
            y,
            "Sum",
        ),
        _graph(
            "Lambda errors and throttles",
            [["AWS/Lambda", m, "FunctionName", names[k]] for k in lambdas for m in ("Errors", "Throttles")],
            16,
            y,
            "Sum",
        ),
    ]
    return json.dumps({"start": "-PT6H", "widgets": widgets}, sort_keys=True)


def add_monitoring(template: dict[str, Any]) -> None:
    """Add the alarms, the topic, the dashboard and the state machine's logging to a rendered template,
    and give every Lambda's log group the `LogRetentionDays` retention (see the module docstring)."""
    resources: dict[str, Any] = template["Resources"]
    for resource in resources.values():
        name = (
            resource["Properties"].get("LogGroupName") if resource["Type"] == "AWS::Logs::LogGroup" else None
        )
        if isinstance(name, dict) and str(name.get("Fn::Sub", "")).startswith("/aws/lambda/"):
            resource["Properties"]["RetentionInDays"] = {"Ref": "LogRetentionDays"}
    added: dict[str, Any] = {
        "AlarmTopic": {
            "Type": "AWS::SNS::Topic",
            # Not encrypted with AWS's managed key: CloudWatch alarms cannot publish to such a topic.
            "Properties": {"TopicName": _sub("${AWS::StackName}-alarms")},
        },
        "AlarmEmailSubscription": {
            "Type": "AWS::SNS::Subscription",
            "Condition": "HasAlarmEmail",
            "Properties": {
                "TopicArn": {"Ref": "AlarmTopic"},
                "Protocol": "email",
                "Endpoint": {"Ref": "AlarmEmail"},
            },
        },
        "AlarmTopicPolicy": {
            "Type": "AWS::SNS::TopicPolicy",
            "Properties": {
                "Topics": [{"Ref": "AlarmTopic"}],
                "PolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "cloudwatch.amazonaws.com"},
                            "Action": "sns:Publish",
                            "Resource": {"Ref": "AlarmTopic"},
                            "Condition": {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}},
                        }
                    ],
                },
            },
        },
        "StackDashboard": {
            "Type": "AWS::CloudWatch::Dashboard",
            "Properties": {
                "DashboardName": _sub("${AWS::StackName}"),
                "DashboardBody": _sub(stack_dashboard_body(resources)),
            },
        },
        "StatesLogGroup": {
            "Type": "AWS::Logs::LogGroup",
            "Properties": {
                "LogGroupName": _sub("/aws/vendedlogs/states/${AWS::StackName}-trial-run"),
                "RetentionInDays": {"Ref": "LogRetentionDays"},
            },
        },
        # Step Functions delivers logs through CloudWatch Logs' log delivery, whose actions take no
        # resource (AWS's documented policy for a state machine's logging).
        "StatesLoggingPolicy": {
            "Type": "AWS::IAM::Policy",
            "Properties": {
                "PolicyName": "trial-run-logging",
                "Roles": [{"Ref": "StatesRole"}],
                "PolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Action": [
                                "logs:CreateLogDelivery",
                                "logs:GetLogDelivery",
                                "logs:UpdateLogDelivery",
                                "logs:DeleteLogDelivery",
                                "logs:ListLogDeliveries",
                                "logs:PutResourcePolicy",
                                "logs:DescribeResourcePolicies",
                                "logs:DescribeLogGroups",
                            ],
                            "Resource": "*",
                        }
                    ],
                },
            },
        },
    }
    machine = resources[STATE_MACHINE]
    machine["DependsOn"] = sorted({*machine.get("DependsOn", []), "StatesLoggingPolicy"})
    machine["Properties"]["LoggingConfiguration"] = {
        "Level": "ERROR",
        "IncludeExecutionData": False,
        "Destinations": [
            {"CloudWatchLogsLogGroup": {"LogGroupArn": {"Fn::GetAtt": ["StatesLogGroup", "Arn"]}}}
        ],
    }
    added.update(_alarms(resources))
    resources.update(added)
    template["Parameters"].update(PARAMETERS)
    template["Conditions"].update(CONDITIONS)
    template["Outputs"]["AlarmTopicArn"] = {"Value": {"Ref": "AlarmTopic"}}
    template["Outputs"]["DashboardUrl"] = {
        "Value": _sub(
            "https://${AWS::Region}.console.aws.amazon.com/cloudwatch/home?region=${AWS::Region}"
            "#dashboards/dashboard/${AWS::StackName}"
        )
    }
