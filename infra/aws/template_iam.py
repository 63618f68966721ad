"""The IAM policies of the stack's roles (`infra/aws/template.py`): the control plane's (`api_policy`, also
rendered for Chalice's tools by `infra/aws/chalice_policy.py`) and the state machine's. Least privilege: every
statement names this stack's resources, and every ARN its partition.
"""

from __future__ import annotations

from typing import Any

from chalicelib.domain.cloud_names import CREDENTIALS_PREFIX
from infra.aws.template_app import QUEUE_IDS
from infra.shape import TABLES

#: Each table's logical id in the template.
TABLE_IDS = {spec.name: spec.name.capitalize() + "Table" for spec in TABLES}
#: The Batch and SageMaker jobs' credential objects (`chalicelib.compute.cloud.JobCredentials`): the API
#: writes them, each job's role reads and deletes them.
JOB_CREDENTIALS = {"Fn::Sub": "arn:${AWS::Partition}:s3:::${BucketName}/" + CREDENTIALS_PREFIX + "*"}
#: The compute packages (`compute/<sha256>/<wheel>`), which agents' instances and container jobs install.
COMPUTE_PACKAGES = {"Fn::Sub": "arn:${AWS::Partition}:s3:::${BucketName}/compute/*"}


def _sub(text: str) -> dict[str, str]:
    return {"Fn::Sub": text}


def table_arn(name: str) -> dict[str, str]:
    """The ARN of the stack's table `name`, from its name (`<stack>-<name>`): the tables are made by
    `det deploy aws up` outside the stack, or by the stack only with CreateTables=true
    (`infra/aws/template.py`), so nothing may `Fn::GetAtt` them."""
    return _sub(
        "arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/${AWS::StackName}-" + name
    )


def _table_arns() -> list[Any]:
    arns: list[Any] = []
    for spec in TABLES:
        arn: Any = table_arn(spec.name)
        arns.append(arn)
        if spec.indexes:
            arns.append({"Fn::Join": ["", [arn, "/index/*"]]})
    return arns


def assume(service: str) -> dict[str, Any]:
    return {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
    }


