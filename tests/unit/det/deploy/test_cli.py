"""`det deploy local up | status | down` without starting anything: fake processes, fake liveness.

A real busy port and the real process table are tested in tests/integration/test_cli_deploy_host.py."""

from __future__ import annotations

import argparse
import io
import json
import signal
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest

from det import cli
from det._runtime import Runtime
from det.deploy import aws_compute as _aws_compute
from det.deploy import local as _deploy
from det.deploy.local_state import StackState, inspect, read_state, state_dir
from det.deploy.quotas import InstanceShape, QuotaValue
from det.errors import UsageError
from stratus.contract.pools import Provider

API_URL = "http://127.0.0.1:8080"


def write_state(directory: Path, pid: int, **fields: object) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    state = {
        "pid": pid,
        "api_url": API_URL,
        "moto_url": "http://127.0.0.1:5000",
        "slots": 2,
        "started_at": 1714564800.0,
    }
    (directory / "stack.json").write_text(json.dumps(state | fields))


def healthy(request: httpx.Request) -> httpx.Response:
    assert request.url.path == "/health"
    return httpx.Response(200, json={"status": "ok", "version": "0.1.0"})


class Streams:
    def __init__(self) -> None:
        self.out, self.err = io.StringIO(), io.StringIO()


def runtime(home: Path, streams: Streams, **kwargs: object) -> Runtime:
    return Runtime(
        environ={"STRATUS_HOME": str(home)},
        transport=httpx.MockTransport(healthy),
        out=streams.out,
        err=streams.err,
        **kwargs,  # type: ignore[arg-type]
    )


def up_args(**kwargs: object) -> argparse.Namespace:
    return argparse.Namespace(**({"slots": 2, "agents": 1, "port": 0, "detach": True} | kwargs))


class FakeProcess:
    def __init__(self, pid: int = 4242, exit_code: int | None = None) -> None:
        self.pid = pid
        self.exit_code = exit_code

    def poll(self) -> int | None:
        return self.exit_code


# --- state files -------------------------------------------------------------------------------


def test_state_dir_follows_stratus_home(tmp_path: Path) -> None:
    assert state_dir({"STRATUS_HOME": str(tmp_path)}) == tmp_path / "local"
    assert state_dir({}) == Path.home() / ".stratus" / "local"


def test_read_state(tmp_path: Path) -> None:
    assert read_state(tmp_path) is None
    write_state(tmp_path, 12)
    assert read_state(tmp_path) == StackState(12, API_URL, "http://127.0.0.1:5000", 2, 1714564800.0)
    (tmp_path / "stack.json").write_text('{"pid": 12, "api_')  # half-written
    assert read_state(tmp_path) is None
    (tmp_path / "stack.json").write_text('{"api_url": "x"}')
    assert read_state(tmp_path) is None


def test_inspect_tells_running_starting_and_stale(tmp_path: Path) -> None:
    assert inspect(tmp_path, lambda pid: True).kind == "stopped"
    (tmp_path / "stack.pid").write_text("77\n")
    assert inspect(tmp_path, lambda pid: pid == 77).kind == "starting"
    write_state(tmp_path, 77)
    running = inspect(tmp_path, lambda pid: pid == 77)
    assert (running.kind, running.pid, running.state and running.state.api_url) == ("running", 77, API_URL)
    assert inspect(tmp_path, lambda pid: False).kind == "stopped"  # the pid is gone: stale files


# --- status ------------------------------------------------------------------------------------


def test_status_when_running(tmp_path: Path) -> None:
    write_state(tmp_path / "local", 55)
    streams = Streams()

    code = _deploy.status(argparse.Namespace(), runtime(tmp_path, streams), alive=lambda pid: pid == 55)

    assert code == 0
    lines = streams.out.getvalue().splitlines()
    assert lines[0] == "Stratus local stack: running"
    assert "  pid:     55" in lines
    assert f"  API:     {API_URL}" in lines
    assert "  slots:   2" in lines
    assert "  health:  ok (version 0.1.0)" in lines


def test_status_cleans_stale_files_and_exits_3(tmp_path: Path) -> None:
    write_state(tmp_path / "local", 55)
    (tmp_path / "local" / "stack.pid").write_text("55")
    streams = Streams()

    code = _deploy.status(argparse.Namespace(), runtime(tmp_path, streams), alive=lambda pid: False)

    assert code == 3
    assert streams.out.getvalue().startswith("Stratus local stack: not running\n")
    assert not (tmp_path / "local" / "stack.json").exists()
    assert not (tmp_path / "local" / "stack.pid").exists()


