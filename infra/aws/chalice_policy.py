"""The API role's policy for Chalice's own tools (`chalice package`, `chalice deploy` with the top-level
`.chalice/config.json`): the template's policy (`infra/aws/template.py`), its references resolved to the ARN
patterns of one stack's names (any region and account), so `.chalice/policy-dev.json` never drifts from
what `det deploy aws up` deploys (a test renders it and compares).

    python -m infra.aws.chalice_policy [STACK] > .chalice/policy-dev.json
"""

from __future__ import annotations

import json
import sys
from typing import Any

from chalicelib.settings import QUEUES
from infra.aws.template_app import QUEUE_IDS
from infra.aws.template_iam import api_policy
from infra.shape import TABLES


def policy_for(stack: str = "stratus") -> dict[str, Any]:
    names: dict[str, str] = {
        f"{spec.name.capitalize()}Table": f"arn:aws:dynamodb:*:*:table/{stack}-{spec.name}" for spec in TABLES
    }
    names.update({logical: f"arn:aws:sqs:*:*:{stack}-{QUEUES[kind]}" for kind, logical in QUEUE_IDS.items()})
    refs = {
        "TrialRunStateMachine": f"arn:aws:states:*:*:stateMachine:{stack}-trial-run",
        "TokenSecret": f"arn:aws:secretsmanager:*:*:secret:{stack}/run-token-key-*",
        "AgentTokenSecret": f"arn:aws:secretsmanager:*:*:secret:{stack}/agent-token-*",
    }
    subs = {"${AWS::Partition}": "aws", "${AWS::Region}": "*", "${AWS::AccountId}": "*",
            "${AWS::StackName}": stack, "${BucketName}": f"{stack}-*"}  # fmt: skip

    def resolve(value: Any) -> Any:
        if isinstance(value, list):
            return [resolve(v) for v in value]
        if not isinstance(value, dict):
            return value
        if "Fn::GetAtt" in value:
            return names[value["Fn::GetAtt"][0]]
        if "Ref" in value:
            return refs[value["Ref"]]
        if "Fn::Join" in value:
            separator, parts = value["Fn::Join"]
            return separator.join(resolve(part) for part in parts)
        if "Fn::Sub" in value:
            text = value["Fn::Sub"]
            for placeholder, replacement in subs.items():
                text = text.replace(placeholder, replacement)
            return text
        return {k: resolve(v) for k, v in value.items()}

    resolved: dict[str, Any] = resolve(api_policy())
    return resolved


if __name__ == "__main__":
    json.dump(policy_for(*sys.argv[1:2]), sys.stdout, indent=2)
    sys.stdout.write("\n")
