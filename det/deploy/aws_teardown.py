"""The calls of `det deploy aws down` that end a stack's work before it is deleted (a part of
`det.deploy.aws_calls.AwsCalls`): its control plane frozen, its groups to zero, its Batch jobs, SageMaker training
jobs and trial executions stopped; and, once it is deleted, the experiments' dashboards its control plane
made. What is the stack's is what it owns (its CloudFormation resources), what is tagged with its exact
name, or (dashboards, which take no tag) what has exactly the name its control plane gives: never a bare
name prefix, which another stack's names may share."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

#: The experiments' dashboards of stack `{stack}` (`det experiment dashboard`): the name
#: `chalicelib.domain.dashboards.dashboard_name` gives, `<stack>-experiment-<id>`.
EXPERIMENT_DASHBOARD = r"{stack}-experiment-\d+"
#: Dashboards named in one DeleteDashboards request (a bound of our own: each request stays small).
_DELETE_BATCH = 100


class TeardownCalls:
    """Needs the `AwsCalls` attributes below."""

    _session: Any
    _errors: Any
    _cfn: Any
    #: Each stack's resources as `owned` read them once (`down` asks for four types, then deletes).
    _owned_cache: dict[str, list[dict[str, Any]]]

    def resources(self, name: str) -> list[dict[str, Any]]:
        return [
            r
            for r in self._cfn.describe_stack_resources(StackName=name)["StackResources"]
            if "ResourceType" in r
        ]

    def stop_executions(self, machine: str | None) -> int:
        if not machine:
            return 0
        states = self._session.client("stepfunctions")
        stopped = 0
        pages = states.get_paginator("list_executions").paginate(
            stateMachineArn=machine, statusFilter="RUNNING"
        )
        try:
            for page in pages:
                for execution in page["executions"]:
                    states.stop_execution(executionArn=execution["executionArn"], cause="det deploy aws down")
                    stopped += 1
        except states.exceptions.StateMachineDoesNotExist:
            pass  # gone already (deleted by hand; or moto, whose executing backend does not see CloudFormation's)
        return stopped

    def owned(self, stack: str, resource_type: str) -> list[str]:
        """The physical ids of the stack's own resources of one type (none once the stack is gone); the
        stack's resources are read once until it is deleted."""
        if stack not in self._owned_cache:
            try:
                self._owned_cache[stack] = self.resources(stack)
            except self._errors.ClientError:
                return []
        found = self._owned_cache[stack]
        return sorted(
            str(r["PhysicalResourceId"])
            for r in found
            if r["ResourceType"] == resource_type and r.get("PhysicalResourceId")
        )

    def stack_groups(self, tag: str, stack: str) -> list[dict[str, Any]]:
        """The Auto Scaling groups of the stack: its own resources, or tagged `tag=stack` exactly (never
        by name: `lab-big-default` is not stack `lab`'s)."""
        own = set(self.owned(stack, "AWS::AutoScaling::AutoScalingGroup"))
        pages = self._session.client("autoscaling").get_paginator("describe_auto_scaling_groups")
        groups = {}
        for page in pages.paginate():
            for group in page["AutoScalingGroups"]:
                tags = {t["Key"]: t.get("Value") for t in group.get("Tags", [])}
                if tags.get(tag) == stack or group["AutoScalingGroupName"] in own:
                    groups[group["AutoScalingGroupName"]] = group
        return [groups[name] for name in sorted(groups)]

    def freeze(self, stack: str) -> list[str]:
        """Stop the stack's control plane before its work is stopped: every function of it gets a reserved
        concurrency of 0, so no sweep, queue message or API call starts an instance or a job meanwhile
        (messages wait in their queues; they go with the stack). The functions frozen."""
        functions = self.owned(stack, "AWS::Lambda::Function")
        client = self._session.client("lambda")
        frozen = []
        for name in functions:
            try:
                client.put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=0)
            except client.exceptions.ResourceNotFoundException:
                continue  # never made, or deleted already (a failed create's rollback)
            frozen.append(name)
        return frozen

    def unfreeze(self, functions: Sequence[str]) -> None:
        """Undo `freeze` (a delete that failed leaves a stack that works)."""
        client = self._session.client("lambda")
        for name in functions:
            try:
                client.delete_function_concurrency(FunctionName=name)
            except client.exceptions.ResourceNotFoundException:
                continue  # deleted with the part of the stack that went

    def scale_to_zero(self, group: dict[str, Any]) -> list[str]:
        """Set the group to 0/0/0 and terminate its instances (scale-in protection would keep them
        otherwise); the instances terminated."""
        name = group["AutoScalingGroupName"]
        self._session.client("autoscaling").update_auto_scaling_group(
            AutoScalingGroupName=name, MinSize=0, MaxSize=0, DesiredCapacity=0
        )
        instances = sorted(i["InstanceId"] for i in group.get("Instances", []))
        if instances:
            self._session.client("ec2").terminate_instances(InstanceIds=instances)
        return instances

    def stop_jobs(self, stack: str) -> tuple[int, int]:
        """Terminate the active Batch jobs of the stack's own job queues and stop its InProgress SageMaker
        training jobs (named `<stack>-...` and run by one of the stack's own roles: a job of stack
        `lab-big` is named `lab-big-...` too); how many of each."""
        batch = self._session.client("batch")
        terminated = 0
        for queue in self.owned(stack, "AWS::Batch::JobQueue"):
            for status in ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING"):
                for page in batch.get_paginator("list_jobs").paginate(jobQueue=queue, jobStatus=status):
                    for job in page["jobSummaryList"]:
                        batch.terminate_job(
                            jobId=job["jobId"], reason=f"det deploy aws down: stack {stack} deleted"
                        )
                        terminated += 1
        roles = set(self.owned(stack, "AWS::IAM::Role"))
        sagemaker = self._session.client("sagemaker")
        stopped = 0
        prefix = stack.lower() + "-"  # SageMaker writes job names in lower case
        pages = sagemaker.get_paginator("list_training_jobs").paginate(
            NameContains=prefix, StatusEquals="InProgress"
        )
        for page in pages:
            for job in page["TrainingJobSummaries"]:
                name = job["TrainingJobName"]
                if not name.startswith(prefix):
                    continue
                role = str(sagemaker.describe_training_job(TrainingJobName=name).get("RoleArn", ""))
                if role.rsplit("/", 1)[-1] in roles:
                    sagemaker.stop_training_job(TrainingJobName=name)
                    stopped += 1
        return terminated, stopped

    def delete_dashboards(self, stack: str) -> list[str]:
        """Delete the experiments' dashboards of the stack (`EXPERIMENT_DASHBOARD`; made by its control plane,
        so unknown to CloudFormation, which deletes the stack's own dashboard with it); their names."""
        cloudwatch = self._session.client("cloudwatch")
        ours = re.compile(EXPERIMENT_DASHBOARD.format(stack=re.escape(stack)))
        pages = cloudwatch.get_paginator("list_dashboards").paginate(
            DashboardNamePrefix=f"{stack}-experiment-"
        )
        names = sorted(
            d["DashboardName"]
            for page in pages
            for d in page["DashboardEntries"]
            if ours.fullmatch(d["DashboardName"])
        )
        for i in range(0, len(names), _DELETE_BATCH):
            cloudwatch.delete_dashboards(DashboardNames=names[i : i + _DELETE_BATCH])
        return names
