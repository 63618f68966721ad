"""The local stack's EC2: the ec2 pools' Auto Scaling groups in moto, and a runner that turns each instance
moto reports into an agent process (moto cannot run an instance, so its user data never runs).

At start, each ec2 pool gets a launch template whose user data is the stack's own script
(`infra.boot`, rendered for this stack) and an Auto Scaling group named `<stack>-<pool>` (min
instances to max, no desired size, new instances protected from scale-in, as the CloudFormation stack
declares them). The control plane sizes the group through the real Auto Scaling API
(`chalicelib.compute.ec2`); every `interval` the runner lists each group's instances:

- a new `InService` instance gets a fake instance metadata service of its own (`infra.local.fake_imds`), and
  an agent process started from the agent line read back from its launch template's user data (the
  unit's `ExecStart=`: `stratus.harness.agent --aws ...`, which reads its id, the instance id, and its address
  from that metadata service and watches it for a spot interruption notice), with this machine's
  interpreter and the local stack's credential file;
- an instance that left its group (scaled in by the control plane) gets SIGTERM, as an EC2 shutdown
  sends it: the agent drains and exits.

`interrupt(instance_id, grace_s)` plays EC2 reclaiming a spot instance: the metadata service's
`spot/instance-action` announces the termination `grace_s` ahead, the EventBridge warning goes to the
events queue as the stack's rule would put it there, and at the deadline the instance is terminated
through EC2 (the group launches a replacement, as on AWS) and its agent killed with it. A file
`<state-dir>/compute/interrupt/<instance-id>` (its text: the grace in seconds) asks for one from outside
the stack process (tests, or a user trying spot behaviour).
"""

from __future__ import annotations

import base64
import logging
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from chalicelib.domain.compute_events import SPOT_WARNING
from infra import boot
from infra.local.agents import Runner
from infra.local.fake_imds import FakeImds
from stratus.contract.pools import PoolSpec

log = logging.getLogger("stratus.local.compute")

#: The grace EC2 gives a reclaimed spot instance is two minutes; the local stack's default is shorter.
LOCAL_SPOT_GRACE_S = 20.0
#: A local agent looks for an interruption notice this often (5 s on AWS).
LOCAL_SPOT_POLL_S = 1.0


def _rendered(script: str, api_url: str, stack: str) -> str:
    """The user data script as CloudFormation would fill it in for this local stack."""
    values = {
        boot.API_URL: api_url,
        "${AWS::StackName}": stack,
        "${AWS::Region}": "us-east-1",
        "${BucketName}": f"{stack}-bucket",
        "${ComputeKey}": "compute/local",
    }
    for placeholder, value in values.items():
        script = script.replace(placeholder, value)
    return script


@dataclass
class _Machine:
    pool: PoolSpec
    process: subprocess.Popen[bytes]
    reclaim_at: float | None = None  # epoch s: terminated then, as a reclaimed spot instance


