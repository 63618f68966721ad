"""The control plane in the stack: its Lambda functions, their queues' event sources, and the REST API,
from the Chalice app itself (its routes, their authorizers, its SQS handlers), plus the stack's
parameters. `det deploy aws up` builds the package (`infra/aws/package.py`), uploads it to the stack's bucket
and passes its key as `CodeKey`; without one (the template deployed by hand) the stack holds the
infrastructure only. The functions learn the resource pools from `STRATUS_POOLS` (absent for the default
pool), each EC2 pool with its Auto Scaling group's name, each Batch pool with its job queue's; and the
user's tags, which they put on the jobs they start, from `STRATUS_TAGS` (`stratus.contract.tags`; absent without
any). Lambda takes 4 KB of environment in all: tags that would take it over are refused (`InvalidTagError`),
by an estimate of what CloudFormation fills in.

The API function learns the API's URL (for the launch specs it hands agents) from an environment variable
that names the REST API, so the REST API must not depend on the function: its integrations name the
function by its ARN, built from the stack's name, not by a reference.

An API Gateway deployment is a snapshot: updating the REST API changes nothing that the `api` stage serves
until a new deployment moves the stage. So the deployment's logical id ends in a digest of the REST API's
properties (`deployment_logical_id`): an upgrade that changes a route makes a new deployment, which moves
the stage (API Gateway's CreateDeployment of an existing stage name), and CloudFormation then deletes the
old one (a stage no longer points at it, so it deletes no stage); an unchanged API keeps its deployment.
The stage stays the one the first deployment made, so it is not a resource of its own here: a new
`AWS::ApiGateway::Stage` named `api` would collide with it on an existing stack.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from chalicelib.settings import QUEUES
from infra.aws.package import LAMBDA_RUNTIME
from infra.boot import API_URL, STAGE
from infra.shape import with_groups
from stratus.contract.errors import InvalidTagError
from stratus.contract.pools import DEFAULT_POOLS, PoolSpec, pools_to_json, traits
from stratus.contract.tags import TAGS_ENV, tags_to_json
from stratus.contract.versions import api_health, api_info

#: What each SQS handler of the app consumes: the queue's logical id in the template, by kind.
QUEUE_IDS = {
    "scheduler": "SchedulerQueue",
    "launch": "LaunchQueue",
    "events": "EventsQueue",
    "submissions": "SubmissionsQueue",
}
RUNTIME = LAMBDA_RUNTIME  # what the package is built for (infra/aws/package.py)
#: The handlers' timeout; the queues' visibility timeout is six times it, as AWS advises.
TIMEOUT_S = 30
#: The functions' memory, as in .chalice/config.json (a test holds them equal). CPU comes with memory: at
#: 512 MB a function has about 0.29 of a vCPU, so a cold start's import of the app (0.3 s of CPU from
#: bytecode, 0.75 s from sources) takes 1-2.5 s; the cost benches price this size.
MEMORY_MB = 512
LOG_RETENTION_DAYS = 30
API_FUNCTION = "ApiFunction"
#: The logical id of the REST API's deployment, before the digest of what it deploys.
DEPLOYMENT_PREFIX = "RestApiDeployment"
#: The EC2 pools' scaling permissions (`infra/aws/compute_resources.py`): every function waits for them.
COMPUTE_POLICY = "ComputeControlPolicy"
#: Lambda's limit on a function's environment: every variable's name and value, in bytes.
ENVIRONMENT_LIMIT = 4096
#: The longest stack name `det deploy aws up` takes: its bucket, `<stack>-<account>-<region>`, has 63
#: characters at most, and the shortest region names have 9.
STACK_NAME_CHARS = 40
#: At most what CloudFormation fills in for a `Ref` or `Fn::GetAtt` (a queue's URL, a secret's or role's
#: ARN, each with the stack's name), or for these `Ref`s (a bucket's name, a role's name, the compute
#: package's key), and for any other `${...}` of an `Fn::Sub` (region, URL suffix, API id).
REFERENCE_CHARS = 100 + STACK_NAME_CHARS
REF_CHARS = {"AWS::StackName": STACK_NAME_CHARS, "BucketName": 63, "AgentRole": 64, "ComputeKey": 128}
SUBSTITUTION_CHARS = 20
_SUBSTITUTION = re.compile(r"\$\{([^!}][^}]*)\}")

PARAMETERS: dict[str, Any] = {
    "BucketName": {
        "Type": "String",
        "Description": "The bucket of contexts, checkpoints and the package (made unless CreateBucket is false)",
        "AllowedPattern": "^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$",
        "ConstraintDescription": "3 to 63 lower-case letters, digits, dots and hyphens",
    },
    "CreateBucket": {
        "Type": "String",
        "AllowedValues": ["true", "false"],
        "Default": "true",
        "Description": "false: the bucket exists already (made by det deploy aws up, or kept from an earlier stack)",
    },
    "CodeKey": {
        "Type": "String",
        "Default": "",
        "Description": "The Lambda package's key in the bucket; empty: no functions, no API (infrastructure only)",
    },
}
CONDITIONS: dict[str, Any] = {
    "MakeBucket": {"Fn::Equals": [{"Ref": "CreateBucket"}, "true"]},
    "HasCode": {"Fn::Not": [{"Fn::Equals": [{"Ref": "CodeKey"}, ""]}]},
}


def _sub(text: str) -> dict[str, str]:
    return {"Fn::Sub": text}


def _function_name(suffix: str) -> dict[str, str]:
    return _sub("${AWS::StackName}-" + suffix)


def _pools_variable(pools: Sequence[PoolSpec]) -> str | dict[str, str]:
    """`STRATUS_POOLS`: the pools' JSON, each EC2 pool's `provider.group` its group's name, each Batch
    pool's its job queue's (`infra/aws/compute_batch.py`: the same `<stack>-<pool>`). JSON braces
    are plain text to `Fn::Sub`; a `${` of the pools' own text is escaped (`${!`) so it stays literal.
    Without such pools (grouped ones: local and SageMaker pools only) nothing names the stack: a plain
    string."""
    if not any(traits(pool.backend).grouped for pool in pools):
        return pools_to_json(pools)
    text = (
        pools_to_json(with_groups(pools))
        .replace("${", "${!")
        .replace("${!AWS::StackName}", "${AWS::StackName}")
    )
    return _sub(text)


def _environment(
    pools: Sequence[PoolSpec], tags: Mapping[str, str], backend_variables: Mapping[str, Any]
) -> dict[str, Any]:
    # The default pools are the settings' default: their stack's functions need no STRATUS_POOLS.
    pools_variable = {} if tuple(pools) == DEFAULT_POOLS else {"STRATUS_POOLS": _pools_variable(pools)}
    # The user's tags for the jobs the control plane starts (`stratus.contract.tags`): none, no variable.
    tags_variable = {TAGS_ENV: tags_to_json(tags)} if tags else {}
    return {
        "STRATUS_STACK": {"Ref": "AWS::StackName"},
        "STRATUS_BUCKET": {"Ref": "BucketName"},
        "STRATUS_SCHEDULER_QUEUE_URL": {"Ref": "SchedulerQueue"},
        "STRATUS_LAUNCH_QUEUE_URL": {"Ref": "LaunchQueue"},
        "STRATUS_EVENTS_QUEUE_URL": {"Ref": "EventsQueue"},
        "STRATUS_STATE_MACHINE_ARN": {"Ref": "TrialRunStateMachine"},
        "STRATUS_TOKEN_SECRET_ARN": {"Ref": "TokenSecret"},
        "STRATUS_AGENT_TOKEN_ARN": {"Ref": "AgentTokenSecret"},
        "STRATUS_API_URL": _sub(API_URL),
        # The role EC2 agents sign `POST /agents/{id}/iam-credential` with (its name: `Ref` of a role).
        "STRATUS_AGENT_ROLE_NAME": {"Ref": "AgentRole"},
        # What the control plane needs to run the cloud pools' work, with such pools only (each backend's
        # part says, `infra.aws.backends.control_environment`: the SageMaker pools' execution role and
        # the compute package their jobs install).
        **copy.deepcopy(dict(backend_variables)),  # each function its own, as every other value
        **pools_variable,
        **tags_variable,
    }


def environment_bytes(variables: Mapping[str, Any]) -> int:
    """The size the variables will have once CloudFormation fills them in, at most (by `REFERENCE_CHARS`
    and `SUBSTITUTION_CHARS`; the stack's name counts `STACK_NAME_CHARS`)."""

    def filled(match: re.Match[str]) -> str:
        return "x" * (STACK_NAME_CHARS if match[1] == "AWS::StackName" else SUBSTITUTION_CHARS)

    def size(value: Any) -> int:
        if isinstance(value, str):
            return len(value.encode())
        if isinstance(value, dict) and isinstance(value.get("Fn::Sub"), str):
            # `${!` is an escaped, literal `${`.
            return len(_SUBSTITUTION.sub(filled, value["Fn::Sub"]).replace("${!", "${").encode())
        if isinstance(value, dict) and value.get("Ref") in REF_CHARS:
            return REF_CHARS[value["Ref"]]
        return REFERENCE_CHARS

    return sum(len(name) + size(value) for name, value in variables.items())


def _check_environment(variables: Mapping[str, Any]) -> None:
    """InvalidTagError when the user's tags would take the functions' environment over Lambda's limit
    (without tags, the environment is what it always was, and is not checked)."""
    if TAGS_ENV not in variables:
        return
    total = environment_bytes(variables)
    if total > ENVIRONMENT_LIMIT:
        tags = len(TAGS_ENV) + len(variables[TAGS_ENV].encode())
        raise InvalidTagError(
            f"the tags take {tags} bytes of the control plane's environment, which would then have about "
            f"{total} of Lambda's {ENVIRONMENT_LIMIT}; use fewer or shorter tags"
        )


def _function(
    suffix: str,
    handler: str,
    pools: Sequence[PoolSpec],
    tags: Mapping[str, str],
    backend_variables: Mapping[str, Any],
) -> dict[str, Any]:
    # A function may scale a group as soon as it exists: the policy that allows it comes first.
    compute = [COMPUTE_POLICY] if any(traits(pool.backend).cloud for pool in pools) else []
    return {
        "Type": "AWS::Lambda::Function",
        "Condition": "HasCode",
        "DependsOn": [f"{_logical(suffix)}Logs", *compute],
        "Properties": {
            "FunctionName": _function_name(suffix),
            "Runtime": RUNTIME,
            "Handler": handler,
            "Role": {"Fn::GetAtt": ["ApiRole", "Arn"]},
            "Code": {"S3Bucket": {"Ref": "BucketName"}, "S3Key": {"Ref": "CodeKey"}},
            "MemorySize": MEMORY_MB,
            "Timeout": TIMEOUT_S,
            "Environment": {"Variables": _environment(pools, tags, backend_variables)},
        },
    }


def _logs(suffix: str) -> dict[str, Any]:
    return {
        "Type": "AWS::Logs::LogGroup",
        "Condition": "HasCode",
        "Properties": {
            "LogGroupName": _sub("/aws/lambda/${AWS::StackName}-" + suffix),
            "RetentionInDays": LOG_RETENTION_DAYS,
        },
    }


def _logical(suffix: str) -> str:
    return "".join(part.capitalize() for part in suffix.split("-")) + "Function"


def _swagger(chalice_app: Any) -> dict[str, Any]:
    from chalice.deploy.swagger import CFNSwaggerGenerator

    swagger: dict[str, Any] = CFNSwaggerGenerator().generate_swagger(chalice_app)
    text = json.dumps(swagger).replace(
        "${APIHandler.Arn}",
        "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:${AWS::StackName}-api",
    )
    loaded: dict[str, Any] = json.loads(text)
    return _gateway_first(loaded, chalice_app)


#: Open routes API Gateway answers itself, so that no function runs for whoever calls them: what the app's
#: views answer on the local stack (`stratus.contract.versions`), with the stack's name and region filled
#: in by CloudFormation.
GATEWAY_ANSWERS: dict[str, Any] = {
    "/health": api_health,
    "/info": lambda: api_info("${AWS::StackName}", "${AWS::Region}"),
}
#: Routes whose caller shows a token (an agent's, a run's): API Gateway refuses a request without an
#: `Authorization` header (400) before any function runs; the function checks the token itself.
TOKEN_AUTH = ("agent", "run")
_VALIDATOR = "headers"


def _gateway_first(swagger: dict[str, Any], chalice_app: Any) -> dict[str, Any]:
    """`swagger` with what API Gateway can do without a function: the open answers of `GATEWAY_ANSWERS` as
    mock integrations, and the token routes' `Authorization` header required (a request validator)."""
    for path, methods in swagger["paths"].items():
        for method, operation in methods.items():
            entry = chalice_app.routes.get(path, {}).get(method.upper())
            auth = getattr(getattr(entry, "view_function", None), "auth_kind", None)
            if method == "get" and path in GATEWAY_ANSWERS:
                operation["x-amazon-apigateway-integration"] = _mock(GATEWAY_ANSWERS[path]())
            elif auth in TOKEN_AUTH:
                required = {"name": "Authorization", "in": "header", "required": True, "type": "string"}
                operation["parameters"] = [*operation.get("parameters", []), required]
                operation["x-amazon-apigateway-request-validator"] = _VALIDATOR
    swagger["x-amazon-apigateway-request-validators"] = {
        _VALIDATOR: {"validateRequestParameters": True, "validateRequestBody": False}
    }
    return swagger


def _mock(answer: Mapping[str, str]) -> dict[str, Any]:
    body = json.dumps(answer)
    return {
        "type": "mock",
        "passthroughBehavior": "when_no_match",
        "requestTemplates": {"application/json": '{"statusCode": 200}'},
        "responses": {
            "default": {
                "statusCode": "200",
                "responseTemplates": {"application/json": {"Fn::Sub": body} if "${" in body else body},
            }
        },
    }


def deployment_logical_id(rest_api: Mapping[str, Any]) -> str:
    """`DEPLOYMENT_PREFIX` and the first 16 hex digits of the SHA-256 of the REST API's properties
    (its body, with every route, and anything else a deployment snapshots), as canonical JSON."""
    canonical = json.dumps(rest_api["Properties"], sort_keys=True, separators=(",", ":"))
    return DEPLOYMENT_PREFIX + hashlib.sha256(canonical.encode()).hexdigest()[:16]


def app_resources(
    pools: Sequence[PoolSpec] = DEFAULT_POOLS,
    tags: Mapping[str, str] | None = None,
    backend_variables: Mapping[str, Any] | None = None,
    chalice_app: Any = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The functions (configured with `pools`, the user's `tags`, checked already, and the variables the
    pools' backends need, `infra.aws.backends.control_environment(pools)`), event sources, API and log
    groups (each on the HasCode condition), and outputs; InvalidTagError for tags the functions'
    environment has no room for. The backends' variables come from the caller: their parts import this
    module's names. `chalice_app`: the Chalice app whose routes and queue handlers the stack serves
    (None: the project's, `app.app`)."""
    if chalice_app is None:
        import app as chalice_app_module

        chalice_app = chalice_app_module.app
    tags = tags or {}
    backend_variables = backend_variables or {}
    _check_environment(_environment(pools, tags, backend_variables))

    rest_api = {
        "Type": "AWS::ApiGateway::RestApi",
        "Condition": "HasCode",
        "Properties": {
            "Name": {"Ref": "AWS::StackName"},
            "Body": _swagger(chalice_app),
            "EndpointConfiguration": {"Types": ["REGIONAL"]},
        },
    }
    deployment = deployment_logical_id(rest_api)
    resources: dict[str, Any] = {
        API_FUNCTION: _function("api", "app.app", pools, tags, backend_variables),
        f"{API_FUNCTION}Logs": _logs("api"),
        "RestApi": rest_api,
        # A new logical id for a changed API: a new deployment, which moves the stage (the docstring).
        deployment: {
            "Type": "AWS::ApiGateway::Deployment",
            "Condition": "HasCode",
            "Properties": {
                "RestApiId": {"Ref": "RestApi"},
                "StageName": STAGE,
                "Description": f"REST API {deployment.removeprefix(DEPLOYMENT_PREFIX)}",
            },
        },
        "ApiInvokePermission": {
            "Type": "AWS::Lambda::Permission",
            "Condition": "HasCode",
            "Properties": {
                "Action": "lambda:InvokeFunction",
                "FunctionName": {"Ref": API_FUNCTION},
                "Principal": "apigateway.amazonaws.com",
                "SourceArn": _sub(
                    "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${RestApi}/*"
                ),
            },
        },
    }
    sources: list[Any] = list(chalice_app.event_sources)
    for source in sources:
        kind = next(kind for kind, name in QUEUES.items() if source.queue.endswith("-" + name))
        suffix = source.name.replace("_", "-")
        logical = _logical(suffix)
        resources[logical] = _function(suffix, source.handler_string, pools, tags, backend_variables)
        resources[f"{logical}Logs"] = _logs(suffix)
        resources[f"{logical}Source"] = {
            "Type": "AWS::Lambda::EventSourceMapping",
            "Condition": "HasCode",
            "Properties": {
                "EventSourceArn": {"Fn::GetAtt": [QUEUE_IDS[kind], "Arn"]},
                "FunctionName": {"Ref": logical},
                "BatchSize": source.batch_size,
                # The handlers answer with the records that failed (`chalicelib/handlers/events.py`):
                # only those come back, and only a poison message reaches the dead-letter queue.
                "FunctionResponseTypes": ["ReportBatchItemFailures"],
                "Enabled": True,
            },
        }
    outputs = {
        "ApiUrl": {
            "Condition": "HasCode",
            "Description": "DET_MASTER for the det CLI",
            "Value": _sub(API_URL),
        }
    }
    return resources, outputs