def test_status_through_the_cli(tmp_path: Path) -> None:
    streams = Streams()
    assert cli.main(["deploy", "local", "status"], runtime=runtime(tmp_path, streams)) == 3


# --- up ----------------------------------------------------------------------------------------


def test_up_starts_detached_and_waits_for_health(tmp_path: Path) -> None:
    directory = tmp_path / "local"
    started: list[list[str]] = []
    sleeps: list[float] = []

    def spawn(command: list[str], log: Path) -> FakeProcess:
        started.append(command)
        assert log == directory / "stack.log"
        return FakeProcess(4242)

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 3:
            write_state(directory, 4242)  # the stack is ready

    streams = Streams()
    code = _deploy.up(
        up_args(),
        runtime(tmp_path, streams, sleep=sleep),
        spawn=spawn,
        alive=lambda pid: False,
        port_taken=lambda port: False,
    )

    assert code == 0
    assert started == [_deploy.stack_command(0, 2, directory)]
    assert started[0][1:] == [
        "-P",  # safe path: never the user's folder's app.py or infra/
        "-m",
        "infra.local.stack",
        "--port",
        "0",
        "--slots",
        "2",
        "--agents",
        "1",
        "--state-dir",
        str(directory),
    ]
    assert (directory / "stack.pid").read_text() == "4242\n"
    assert streams.out.getvalue() == (
        f"Stratus local stack is up: {API_URL} (2 slots, pid 4242)\n"
        "Point the CLI at it in this shell with:\n"
        f"  export DET_MASTER={API_URL}\n"
    )
    assert len(sleeps) == 3


def test_up_without_slots_leaves_them_to_the_stack() -> None:
    """No --slots: the stack gives its agent one slot per GPU of the machine (2 without GPUs), so `det`
    passes none (`infra.local.stack.default_slots`)."""
    command = _deploy.stack_command(0, None, Path("/state"))
    assert "--slots" not in command
    assert command[command.index("--port") + 1 :][:3] == ["0", "--agents", "1"]
    three = _deploy.stack_command(0, 3, Path("/state"))
    assert three[three.index("--port") + 1 :][:4] == ["0", "--slots", "3", "--agents"]


def test_up_when_already_running_says_so(tmp_path: Path) -> None:
    write_state(tmp_path / "local", 9)
    streams = Streams()

    def spawn(command: list[str], log: Path) -> FakeProcess:
        raise AssertionError("must not start a second stack")

    code = _deploy.up(up_args(), runtime(tmp_path, streams), spawn=spawn, alive=lambda pid: pid == 9)

    assert code == 0
    assert streams.out.getvalue() == (
        f"Stratus local stack is already running at {API_URL} (pid 9), as asked\n"
        "Point the CLI at it in this shell with:\n"
        f"  export DET_MASTER={API_URL}\n"
    )


def test_up_prints_the_log_tail_when_the_stack_dies(tmp_path: Path) -> None:
    directory = tmp_path / "local"

    def spawn(command: list[str], log: Path) -> FakeProcess:
        log.write_text("booting\nTraceback (most recent call last):\nOSError: port taken\n")
        return FakeProcess(4242, exit_code=1)

    streams = Streams()
    rt = runtime(tmp_path, streams, sleep=lambda s: None)
    with pytest.raises(_deploy.StackError) as info:
        _deploy.up(up_args(), rt, spawn=spawn, alive=lambda pid: False, port_taken=lambda port: False)

    assert "OSError: port taken" in streams.err.getvalue()
    assert str(info.value) == (
        f"the local stack exited with code 1 while starting; the end of {directory / 'stack.log'} is above"
    )
    assert not (directory / "stack.pid").exists()


# --- down --------------------------------------------------------------------------------------


def test_down_sends_sigterm_and_cleans_up(tmp_path: Path) -> None:
    write_state(tmp_path / "local", 31)
    (tmp_path / "local" / "stack.pid").write_text("31")
    live = {31}
    signals: list[tuple[int, int]] = []

    def kill(pid: int, sig: int) -> None:
        signals.append((pid, sig))
        live.discard(pid)

    streams = Streams()
    code = _deploy.down(argparse.Namespace(), runtime(tmp_path, streams), alive=live.__contains__, kill=kill)

    assert code == 0
    assert signals == [(31, signal.SIGTERM)]
    assert streams.out.getvalue() == "Stratus local stack stopped (pid 31)\n"
    assert list((tmp_path / "local").iterdir()) == []


