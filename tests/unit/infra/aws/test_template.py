"""The CloudFormation template: every declared resource is there, and IAM is least privilege."""

from __future__ import annotations

import json

from infra.aws.template import template
from infra.shape import TABLES


def _statements(role: dict) -> list[dict]:
    return [s for p in role["Properties"].get("Policies", []) for s in p["PolicyDocument"]["Statement"]]


def test_declares_every_table_queue_and_the_state_machine():
    resources = template()["Resources"]
    tables = [r for r in resources.values() if r["Type"] == "AWS::DynamoDB::Table"]
    assert len(tables) == len(TABLES)
    assert all(t["Properties"]["BillingMode"] == "PAY_PER_REQUEST" for t in tables)  # no cost when idle
    queues = [r for r in resources.values() if r["Type"] == "AWS::SQS::Queue"]
    assert len(queues) == 8  # four queues and their dead-letter queues
    definition = resources["TrialRunStateMachine"]["Properties"]["DefinitionString"]["Fn::Sub"]
    assert json.loads(definition)["StartAt"] == "Enqueue"


NO_RESOURCE_TYPE = {"pricing:GetProducts", "ec2:DescribeSpotPriceHistory"}


def test_no_wildcard_actions_or_resources():
    resources = template()["Resources"]
    for name in ("ApiRole", "StatesRole"):
        for statement in _statements(resources[name]):
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            assert all("*" not in a for a in actions), (name, statement)
            # The exceptions are actions with no resource type in IAM: task-token answers, and reading
            # AWS's prices (the Price List and the spot price history).
            if statement["Resource"] == "*":
                assert all(a.startswith("states:SendTask") or a in NO_RESOURCE_TYPE for a in actions), (
                    name,
                    statement,
                )


def test_every_arn_names_its_partition_so_the_stack_deploys_outside_aws_too():
    text = json.dumps(template())
    assert "arn:aws:" not in text
    definition = json.loads(
        template()["Resources"]["TrialRunStateMachine"]["Properties"]["DefinitionString"]["Fn::Sub"]
    )
    resources = {state["Resource"] for state in definition["States"].values() if state["Type"] == "Task"}
    assert resources and all(r.startswith("arn:${AWS::Partition}:states:::") for r in resources)


def test_a_recreated_stack_adopts_the_kept_bucket_and_tables():
    built = template()
    bucket = built["Resources"]["Bucket"]
    assert bucket["Condition"] == "MakeBucket" and bucket["DeletionPolicy"] == "Retain"
    assert bucket["Properties"]["BucketName"] == {"Ref": "BucketName"}
    assert built["Conditions"]["MakeBucket"] == {"Fn::Equals": [{"Ref": "CreateBucket"}, "true"]}
    tables = [r for r in built["Resources"].values() if r["Type"] == "AWS::DynamoDB::Table"]
    assert tables and all(t["DeletionPolicy"] == "Retain" and t["Condition"] == "MakeTables" for t in tables)
    assert built["Conditions"]["MakeTables"] == {"Fn::Equals": [{"Ref": "CreateTables"}, "true"]}
    # Nothing reaches a table through the (conditional) resource: by its name only.
    assert '"TrialsTable"' not in json.dumps(
        {k: v for k, v in built["Resources"].items() if "Table" not in k}
    )
    assert built["Outputs"]["BucketName"]["Value"] == {"Ref": "BucketName"}


def test_the_state_machine_and_agents_get_only_what_they_use():
    resources = template()["Resources"]
    states = _statements(resources["StatesRole"])
    assert {
        tuple(sorted([s["Action"]] if isinstance(s["Action"], str) else s["Action"])) for s in states
    } == {
        ("dynamodb:UpdateItem",),
        ("sqs:SendMessage",),
    }
    assert "Policies" not in resources["AgentRole"]["Properties"]  # agents talk to the API only


def test_s3_access_is_limited_to_the_stacks_prefixes():
    api = _statements(template()["Resources"]["ApiRole"])
    objects = next(s for s in api if s["Sid"] == "ContextsAndCheckpoints")
    prefixes = sorted(r["Fn::Sub"].rsplit("}/", 1)[1] for r in objects["Resource"])
    assert prefixes == ["checkpoints/*", "contexts/*", "submissions/*", "uploads/*"]
    # The jobs' credential objects: the API writes them, only the jobs' roles read and delete them.
    credentials = next(s for s in api if s["Sid"] == "JobCredentials")
    assert credentials["Action"] == "s3:PutObject"
    assert credentials["Resource"] == {"Fn::Sub": "arn:${AWS::Partition}:s3:::${BucketName}/credentials/*"}


def test_job_credentials_left_unread_expire_after_a_day():
    rules = template()["Resources"]["Bucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    assert rules == [
        {"Id": "ExpireJobCredentials", "Status": "Enabled", "Prefix": "credentials/", "ExpirationInDays": 1}
    ]