class LocalCompute(Runner):
    """The runner of the ec2 pools: their instances' agents, and spot interruptions."""

    NAME = "local-compute"

    def prepare(self) -> None:
        self._stack = self.context.stack
        self._ec2 = self.context.client("ec2")
        self._asg = self.context.client("autoscaling")
        self._imds = FakeImds()
        self._machines: dict[str, _Machine] = {}
        self._leaving: list[subprocess.Popen[bytes]] = []  # agents of instances gone, until they exit
        self._api_url = self.context.launcher.api_url
        self._agent_lines: dict[str, list[str]] = {}  # by pool: the user data's agent line
        self._lock = threading.Lock()

    # ---- the groups ---------------------------------------------------------------------------------

    def create(self) -> None:
        """Each pool's launch template and Auto Scaling group, unless the state folder kept them."""
        image = self._ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        subnets = self._ec2.describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])[
            "Subnets"
        ]
        for pool in self.pools:
            assert pool.provider is not None
            name = pool.provider.group
            if self._asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"]:
                continue  # kept in the state folder from an earlier run of this stack
            script = _rendered(boot.script(pool.name, pool.slots_per_agent or 1), self._api_url, self._stack)
            self._ec2.create_launch_template(
                LaunchTemplateName=name,
                LaunchTemplateData={
                    "ImageId": image,
                    "InstanceType": (pool.provider.instance_types or ("g5.xlarge",))[0],
                    "UserData": base64.b64encode(script.encode()).decode(),
                },
            )
            self._asg.create_auto_scaling_group(
                AutoScalingGroupName=name,
                LaunchTemplate={"LaunchTemplateName": name, "Version": "$Latest"},
                MinSize=pool.provider.min_instances,
                MaxSize=pool.provider.max_instances,
                VPCZoneIdentifier=",".join(s["SubnetId"] for s in subnets),
                NewInstancesProtectedFromScaleIn=True,
                Tags=[{"Key": "stratus:pool", "Value": pool.name, "PropagateAtLaunch": True}],
            )
            log.info("pool %s: Auto Scaling group %s (%d to %d instances)", pool.name, name,
                     pool.provider.min_instances, pool.provider.max_instances)  # fmt: skip

    # ---- running ------------------------------------------------------------------------------------

    def start(self) -> None:
        self._requests.mkdir(parents=True, exist_ok=True)
        self._imds.start()
        super().start()

    def stop(self) -> None:
        super().stop()
        self._imds.stop()

    def processes(self) -> list[subprocess.Popen[bytes]]:
        with self._lock:
            return [m.process for m in self._machines.values()] + self._leaving

    def interrupt(self, instance_id: str, grace_s: float = LOCAL_SPOT_GRACE_S) -> None:
        """EC2 reclaims the spot instance `instance_id` in `grace_s` seconds (see the module docstring)."""
        with self._lock:
            machine = self._machines.get(instance_id)
            if machine is None or machine.reclaim_at is not None:
                log.warning(
                    "interrupt of %s ignored: no such running instance, or already reclaimed", instance_id
                )
                return
            machine.reclaim_at = time.time() + grace_s
        now = datetime.now(UTC)
        self._imds.interrupt(instance_id, at=now + timedelta(seconds=grace_s))
        arn = f"arn:aws:ec2:us-east-1:123456789012:instance/{instance_id}"
        detail = {"instance-id": instance_id, "instance-action": "terminate"}
        self.send_event("aws.ec2", SPOT_WARNING, f"spot-{instance_id}", arn, detail)
        log.info("instance %s: spot interruption, terminated in %.0f s", instance_id, grace_s)

    def look(self) -> None:
        self._leaving = [p for p in self._leaving if p.poll() is None]
        self._requested_interruptions()
        self._reclaim_due()
        for pool in self.pools:
            self._follow(pool)

    def _requested_interruptions(self) -> None:
        for request in sorted(self._requests.glob("i-*")):
            text = request.read_text().strip()
            request.unlink(missing_ok=True)
            self.interrupt(request.name, float(text) if text else LOCAL_SPOT_GRACE_S)

    def _reclaim_due(self) -> None:
        now = time.time()
        with self._lock:
            due = [i for i, m in self._machines.items() if m.reclaim_at is not None and m.reclaim_at <= now]
        for instance_id in due:
            log.info("instance %s: reclaimed", instance_id)
            self._ec2.terminate_instances(InstanceIds=[instance_id])  # its group replaces it
            self._gone(instance_id, reclaimed=True)

    def _follow(self, pool: PoolSpec) -> None:
        assert pool.provider is not None
        answer = self._asg.describe_auto_scaling_groups(AutoScalingGroupNames=[pool.provider.group])
        groups = answer.get("AutoScalingGroups") or []
        members = groups[0].get("Instances", []) if groups else []
        in_service = {
            m["InstanceId"]: m.get("InstanceType") or pool.provider.instance_types[0]
            for m in members
            if m.get("LifecycleState") == "InService"
        }
        with self._lock:
            known = {i for i, m in self._machines.items() if m.pool.name == pool.name}
        for instance_id in sorted(in_service.keys() - known):
            self._boot(pool, instance_id, in_service[instance_id])
        for instance_id in sorted(known - in_service.keys()):
            self._gone(instance_id, reclaimed=False)

    def _boot(self, pool: PoolSpec, instance_id: str, instance_type: str) -> None:
        assert pool.provider is not None
        life_cycle = "spot" if pool.provider.spot else "on-demand"
        self._imds.add(instance_id, life_cycle=life_cycle, instance_type=instance_type)
        process = self._launcher.start_line(
            instance_id,
            self._agent_line(pool)[1:],  # after the AMI's interpreter
            extra=[
                "--imds-url",
                self._imds.url_for(instance_id),
                "--spot-poll-interval",
                str(LOCAL_SPOT_POLL_S),
            ],
        )
        with self._lock:
            self._machines[instance_id] = _Machine(pool, process)
        log.info("instance %s of pool %s: running, agent pid %d", instance_id, pool.name, process.pid)

    def _agent_line(self, pool: PoolSpec) -> list[str]:
        """The agent's command line in the user data of the pool's launch template."""
        assert pool.provider is not None
        if pool.name not in self._agent_lines:
            versions = self._ec2.describe_launch_template_versions(
                LaunchTemplateName=pool.provider.group, Versions=["$Latest"]
            )["LaunchTemplateVersions"]
            text = base64.b64decode(versions[0]["LaunchTemplateData"]["UserData"]).decode()
            self._agent_lines[pool.name] = boot.agent_command_in(text)
        return self._agent_lines[pool.name]

    def _gone(self, instance_id: str, *, reclaimed: bool) -> None:
        with self._lock:
            machine = self._machines.pop(instance_id, None)
        if machine is None:
            return
        if machine.process.poll() is None:
            # A reclaimed machine vanishes; one scaled in shuts down (SIGTERM: the agent drains).
            machine.process.send_signal(signal.SIGKILL if reclaimed else signal.SIGTERM)
            self._leaving.append(machine.process)
        self._imds.remove(instance_id)
        log.info("instance %s of pool %s: gone (%s)", instance_id, machine.pool.name,
                 "reclaimed" if reclaimed else "terminated")  # fmt: skip