def api_policy() -> dict[str, Any]:
    queue_arns = [{"Fn::GetAtt": [q, "Arn"]} for q in QUEUE_IDS.values()]
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "Tables",
                "Effect": "Allow",
                "Action": [
                    "dynamodb:GetItem",
                    "dynamodb:PutItem",
                    "dynamodb:UpdateItem",
                    # Deleting an experiment's records (one by one, and the metrics in batches).
                    "dynamodb:DeleteItem",
                    "dynamodb:BatchWriteItem",
                    "dynamodb:Query",
                    "dynamodb:Scan",
                ],
                "Resource": _table_arns(),
            },
            {
                "Sid": "ContextsAndCheckpoints",
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
                "Resource": [
                    _sub("arn:${AWS::Partition}:s3:::${BucketName}/contexts/*"),
                    _sub("arn:${AWS::Partition}:s3:::${BucketName}/uploads/*"),
                    _sub("arn:${AWS::Partition}:s3:::${BucketName}/checkpoints/*"),
                    _sub("arn:${AWS::Partition}:s3:::${BucketName}/submissions/*"),
                ],
            },
            {
                # Write only: a Batch or SageMaker job's node reads its own and deletes it.
                "Sid": "JobCredentials",
                "Effect": "Allow",
                "Action": "s3:PutObject",
                "Resource": JOB_CREDENTIALS,
            },
            {
                "Sid": "HeadMissingObjects",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": _sub("arn:${AWS::Partition}:s3:::${BucketName}"),
            },
            {
                "Sid": "Queues",
                "Effect": "Allow",
                "Action": [
                    "sqs:SendMessage",
                    "sqs:ReceiveMessage",
                    "sqs:DeleteMessage",
                    "sqs:GetQueueAttributes",
                ],
                "Resource": queue_arns,
            },
            {
                # Agents' doorbells (chalicelib.aws.bells): a queue per agent, made at its first heartbeat
                # and deleted at its last; ReceiveMessage because the agents' presigned polls act as this role.
                "Sid": "AgentBells",
                "Effect": "Allow",
                "Action": [
                    "sqs:CreateQueue",
                    "sqs:GetQueueUrl",
                    "sqs:TagQueue",
                    "sqs:SendMessage",
                    "sqs:ReceiveMessage",
                    "sqs:DeleteQueue",
                ],
                "Resource": _sub(
                    "arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:${AWS::StackName}-agent-*"
                ),
            },
            {
                "Sid": "StartTrialRuns",
                "Effect": "Allow",
                "Action": "states:StartExecution",
                "Resource": {"Ref": "TrialRunStateMachine"},
            },
            {
                "Sid": "AnswerTaskTokens",
                "Effect": "Allow",
                "Action": ["states:SendTaskSuccess", "states:SendTaskFailure", "states:SendTaskHeartbeat"],
                # These actions have no resource type (the service authorization reference lists none):
                # a task token names its execution, so only "*" is sure to be allowed.
                "Resource": "*",
            },
            {
                # The run tokens' key and the agents' token (chalicelib.aws.secrets), read at cold start.
                "Sid": "ReadTokens",
                "Effect": "Allow",
                "Action": "secretsmanager:GetSecretValue",
                "Resource": [{"Ref": "TokenSecret"}, {"Ref": "AgentTokenSecret"}],
            },
            {
                "Sid": "TrialLogs",
                "Effect": "Allow",
                "Action": ["logs:CreateLogStream", "logs:PutLogEvents", "logs:GetLogEvents"],
                "Resource": _sub(
                    "arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:log-group:/${AWS::StackName}/trials:*"
                ),
            },
            {
                "Sid": "OwnLambdaLogs",
                "Effect": "Allow",
                "Action": ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"],
                "Resource": _sub(
                    "arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:log-group:/aws/lambda/${AWS::StackName}-*"
                ),
            },
            {
                # The stack's price table (chalicelib.services.prices): written by the daily sweep, read
                # when a run is priced.
                "Sid": "PriceTable",
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:PutObject"],
                "Resource": _sub("arn:${AWS::Partition}:s3:::${BucketName}/prices/*"),
            },
            {
                # AWS's prices of the pools' instance types (chalicelib.aws.prices). Neither action has a
                # resource type (the service authorization reference lists none): only "*" is allowed.
                "Sid": "ReadPrices",
                "Effect": "Allow",
                "Action": ["pricing:GetProducts", "ec2:DescribeSpotPriceHistory"],
                "Resource": "*",
            },
            {
                # `det experiment dashboard` (POST /experiments/{id}/dashboard) and `det experiment delete`:
                # the stack's own dashboards.
                "Sid": "OwnDashboards",
                "Effect": "Allow",
                "Action": [
                    "cloudwatch:PutDashboard",
                    "cloudwatch:GetDashboard",
                    "cloudwatch:DeleteDashboards",
                ],
                "Resource": _sub(
                    "arn:${AWS::Partition}:cloudwatch::${AWS::AccountId}:dashboard/${AWS::StackName}-*"
                ),
            },
        ],
    }


def states_policy() -> dict[str, Any]:
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "TrialStates",
                "Effect": "Allow",
                "Action": "dynamodb:UpdateItem",
                "Resource": table_arn("trials"),
            },
            {
                "Sid": "Queues",
                "Effect": "Allow",
                "Action": "sqs:SendMessage",
                # The workflow's queues; not the submissions queue, which only the bucket sends to.
                "Resource": [{"Fn::GetAtt": [q, "Arn"]} for k, q in QUEUE_IDS.items() if k != "submissions"],
            },
        ],
    }


def events_queue_policy(queue: str, source_arn: Any) -> dict[str, Any]:
    """The policy that lets EventBridge send to `queue` (a logical id), only from the rules `source_arn`
    names (one ARN, or a list): the stack's sweep schedule, the compute backends' state rules."""
    return {
        "Type": "AWS::SQS::QueuePolicy",
        "Properties": {
            "Queues": [{"Ref": queue}],
            "PolicyDocument": {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "events.amazonaws.com"},
                        "Action": "sqs:SendMessage",
                        "Resource": {"Fn::GetAtt": [queue, "Arn"]},
                        "Condition": {"ArnEquals": {"aws:SourceArn": source_arn}},
                    }
                ],
            },
        },
    }
