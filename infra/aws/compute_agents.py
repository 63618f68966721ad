"""What every EC2 and Batch pool's instances share (`infra.aws.compute_resources`): the agents' security group
(the trial's nodes reach each other; SSH only with a key pair, from `InboundCidr`) and the agents' role,
instance profile and policy (the credential route, the compute package)."""

from __future__ import annotations

from typing import Any

from infra.boot import STAGE

Template = dict[str, Any]


def _sub(text: str) -> dict[str, str]:
    return {"Fn::Sub": text}


def agent_network() -> Template:
    group_id = {"Fn::GetAtt": ["AgentSecurityGroup", "GroupId"]}
    return {
        "AgentSecurityGroup": {
            "Type": "AWS::EC2::SecurityGroup",
            "Properties": {
                # Agents poll the API: nothing comes in but a trial's other nodes (and SSH with a key).
                "GroupDescription": "Stratus agents: the nodes of a trial reach each other",
                "VpcId": {"Ref": "AgentVpcId"},
                "Tags": [
                    {"Key": "stratus:cluster-id", "Value": {"Ref": "AWS::StackName"}},
                    {"Key": "Name", "Value": _sub("${AWS::StackName}-agents")},
                ],
            },
        },
        "AgentSelfIngress": {
            "Type": "AWS::EC2::SecurityGroupIngress",
            "Properties": {
                "Description": "The nodes of a trial: NCCL, gloo and the rendezvous on any port",
                "GroupId": group_id,
                "IpProtocol": "-1",
                "SourceSecurityGroupId": group_id,
            },
        },
        "AgentSshIngress": {
            "Type": "AWS::EC2::SecurityGroupIngress",
            "Condition": "HasKeyName",
            "Properties": {
                "Description": "SSH with the key pair of the stack",
                "GroupId": group_id,
                "IpProtocol": "tcp",
                "FromPort": 22,
                "ToPort": 22,
                "CidrIp": {"Ref": "InboundCidr"},
            },
        },
    }


def agent_identity() -> Template:
    """The instance profile of the template's agent role, and the role's policy: read the compute
    package, and call the one route that turns the instance's identity into its agent credential."""
    return {
        "AgentInstanceProfile": {
            "Type": "AWS::IAM::InstanceProfile",
            "Properties": {"Roles": [{"Ref": "AgentRole"}]},
        },
        "AgentPolicy": {
            "Type": "AWS::IAM::Policy",
            "Condition": "HasCode",
            "Properties": {
                "PolicyName": "agent",
                "Roles": [{"Ref": "AgentRole"}],
                "PolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Sid": "ComputePackage",
                            "Effect": "Allow",
                            "Action": "s3:GetObject",
                            "Resource": _sub("arn:${AWS::Partition}:s3:::${BucketName}/compute/*"),
                        },
                        {
                            "Sid": "AgentCredential",
                            "Effect": "Allow",
                            "Action": "execute-api:Invoke",
                            "Resource": _sub(
                                "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${RestApi}/"
                                + STAGE
                                + "/POST/agents/*/iam-credential"
                            ),
                        },
                    ],
                },
            },
        },
    }