def test_down_kills_a_stack_that_ignores_sigterm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_deploy, "STOP_TIMEOUT", 0.0)
    write_state(tmp_path / "local", 31)
    live = {31}
    signals: list[tuple[str, int]] = []

    def kill_group(pid: int, sig: int) -> None:
        signals.append(("group", sig))
        live.discard(pid)

    streams = Streams()
    code = _deploy.down(
        argparse.Namespace(),
        runtime(tmp_path, streams, sleep=lambda s: None),
        alive=live.__contains__,
        kill=lambda pid, sig: signals.append(("pid", sig)),
        kill_group=kill_group,
    )

    assert code == 0
    assert signals == [("pid", signal.SIGTERM), ("group", signal.SIGKILL)]


def test_down_is_idempotent(tmp_path: Path) -> None:
    streams = Streams()
    assert cli.main(["deploy", "local", "down"], runtime=runtime(tmp_path, streams)) == 0
    assert streams.out.getvalue() == "Stratus local stack is not running\n"


def _state_folder(directory: Path) -> None:
    for name in (
        "db/snapshot.json",
        "s3/bucket/contexts/x.tar.zst.obj",
        "agents/local-0/runs/1.1/process.json",
    ):
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text("kept")
    (directory / "agents.json").write_text("[]")
    (directory / "stack.log").write_text("the last run's log\n")


def test_down_keeps_the_state_for_the_next_up(tmp_path: Path) -> None:
    _state_folder(tmp_path / "local")
    streams = Streams()
    assert cli.main(["deploy", "local", "down"], runtime=runtime(tmp_path, streams)) == 0
    assert (tmp_path / "local" / "db" / "snapshot.json").read_text() == "kept"
    assert (tmp_path / "local" / "s3" / "bucket" / "contexts" / "x.tar.zst.obj").exists()


def test_down_delete_db_forgets_the_state(tmp_path: Path) -> None:
    write_state(tmp_path / "local", 31)
    _state_folder(tmp_path / "local")
    live = {31}
    streams = Streams()

    code = _deploy.down(
        argparse.Namespace(delete_db=True),
        runtime(tmp_path, streams),
        alive=live.__contains__,
        kill=lambda pid, sig: live.discard(pid),
    )

    assert code == 0
    assert sorted(p.name for p in (tmp_path / "local").iterdir()) == ["stack.log"]
    assert (
        streams.out.getvalue().splitlines()[-1] == f"Deleted the local stack's state in {tmp_path / 'local'}"
    )


def test_up_passes_pools_and_a_cluster_config_to_the_stack_and_lists_them(tmp_path: Path) -> None:
    directory = tmp_path / "local"
    config = tmp_path / "cluster.yaml"
    config.write_text("resource_pools: [{pool_name: big}]\n")
    started: list[list[str]] = []
    pools = [
        {"name": "default", "scheduler": "priority", "preemption": True, "agents": 1, "slots": 2},
        {"name": "gpu", "scheduler": "fair_share", "preemption": False, "agents": 2, "slots": 1},
    ]

    def spawn(command: list[str], log: Path) -> FakeProcess:
        started.append(command)
        write_state(directory, 4242, pools=pools)
        return FakeProcess(4242)

    streams = Streams()
    args = up_args(pool=["gpu:scheduler=fair_share:agents=2:slots=1"], cluster_config=str(config))
    code = _deploy.up(
        args, runtime(tmp_path, streams), spawn=spawn, alive=lambda pid: False, port_taken=lambda port: False
    )

    assert code == 0, streams.err.getvalue()
    assert started[0][-4:] == [
        "--pool",
        "gpu:scheduler=fair_share:agents=2:slots=1",
        "--cluster-config",
        str(config),
    ]
    assert streams.out.getvalue().splitlines()[1] == (
        "  resource pools: default (1 agent of 2 slots, priority, preemption); gpu (2 agents of 1 slot, fair_share)"
    )


def test_up_with_the_ec2_backend_makes_the_default_pool_a_group(tmp_path: Path) -> None:
    directory = tmp_path / "local"
    started: list[list[str]] = []
    pools = [
        {"name": "default", "scheduler": "priority", "preemption": True, "agents": 0, "slots": 2,
         "backend": "ec2", "min_instances": 0, "max_instances": 1},
    ]  # fmt: skip

    def spawn(command: list[str], log: Path) -> FakeProcess:
        started.append(command)
        write_state(directory, 4242, pools=pools)
        return FakeProcess(4242)

    streams = Streams()
    code = _deploy.up(
        up_args(backend="ec2"), runtime(tmp_path, streams), spawn=spawn, alive=lambda pid: False,
        port_taken=lambda port: False,
    )  # fmt: skip

    assert code == 0, streams.err.getvalue()
    assert started[0][-2:] == ["--pool", "default:backend=ec2"]
    assert (
        "(default (ec2: 0 to 1 instances of 2 slots, priority, preemption), pid 4242)"
        in streams.out.getvalue()
    )