def test_a_sweep_reaches_the_scheduler_queue_every_minute_and_only_from_its_rule():
    resources = template()["Resources"]
    rule = resources["SweepRule"]["Properties"]
    assert rule["ScheduleExpression"] == "rate(1 minute)"
    (target,) = rule["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": ["SchedulerQueue", "Arn"]}
    assert target["SqsParameters"] == {"MessageGroupId": "sweep"}  # fanned out per pool by the scheduler
    body = target["InputTransformer"]["InputTemplate"].replace("<time>", "2026-11-22T13:00:00Z")
    assert json.loads(body) == {"type": "sweep", "pool": "*", "at": "2026-11-22T13:00:00Z"}
    # EventBridge gives no deduplication id: the FIFO queue deduplicates by content (unique per minute).
    assert resources["SchedulerQueue"]["Properties"]["ContentBasedDeduplication"] is True
    (statement,) = resources["SchedulerQueuePolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "events.amazonaws.com"}
    assert statement["Action"] == "sqs:SendMessage"
    assert statement["Condition"] == {"ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": ["SweepRule", "Arn"]}}}


def test_the_control_plane_runs_in_the_stack_when_a_package_is_given():
    built = template()
    resources = built["Resources"]
    functions = {k: r for k, r in resources.items() if r["Type"] == "AWS::Lambda::Function"}
    assert len(functions) == 5 and all(r["Condition"] == "HasCode" for r in functions.values())
    assert built["Conditions"]["HasCode"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "CodeKey"}, ""]}]}
    handlers = {r["Properties"]["Handler"] for r in functions.values()}
    assert handlers == {
        "app.app",
        "chalicelib.handlers.events.on_scheduler_message",
        "chalicelib.handlers.events.on_launch_message",
        "chalicelib.handlers.events.on_trial_event",
        "chalicelib.handlers.submissions.on_submission",
    }
    variables = resources["ApiFunction"]["Properties"]["Environment"]["Variables"]
    assert variables["STRATUS_TOKEN_SECRET_ARN"] == {"Ref": "TokenSecret"}  # a secret's ARN, not its value
    assert "STRATUS_TOKEN_SECRET" not in variables and "STRATUS_AGENT_TOKEN" not in variables
    # The API's URL reaches the functions without a cycle: the REST API names the function by ARN only.
    body = json.dumps(resources["RestApi"]["Properties"]["Body"])
    assert "ApiFunction" not in body and "function:${AWS::StackName}-api/invocations" in body
    assert "RestApi" in json.dumps(variables["STRATUS_API_URL"])
    sources = [r for r in resources.values() if r["Type"] == "AWS::Lambda::EventSourceMapping"]
    assert {s["Properties"]["EventSourceArn"]["Fn::GetAtt"][0] for s in sources} == {
        "SchedulerQueue",
        "LaunchQueue",
        "EventsQueue",
        "SubmissionsQueue",
    }
    logs = {k: r for k, r in resources.items() if r["Type"] == "AWS::Logs::LogGroup"}
    assert all("RetentionInDays" in r["Properties"] for r in logs.values())
    assert {f"{name}Logs" for name in functions} <= set(logs)  # each function's own, with retention


def test_every_sqs_consumer_reports_partial_batch_failures_and_its_queue_has_a_dead_letter_queue():
    import app

    resources = template()["Resources"]
    sources = [r for r in resources.values() if r["Type"] == "AWS::Lambda::EventSourceMapping"]
    assert len(sources) == len(list(app.app.event_sources)) == 4  # one per Chalice SQS handler
    for source in sources:
        properties = source["Properties"]
        # Without it Lambda ignores the handlers' batchItemFailures and retries the whole batch.
        assert properties["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        (queue, _) = properties["EventSourceArn"]["Fn::GetAtt"]
        redrive = resources[queue]["Properties"]["RedrivePolicy"]
        assert redrive == {
            "deadLetterTargetArn": {"Fn::GetAtt": [f"{queue}Dlq", "Arn"]},
            "maxReceiveCount": 5,
        }
        assert resources[f"{queue}Dlq"]["Type"] == "AWS::SQS::Queue"
    assert {s["Properties"]["BatchSize"] for s in sources} == {1, 10}  # the launch queue's 10 a batch


def test_chalices_policy_file_is_the_templates_policy_for_the_default_stack():
    from pathlib import Path

    from infra.aws.chalice_policy import policy_for

    committed = json.loads((Path(__file__).resolve().parents[4] / ".chalice" / "policy-dev.json").read_text())
    assert committed == policy_for(
        "stratus"
    )  # regenerate: python -m infra.aws.chalice_policy > .chalice/policy-dev.json
    assert "Fn::" not in json.dumps(committed) and "${" not in json.dumps(committed)
    config = json.loads((Path(__file__).resolve().parents[4] / ".chalice" / "config.json").read_text())
    assert config["app_name"] == "stratus" and config["stages"]["dev"]["iam_policy_file"] == "policy-dev.json"