def test_up_refuses_a_cluster_config_that_is_not_a_file(tmp_path: Path) -> None:
    streams = Streams()
    code = cli.main(
        ["deploy", "local", "up", "--cluster-config", str(tmp_path / "nope.yaml")],
        runtime=runtime(tmp_path, streams),
    )
    assert code == 1
    assert f"--cluster-config {tmp_path / 'nope.yaml'} is not a file" in streams.err.getvalue()


def test_status_lists_the_pools_of_a_stack_with_several(tmp_path: Path) -> None:
    pools = [
        {"name": "default", "scheduler": "priority", "preemption": True, "agents": 1, "slots": 2},
        {"name": "cpu", "scheduler": "priority", "preemption": False, "agents": 3, "slots": 1},
    ]
    write_state(tmp_path / "local", 55, pools=pools)
    streams = Streams()

    _deploy.status(argparse.Namespace(), runtime(tmp_path, streams), alive=lambda pid: pid == 55)

    assert (
        "  pools:   default (1 agent of 2 slots, priority, preemption); "
        "cpu (3 agents of 1 slot, priority, no preemption)"
    ) in streams.out.getvalue().splitlines()


def test_up_with_warm_start_starts_the_stack_with_it(tmp_path: Path) -> None:
    """Issue 12: `det deploy local up --warm-start` reaches the stack, which hands it to its agents."""
    started: list[list[str]] = []
    directory = tmp_path / "local"

    def spawn(command: list[str], log: Path) -> FakeProcess:
        started.append(command)
        write_state(directory, 4242)
        return FakeProcess(4242)

    streams = Streams()
    code = _deploy.up(
        up_args(warm_start=True),
        runtime(tmp_path, streams),
        spawn=spawn,
        alive=lambda pid: False,
        port_taken=lambda port: False,
    )
    assert code == 0, streams.err.getvalue()
    assert started[0][-1] == "--warm-start"
    assert cli.build_parser().parse_args(["deploy", "local", "up", "--warm-start"]).warm_start is True


# --- det deploy aws up: the compute (flags, pools file, slots, AMI, network), on a fake of its AWS calls -----


class FakeAws:
    """The AWS calls of `det/deploy/aws_compute.plan_compute`, answering from dicts and recording what was asked."""

    region = "us-east-1"

    def __init__(
        self, ssm: dict[str, str] | None = None, network: tuple[str, list[str]] | None = None
    ) -> None:
        self.ssm = {_aws_compute.DLAMI_PARAMETER: "ami-0aaaaaaaaaaaaaaaa"} if ssm is None else ssm
        self.network = ("vpc-1", ["subnet-a", "subnet-b"]) if network is None else network
        self.asked: list[str] = []

    def instance_types(self, names: Sequence[str]) -> dict[str, InstanceShape]:
        shapes = {"g5.xlarge": InstanceShape(4, 1), "g5.12xlarge": InstanceShape(48, 4),
                  "p4d.24xlarge": InstanceShape(96, 8), "c6i.large": InstanceShape(2, 0, 4096),
                  "g4dn.xlarge": InstanceShape(4, 1)}  # fmt: skip
        return {name: shapes[name] for name in names}

    def service_quota(self, code: str) -> float | None:
        return 1000.0

    def ssm_parameter(self, name: str) -> str | None:
        self.asked.append(f"ssm {name}")
        return self.ssm.get(name)

    def ssm_parameters_under(self, path: str) -> dict[str, str]:
        self.asked.append(f"ssm under {path}")
        return {name: value for name, value in self.ssm.items() if name.startswith(path)}

    def default_network(self) -> tuple[str, list[str]] | None:
        return self.network if self.network[0] else None

    def subnets_vpc(self, subnets: Sequence[str]) -> str:
        self.asked.append(f"subnets {','.join(subnets)}")
        return "vpc-given"

    def check_key_pair(self, name: str) -> None:
        self.asked.append(f"key pair {name}")

    # The capacity checks (tests/unit/det/deploy/test_capacity.py): one zone offering every type, no EFA.
    def subnet_zones(self, subnets: Sequence[str]) -> dict[str, str]:
        return {subnet: "us-east-1a" for subnet in subnets}

    def offering_zones(self, types: Sequence[str]) -> dict[str, frozenset[str]]:
        return {kind: frozenset({"us-east-1a"}) for kind in types}

    def efa_support(self, types: Sequence[str]) -> dict[str, bool]:
        return {kind: False for kind in types}

    def named_quotas(self, service: str, names: Sequence[str]) -> dict[str, QuotaValue | None]:
        return {name: QuotaValue("L-00000000", 1000.0) for name in names}


def aws_up_args(*flags: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(["deploy", "aws", "up", *flags])


def test_aws_up_without_flags_plans_one_ec2_pool_of_one_gpu_agents_on_the_deep_learning_ami() -> None:
    plan = _aws_compute.plan_compute(aws_up_args(), FakeAws())

    assert plan.pools is not None
    (pool,) = plan.pools
    assert (pool.name, pool.backend, pool.slots_per_agent, pool.max_agents) == ("default", "ec2", 1, 5)
    assert pool.provider == Provider(("g5.xlarge",), 0, 5, False, "", 600.0, 1200.0, gpus=1)
    assert plan.parameters == {"AgentAmiId": "ami-0aaaaaaaaaaaaaaaa", "AgentSubnetIds": "subnet-a,subnet-b",
                               "AgentVpcId": "vpc-1", "InboundCidr": "0.0.0.0/0", "KeyName": ""}  # fmt: skip
    assert plan.ami_source == _aws_compute.DLAMI_PARAMETER and plan.warnings == ()


def test_aws_up_takes_determineds_compute_flags() -> None:
    aws = FakeAws()
    args = aws_up_args(
        "--gpu-agent-instance-type", "p4d.24xlarge", "--min-dynamic-agents", "1", "--max-dynamic-agents", "2",
        "--spot", "--spot-max-price", "9.50", "--max-idle-agent-period", "5m", "--max-agent-starting-period", "1h",
        "--inbound-cidr", "203.0.113.0/24", "--agent-subnet-id", "subnet-x,subnet-y", "--agent-subnet-id",
        "subnet-z", "--keypair", "me", "--agent-ami", "ami-0123456789abcdef0",
    )  # fmt: skip

    plan = _aws_compute.plan_compute(args, aws)

    assert plan.pools is not None
    (pool,) = plan.pools
    assert (pool.slots_per_agent, pool.max_agents) == (8, 2)
    assert pool.provider == Provider(("p4d.24xlarge",), 1, 2, True, "9.50", 300.0, 3600.0, gpus=8)
    assert plan.parameters == {"AgentAmiId": "ami-0123456789abcdef0", "AgentSubnetIds": "subnet-x,subnet-y,subnet-z",
                               "AgentVpcId": "vpc-given", "InboundCidr": "203.0.113.0/24", "KeyName": "me"}  # fmt: skip
    assert plan.ami_source == "--agent-ami"
    assert aws.asked == ["subnets subnet-x,subnet-y,subnet-z", "key pair me"]  # no SSM lookup


def test_the_ami_falls_back_to_the_newest_pytorch_dlami_when_the_pinned_name_is_gone() -> None:
    path = _aws_compute.DLAMI_PATH
    aws = FakeAws(
        ssm={
            path
            + "oss-nvidia-driver-gpu-pytorch-2.9-amazon-linux-2023/latest/ami-id": "ami-00000000000000029",
            path
            + "oss-nvidia-driver-gpu-pytorch-2.10-amazon-linux-2023/latest/ami-id": "ami-00000000000000210",
            path + "oss-nvidia-driver-gpu-pytorch-2.12-ubuntu-24.04/latest/ami-id": "ami-0000000000000u212",
            path + "base-oss-nvidia-driver-gpu-amazon-linux-2023/latest/ami-id": "ami-000000000000base",
        }
    )

    plan = _aws_compute.plan_compute(aws_up_args(), aws)

    assert plan.parameters["AgentAmiId"] == "ami-00000000000000210"  # 2.10 is newer than 2.9
    assert plan.ami_source == path + "oss-nvidia-driver-gpu-pytorch-2.10-amazon-linux-2023/latest/ami-id"
    assert aws.asked == [f"ssm {_aws_compute.DLAMI_PARAMETER}", f"ssm under {path}"]


@pytest.mark.parametrize(
    ("flags", "aws", "message"),
    [
        ((), FakeAws(ssm={}), "no Deep Learning AMI is published in us-east-1 "),
        ((), FakeAws(network=("", [])), "region us-east-1 has no default VPC with subnets; pass --agent-subnet-id"),
        (("--agent-ami", "my-ami"), FakeAws(), "--agent-ami 'my-ami' is not an AMI id"),
        (("--inbound-cidr", "10.0.0.1/8"), FakeAws(), "--inbound-cidr '10.0.0.1/8' is not an IPv4 CIDR"),
        (("--inbound-cidr", "10.0.0.0/8"), FakeAws(), "there is no SSH without --keypair; give --keypair NAME"),
        (("--max-idle-agent-period", "10"), FakeAws(), "--max-idle-agent-period '10' is not a duration"),
        (("--no-spot", "--spot-max-price", "1"), FakeAws(), "--spot-max-price applies to spot instances only; set --spot"),
        (("--min-dynamic-agents", "6"), FakeAws(), "--min-dynamic-agents 6 and --max-dynamic-agents 5 must satisfy"),
        (("--no-compute", "--spot"), FakeAws(), "--no-compute deploys no cloud pool; drop --spot or --no-compute"),
        (("--no-compute", "--keypair", "me"), FakeAws(), "drop --keypair or --no-compute"),
        (("--pools-file", "p.yaml", "--max-dynamic-agents", "2"), FakeAws(),
         "--max-dynamic-agents sets the default pool of the flags; with --pools-file, set it in the file"),
    ],
)  # fmt: skip
def test_aws_up_refuses_compute_it_cannot_deploy(flags: tuple[str, ...], aws: FakeAws, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        _aws_compute.plan_compute(aws_up_args(*flags), aws)
    assert message in str(caught.value)


def test_no_compute_plans_the_templates_local_pools_and_asks_aws_nothing() -> None:
    aws = FakeAws()
    plan = _aws_compute.plan_compute(aws_up_args("--no-compute"), aws)
    assert plan.pools is None and plan.parameters == {} and aws.asked == []
    assert _aws_compute.describe(plan) == "pools: the template's default (local, agents started by hand)"


def test_a_pools_file_gives_the_pools_with_slots_from_their_instance_types(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text(
        "resource_pools:\n"
        "  - pool_name: default\n"
        "  - pool_name: big\n"
        "    scheduler: {type: fair_share}\n"
        "    provider: {type: ec2, instance_type: g5.12xlarge, max_instances: 2, spot: true}\n"
        "  - pool_name: cpu\n"
        "    provider: {type: ec2, instance_type: c6i.large, max_instances: 8}\n"
    )

    plan = _aws_compute.plan_compute(aws_up_args("--pools-file", str(path)), FakeAws())

    assert plan.pools is not None
    assert [(p.name, p.backend, p.slots_per_agent, p.max_agents) for p in plan.pools] == [
        ("default", "local", None, None), ("big", "ec2", 4, 2), ("cpu", "ec2", 1, 8)
    ]  # fmt: skip
    assert _aws_compute.describe(plan).splitlines() == [
        " Name    | Backend   | Instance Type   | Slots Per Agent   | Min Agents   | Max Agents   | Spot   | Max Idle   | Scheduler",
        "---------+-----------+-----------------+-------------------+--------------+--------------+--------+------------+----------------------",
        " default | local     |                 |                   |              |              |        |            | priority, preemption",
        " big     | ec2       | g5.12xlarge     | 4                 | 0            | 2            | yes    | 10m        | fair_share",
        " cpu     | ec2       | c6i.large       | 1                 | 0            | 8            | no     | 10m        | priority, preemption",
        " Parameter      | Value",
        "----------------+" + "-" * 133,
        f" AgentAmiId     | ami-0aaaaaaaaaaaaaaaa (from {_aws_compute.DLAMI_PARAMETER})",
        " AgentSubnetIds | subnet-a,subnet-b",
        " AgentVpcId     | vpc-1",
        " InboundCidr    | 0.0.0.0/0",
        " KeyName        |",
    ]  # fmt: skip


def test_batch_and_sagemaker_pools_are_planned_with_their_images(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text(
        "resource_pools:\n"
        "  - pool_name: default\n"
        "    provider: {type: batch, instance_type: g5.xlarge, max_instances: 2, image: example/train:1}\n"
        "  - pool_name: sm\n"
        "    provider: {type: sagemaker, instance_type: ml.g5.xlarge, image: example/train:1}\n"
    )
    plan = _aws_compute.plan_compute(aws_up_args("--pools-file", str(path)), FakeAws())
    assert plan.pools is not None
    batch, sagemaker = plan.pools
    assert (batch.backend, batch.max_agents, batch.slots_per_agent) == ("batch", 2, 1)
    assert batch.provider is not None and batch.provider.image == "example/train:1"
    assert sagemaker.backend == "sagemaker" and sagemaker.provider is not None
    assert sagemaker.provider.instance_types == ("ml.g5.xlarge",) and sagemaker.provider.gpus == 1


def test_a_sagemaker_pool_without_an_image_gets_aws_pytorch_training_image(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text(
        "resource_pools:\n"
        "  - pool_name: default\n"
        "    provider: {type: sagemaker, instance_type: ml.g5.xlarge}\n"
    )
    aws = FakeAws()
    plan = _aws_compute.plan_compute(aws_up_args("--pools-file", str(path)), aws)
    assert plan.pools is not None and plan.pools[0].provider is not None
    # The SageMaker SDK's own tables: the account and repository of AWS's deep learning containers.
    assert plan.pools[0].provider.image == (
        f"763104351884.dkr.ecr.{aws.region}.amazonaws.com/pytorch-training:2.5-gpu-py311"
    )


def test_agent_flags_without_a_cloud_pool_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text("resource_pools:\n  - pool_name: default\n")
    aws = FakeAws()
    plan = _aws_compute.plan_compute(aws_up_args("--pools-file", str(path)), aws)
    assert plan.pools is not None and plan.pools[0].backend == "local" and plan.parameters == {}
    assert aws.asked == []  # no AMI, no network: no EC2 pool
    with pytest.raises(UsageError) as caught:
        _aws_compute.plan_compute(aws_up_args("--pools-file", str(path), "--keypair", "me"), aws)
    assert (
        str(caught.value)
        == f"--keypair sets the cloud agents, and --pools-file {path} has no cloud pool; drop it"
    )


def test_the_plan_carries_the_types_vcpus_which_size_a_batch_pool_of_any_type(tmp_path: Path) -> None:
    """g4dn.xlarge is not in the template's own table: the vCPUs EC2 gave the plan size its pool, as
    `det deploy aws up` renders it (`infra.aws.template.template(plan.pools, plan.vcpus)`)."""
    from infra.aws.template import template

    path = tmp_path / "pools.yaml"
    path.write_text(
        "resource_pools:\n"
        "  - pool_name: default\n"
        "    provider: {type: batch, instance_type: g4dn.xlarge, max_instances: 3, image: example/train:1}\n"
    )
    plan = _aws_compute.plan_compute(aws_up_args("--pools-file", str(path)), FakeAws())
    assert plan.vcpus == {"g4dn.xlarge": 4}
    assert plan.pools is not None
    resources = template(plan.pools, plan.vcpus)["Resources"]
    compute = resources["DefaultPoolOnDemandEnvironment"]["Properties"]["ComputeResources"]
    assert (compute["InstanceTypes"], compute["MaxvCpus"]) == (["g4dn.xlarge"], 3 * 4)
    container = resources["DefaultPoolJobDefinition"]["Properties"]["ContainerProperties"]
    requirements = {r["Type"]: r["Value"] for r in container["ResourceRequirements"]}
    assert (requirements["VCPU"], requirements["GPU"]) == ("4", "1")


def test_the_plan_carries_the_types_memory_where_ec2_gave_it(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text(
        "resource_pools:\n"
        "  - pool_name: default\n"
        "    provider: {type: batch, instance_type: [c6i.large, g4dn.xlarge], image: example/train:1}\n"
    )
    plan = _aws_compute.plan_compute(aws_up_args("--pools-file", str(path)), FakeAws())
    assert plan.memory == {"c6i.large": 4096}  # g4dn.xlarge's was not given by this fake EC2


def test_sagemaker_pools_only_need_no_agent_network_and_refuse_its_flags(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text(
        "resource_pools:\n"
        "  - pool_name: default\n"
        "    provider: {type: sagemaker, instance_type: ml.g5.xlarge, image: example/train:1}\n"
    )
    aws = FakeAws(network=("", []))  # no default VPC: nothing here needs one
    plan = _aws_compute.plan_compute(aws_up_args("--pools-file", str(path)), aws)
    assert plan.pools is not None and plan.pools[0].backend == "sagemaker"
    assert plan.parameters == {} and plan.vcpus == {"g5.xlarge": 4} and aws.asked == []
    with pytest.raises(UsageError) as caught:
        _aws_compute.plan_compute(
            aws_up_args("--pools-file", str(path), "--agent-subnet-id", "subnet-x"), aws
        )
    assert str(caught.value) == (
        f"--agent-subnet-id sets the EC2 and Batch agents, and --pools-file {path} has only SageMaker pools "
        "(their jobs run in SageMaker's own network, from their image); drop it"
    )


def test_a_pool_of_types_with_different_gpu_counts_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text(
        "resource_pools:\n  - pool_name: default\n"
        "    provider: {type: ec2, instance_type: [g5.xlarge, g5.12xlarge]}\n"
    )
    with pytest.raises(UsageError) as caught:
        _aws_compute.plan_compute(aws_up_args("--pools-file", str(path)), FakeAws())
    assert str(caught.value) == (
        f"--pools-file {path}: pool 'default' mixes instance types of different GPU counts (g5.xlarge 1, "
        "g5.12xlarge 4); an agent's slots are its pool's, so give types of one GPU count"
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--add-tag", "aws:team=vision"),
         "--add-tag 'aws:team=vision': tag aws:team=vision: keys starting with 'aws:' are AWS's own; use another key"),
        (("--add-tag", "stratus:cluster-id=other"), "keys starting with 'stratus:' are Stratus's own"),
        (("--add-tag", "Name=mine"), "Stratus names each pool's instances with 'Name'"),
        (("--add-tag", "k" * 129 + "=v"), "a key has 1 to 128 characters (this one 129)"),
        (("--add-tag", "team=" + "v" * 257), "a value has at most 256 characters (this one 257)"),
        (("--add-tag", "team=a,b"), "--add-tag 'team=a,b': tag team=a,b: its value has ','"),
        (("--add-tag", "=vision"), "--add-tag '=vision' is not KEY=VALUE"),
        (tuple(f"--add-tag=k{i:02}=v" for i in range(40)), "--add-tag: 41 tags: at most 40"),  # and team
    ],
)  # fmt: skip
def test_aws_up_refuses_a_tag_aws_would_refuse_before_asking_aws_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: tuple[str, ...], message: str
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens: any AWS call would fail
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    streams = Streams()
    argv = [
        "deploy",
        "aws",
        "up",
        "--cluster-id",
        "lab",
        "--add-tag",
        "team=vision",
        *flags,
        "--region",
        "us-east-1",
    ]
    code = cli.main(argv, runtime=runtime(tmp_path, streams))
    assert code == 2 and message in streams.err.getvalue()
    assert "AWS call failed" not in streams.err.getvalue()


def test_aws_up_passes_the_users_tags_not_the_cluster_tag_to_the_template() -> None:
    from det.deploy.aws import _render_template
    from det.deploy.aws_checks import user_tag_flags

    added = user_tag_flags(["team=vision", "cost-center=4711", "team=vision-2"])  # the last value of a key
    assert added == {"cost-center": "4711", "team": "vision-2"}
    rendered = _render_template(None, None, added)  # --no-compute: the default pools
    variables = rendered["Resources"]["ApiFunction"]["Properties"]["Environment"]["Variables"]
    assert variables["STRATUS_TAGS"] == '{"cost-center":"4711","team":"vision-2"}'
    with pytest.raises(
        UsageError, match=r"^--add-tag: the tags take \d+ bytes of the control plane's environment"
    ):
        _render_template(None, None, {f"key-{i:02}": "v" * 256 for i in range(20)})


class FakeGroups:
    def __init__(self) -> None:
        self.scaled: list[str] = []

    def stack_groups(self, tag: str, stack: str) -> list[dict[str, object]]:
        assert (tag, stack) == ("stratus:cluster-id", "Lab")
        return [{"AutoScalingGroupName": "Lab-default"}, {"AutoScalingGroupName": "Lab-big"}]

    def scale_to_zero(self, group: dict[str, str]) -> list[str]:
        self.scaled.append(group["AutoScalingGroupName"])
        return ["i-1", "i-2"] if group["AutoScalingGroupName"] == "Lab-default" else []


def test_down_scales_every_group_of_the_stack_to_zero_saying_so(tmp_path: Path) -> None:
    streams, groups = Streams(), FakeGroups()
    _aws_compute.scale_groups_to_zero(runtime(tmp_path, streams), groups, "stratus:cluster-id", "Lab")
    assert groups.scaled == ["Lab-default", "Lab-big"]
    assert streams.out.getvalue().splitlines() == [
        "group Lab-default: min 0 / max 0 / desired 0; terminated i-1, i-2",
        "group Lab-big: min 0 / max 0 / desired 0; no instances",
    ]
