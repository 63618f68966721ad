"""The launchers' pure builders: exact command lines, worker environments, overrides, the environment read."""

from __future__ import annotations

import dataclasses

import pytest

from stratus.launchers import deepspeed, horovod, torch_distributed, wrap_rank
from stratus.launchers._argv import FlagSpec, Script, Trial, merge_flags, parse_launch_args, worker_command
from stratus.launchers._info import LaunchInfo, load_launch_info
from stratus.launchers.errors import LaunchConfigError
from stratus.launchers.torch_distributed import LocalLaunch, build_worker_env, local_launch

ONE_NODE = LaunchInfo(slots=4, chief_port=29400)
TWO_NODES = LaunchInfo(
    slots=8,
    num_nodes=2,
    node_rank=1,
    chief_addr="10.0.0.1",
    chief_port=29500,
    node_addrs=("10.0.0.1", "10.0.0.2"),
)
WRAP = ["--module", "stratus.launchers.wrap_rank", "RANK", "--"]


# ---- the command line every launcher takes -----------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "overrides", "target"),
    [
        (["--trial", "model_def:Trial"], [], Trial("model_def:Trial")),
        (["--trial=model_def:Trial"], [], Trial("model_def:Trial")),
        (["train.py", "--lr", "0.1"], [], Script(("train.py", "--lr", "0.1"))),
        (["--", "script.py"], [], Script(("script.py",))),
        (["python3", "train.py", "--", "x"], [], Script(("python3", "train.py", "--", "x"))),
        (
            ["--nproc_per_node", "2", "--master_port=1234", "--", "python3", "t.py", "--", "y"],
            ["--nproc_per_node", "2", "--master_port=1234"],
            Script(("python3", "t.py", "--", "y")),
        ),
        (["--max_restarts", "1", "--", "--trial", "m:T"], ["--max_restarts", "1"], Trial("m:T")),
    ],
)
def test_parse_launch_args(argv: list[str], overrides: list[str], target: Trial | Script) -> None:
    assert parse_launch_args(argv, "usage") == (overrides, target)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "no command"),
        (["--"], "no command"),
        (["--nproc_per_node", "2", "train.py"], "do not end with '--'"),
        (["--trial"], "--trial takes exactly one"),
        (["--trial", "m:T", "extra"], "--trial takes exactly one"),
    ],
)
def test_parse_launch_args_refuses(argv: list[str], message: str) -> None:
    with pytest.raises(LaunchConfigError, match=message):
        parse_launch_args(argv, "usage")


def test_worker_command() -> None:
    assert worker_command(Trial("model_def:Trial")) == [
        "python3",
        "-m",
        "stratus.harness.exec.run_trial",
        "model_def:Trial",
    ]
    assert worker_command(Script(("train.py", "-x")), "/venv/bin/python") == [
        "/venv/bin/python",
        "train.py",
        "-x",
    ]
    assert worker_command(Script(("python3", "-m", "pkg.train"))) == ["python3", "-m", "pkg.train"]
    assert worker_command(Script(("./run.sh", "a"))) == ["./run.sh", "a"]


# ---- overrides ---------------------------------------------------------------------------------------

SPEC = FlagSpec(
    aliases={"-n": "--count"},
    switches=frozenset({"--quiet"}),
    valued=frozenset({"--extra-args"}),
    replaces={"--hostfile": ("--hosts",)},
)
BASE: list[tuple[str, str | None]] = [
    ("--count", "4"),
    ("--hosts", "a:4"),
    ("--flag_name", "x"),
    ("--quiet", None),
]


@pytest.mark.parametrize(
    ("overrides", "argv"),
    [
        ([], ["--count", "4", "--hosts", "a:4", "--flag_name", "x", "--quiet"]),
        (["--count", "8"], ["--count", "8", "--hosts", "a:4", "--flag_name", "x", "--quiet"]),
        (["--count=8"], ["--count=8", "--hosts", "a:4", "--flag_name", "x", "--quiet"]),
        (["-n", "8"], ["-n", "8", "--hosts", "a:4", "--flag_name", "x", "--quiet"]),
        (["--flag-name", "y"], ["--count", "4", "--hosts", "a:4", "--flag-name", "y", "--quiet"]),
        (["--flag_name=y"], ["--count", "4", "--hosts", "a:4", "--flag_name=y", "--quiet"]),
        (
            ["--new", "1", "--on"],
            ["--count", "4", "--hosts", "a:4", "--flag_name", "x", "--quiet", "--new", "1", "--on"],
        ),
        (
            ["--delta", "-1"],
            ["--count", "4", "--hosts", "a:4", "--flag_name", "x", "--quiet", "--delta", "-1"],
        ),
        (["--quiet", "--count", "2"], ["--count", "2", "--hosts", "a:4", "--flag_name", "x", "--quiet"]),
        (
            ["--extra-args", "-v --x"],
            ["--count", "4", "--hosts", "a:4", "--flag_name", "x", "--quiet", "--extra-args", "-v --x"],
        ),
        (["--hostfile", "/h"], ["--count", "4", "--flag_name", "x", "--quiet", "--hostfile", "/h"]),
        (["--count", "2", "--count", "3"], ["--count", "3", "--hosts", "a:4", "--flag_name", "x", "--quiet"]),
    ],
)
def test_merge_flags(overrides: list[str], argv: list[str]) -> None:
    assert merge_flags(BASE, overrides, SPEC) == argv


def test_an_override_that_is_not_a_flag_is_refused() -> None:
    with pytest.raises(LaunchConfigError, match="'3' is not a flag"):
        merge_flags(BASE, ["--count", "2", "3", "train.py"], SPEC)


# ---- torch_distributed: torchrun's command line (several nodes, or overrides only torchrun knows) -----


def test_torchrun_argv_one_node() -> None:
    assert torch_distributed.build_argv(ONE_NODE, [], Script(("script.py", "--epochs", "2"))) == [
        "python3", "-m", "torch.distributed.run",
        "--nnodes", "1", "--nproc_per_node", "4", "--node_rank", "0",
        "--master_addr", "127.0.0.1", "--master_port", "29400", "--max_restarts", "0",
        *WRAP, "python3", "script.py", "--epochs", "2",
    ]  # fmt: skip


def test_torchrun_argv_two_nodes_trial_and_features() -> None:
    argv = torch_distributed.build_argv(
        TWO_NODES,
        [],
        Trial("model_def:Trial"),
        python="/venv/bin/python",
        features=torch_distributed.OPTIONAL_FEATURES,
    )
    assert argv == [
        "/venv/bin/python", "-m", "torch.distributed.run",
        "--nnodes", "2", "--nproc_per_node", "4", "--node_rank", "1",
        "--master_addr", "10.0.0.1", "--master_port", "29500", "--max_restarts", "0",
        "--signals_to_handle", "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2",
        "--shutdown_timeout", "10",
        *WRAP, "/venv/bin/python", "-m", "stratus.harness.exec.run_trial", "model_def:Trial",
    ]  # fmt: skip


def test_torchrun_overrides_replace_in_place_and_append() -> None:
    overrides = [
        "--nproc-per-node=2",
        "--master_port",
        "1234",
        "--rdzv_backend",
        "c10d",
        "-r",
        "3",
        "--standalone",
    ]
    argv = torch_distributed.build_argv(ONE_NODE, overrides, Script(("python3", "train.py")))
    assert argv == [
        "python3", "-m", "torch.distributed.run",
        "--nnodes", "1", "--nproc-per-node=2", "--node_rank", "0",
        "--master_addr", "127.0.0.1", "--master_port", "1234", "--max_restarts", "0",
        "--rdzv_backend", "c10d", "-r", "3", "--standalone",
        *WRAP, "python3", "train.py",
    ]  # fmt: skip


@pytest.mark.parametrize("flag", [["-m"], ["--no_python"], ["--run-path"]])
def test_torchrun_refuses_overrides_that_change_how_the_command_runs(flag: list[str]) -> None:
    with pytest.raises(LaunchConfigError, match="cannot be overridden"):
        torch_distributed.build_argv(ONE_NODE, flag, Script(("train.py",)))


def test_torchrun_argv_needs_a_port() -> None:
    with pytest.raises(ValueError, match="master port"):
        torch_distributed.build_argv(LaunchInfo(slots=2), [], Script(("train.py",)))


def test_torchrun_argv_needs_the_chief_on_several_nodes() -> None:
    unresolved = load_launch_info({"STRATUS_NUM_NODES": "2", "STRATUS_SLOTS": "2", "STRATUS_CHIEF_PORT": "1"})
    with pytest.raises(LaunchConfigError, match="chief's address and port are not known on node 0 of 2"):
        torch_distributed.build_argv(unresolved, ["--rdzv_backend", "static"], Script(("train.py",)))


# ---- torch_distributed: the one-node launch the launcher runs itself ----------------------------------


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ([], LocalLaunch(4, "127.0.0.1", 29400)),
        (["--nproc_per_node", "2"], LocalLaunch(2, "127.0.0.1", 29400)),
        (["--master-addr=10.1.1.1", "--master_port", "1234"], LocalLaunch(4, "10.1.1.1", 1234)),
        (
            ["--nnodes", "1", "--node_rank", "0", "--max_restarts", "0", "--start_method", "fork"],
            LocalLaunch(4, "127.0.0.1", 29400),
        ),
        (["--nproc_per_node", "gpu"], None),
        (["--max_restarts", "2"], None),
        (["--nnodes", "2"], None),
        (["--rdzv_backend", "c10d"], None),
        (["--redirects", "3"], None),
        (["-m"], None),
    ],
)
def test_local_launch(overrides: list[str], expected: LocalLaunch | None) -> None:
    assert local_launch(ONE_NODE, overrides) == expected


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ([], LocalLaunch(4, "10.0.0.1", 29500, "", num_nodes=2, node_rank=1)),
        (
            ["--nnodes", "2:2", "--node_rank", "1", "--nproc_per_node", "2", "--master_port", "1234"],
            LocalLaunch(2, "10.0.0.1", 1234, "", num_nodes=2, node_rank=1),
        ),
        (["--nnodes", "2"], LocalLaunch(4, "10.0.0.1", 29500, "", num_nodes=2, node_rank=1)),
        (["--nnodes", "1"], None),
        (["--nnodes", "1:2"], None),
        (["--node_rank", "0"], None),
        (["--max_restarts", "3"], None),
        (["--rdzv_backend", "c10d"], None),
    ],
)
def test_local_launch_on_several_nodes(overrides: list[str], expected: LocalLaunch | None) -> None:
    assert local_launch(TWO_NODES, overrides) == expected


def test_local_launch_needs_the_chief_on_several_nodes() -> None:
    unresolved = LaunchInfo(slots=4, num_nodes=2, node_rank=1, chief_addr="")
    assert not unresolved.peers_known and TWO_NODES.peers_known and ONE_NODE.peers_known
    with pytest.raises(LaunchConfigError, match="STRATUS_CHIEF_ADDR"):
        local_launch(unresolved, [])
    with pytest.raises(LaunchConfigError, match="not known"):  # an address but no port
        local_launch(LaunchInfo(slots=4, num_nodes=2, chief_addr="10.0.0.1"), [])


def test_local_launch_free_port_and_run_id() -> None:
    assert local_launch(LaunchInfo(slots=0, run_id="r-7"), []) == LocalLaunch(1, "127.0.0.1", None, "r-7")


def test_build_worker_env() -> None:
    base = {"PATH": "/bin", "STRATUS_TRIAL_ID": "7", "STRATUS_LAUNCHER_REPORT": "/tmp/r.json"}
    env = build_worker_env(LocalLaunch(2, "127.0.0.1", 29400, "run-3"), 1, base)
    assert env == {
        "PATH": "/bin",
        "STRATUS_TRIAL_ID": "7",
        "RANK": "1",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "0",
        "GROUP_WORLD_SIZE": "1",
        "ROLE_NAME": "default",
        "ROLE_RANK": "1",
        "ROLE_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29400",
        "TORCHELASTIC_RUN_ID": "run-3",
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "OMP_NUM_THREADS": "1",
    }
    assert base["STRATUS_LAUNCHER_REPORT"] == "/tmp/r.json"  # the input is not changed


def test_build_worker_env_node_1_of_2() -> None:
    """Two slots per node: node 1 runs global ranks 2 and 3; global rank 0 (on the chief) has the store."""
    launch = LocalLaunch(2, "10.0.0.1", 29500, "run-3", num_nodes=2, node_rank=1)
    assert launch.world_size == 4 and [launch.global_rank(r) for r in range(2)] == [2, 3]
    envs = [build_worker_env(launch, r, {"PATH": "/bin"}) for r in range(2)]
    torch_vars = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE"]
    assert [[env[k] for k in torch_vars] for env in envs] == [
        ["2", "0", "4", "2", "1", "2"],
        ["3", "1", "4", "2", "1", "2"],
    ]
    assert envs[1] == {
        "PATH": "/bin",
        "RANK": "3",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "4",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "1",
        "GROUP_WORLD_SIZE": "2",
        "ROLE_NAME": "default",
        "ROLE_RANK": "3",
        "ROLE_WORLD_SIZE": "4",
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500",
        "TORCHELASTIC_RUN_ID": "run-3",
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "OMP_NUM_THREADS": "1",
    }


def test_build_worker_env_keeps_the_users_choices() -> None:
    base = {"OMP_NUM_THREADS": "4", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}
    env = build_worker_env(LocalLaunch(1, "127.0.0.1", 1, ""), 0, base)
    assert (env["OMP_NUM_THREADS"], env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], env["TORCHELASTIC_RUN_ID"]) == (
        "4",
        "0",
        "none",
    )
    assert "OMP_NUM_THREADS" not in build_worker_env(LocalLaunch(1, "h", 1), 0, {})  # one worker: no cap


def test_build_worker_env_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="master port"):
        build_worker_env(LocalLaunch(2, "127.0.0.1", None), 0, {})
    with pytest.raises(ValueError, match="outside"):
        build_worker_env(LocalLaunch(2, "127.0.0.1", 1), 2, {})


# ---- horovod ------------------------------------------------------------------------------------------


def test_horovod_argv_one_node() -> None:
    assert horovod.build_argv(ONE_NODE, [], Script(("train.py",))) == [
        "horovodrun", "-np", "4", "-H", "localhost:4", "--start-timeout", "120",
        "python3", "-m", "stratus.launchers.wrap_rank", "HOROVOD_RANK,OMPI_COMM_WORLD_RANK,PMI_RANK", "--",
        "python3", "train.py",
    ]  # fmt: skip


def test_horovod_argv_two_nodes_with_overrides() -> None:
    overrides = [
        "--num-proc",
        "6",
        "--network-interface",
        "eth1",
        "-p",
        "12345",
        "--start-timeout=30",
        "--gloo",
    ]
    argv = horovod.build_argv(TWO_NODES, overrides, Trial("model_def:Trial"), python="/venv/bin/python")
    assert argv == [
        "horovodrun", "--num-proc", "6", "-H", "10.0.0.1:4,10.0.0.2:4", "--start-timeout=30",
        "--network-interface", "eth1", "-p", "12345", "--gloo",
        "/venv/bin/python", "-m", "stratus.launchers.wrap_rank", "HOROVOD_RANK,OMPI_COMM_WORLD_RANK,PMI_RANK", "--",
        "/venv/bin/python", "-m", "stratus.harness.exec.run_trial", "model_def:Trial",
    ]  # fmt: skip


def test_horovod_hostfile_override_drops_the_host_list() -> None:
    argv = horovod.build_argv(ONE_NODE, ["--hostfile", "/etc/hosts.txt"], Script(("./run.sh",)))
    assert argv[:7] == ["horovodrun", "-np", "4", "--start-timeout", "120", "--hostfile", "/etc/hosts.txt"]


def test_horovod_on_several_nodes_needs_the_addresses() -> None:
    info = LaunchInfo(slots=4, num_nodes=2, chief_addr="10.0.0.1", chief_port=29500)
    with pytest.raises(LaunchConfigError, match="STRATUS_NODE_ADDRS"):
        horovod.build_argv(info, [], Script(("train.py",)))


# ---- deepspeed ----------------------------------------------------------------------------------------

DS_TAIL = ["--no_python", "--no_local_rank", "python3", "-m", "stratus.launchers.wrap_rank", "RANK", "--"]


def test_deepspeed_argv_one_node() -> None:
    assert deepspeed.build_argv(ONE_NODE, [], Script(("train.py", "--deepspeed"))) == [
        "deepspeed", "--num_gpus", "4", "--master_addr", "127.0.0.1", "--master_port", "29400",
        *DS_TAIL, "python3", "train.py", "--deepspeed",
    ]  # fmt: skip


def test_deepspeed_argv_one_node_keeps_the_agents_gpus() -> None:
    info = LaunchInfo(slots=2, chief_port=29400, visible_devices="2,3")
    assert deepspeed.build_argv(info, [], Trial("m:T")) == [
        "deepspeed", "--master_addr", "127.0.0.1", "--master_port", "29400",
        *DS_TAIL, "python3", "-m", "stratus.harness.exec.run_trial", "m:T",
    ]  # fmt: skip


def test_deepspeed_argv_two_nodes() -> None:
    argv = deepspeed.build_argv(TWO_NODES, [], Script(("python3", "train.py")), hostfile="/tmp/hosts")
    assert argv == [
        "deepspeed", "--hostfile", "/tmp/hosts", "--no_ssh", "--node_rank", "1", "--num_nodes", "2",
        "--num_gpus", "4", "--master_addr", "10.0.0.1", "--master_port", "29500",
        *DS_TAIL, "python3", "train.py",
    ]  # fmt: skip
    assert deepspeed.hostfile_text(TWO_NODES) == "10.0.0.1 slots=4\n10.0.0.2 slots=4\n"
    # Two nodes on one machine (the local stack's pool): DeepSpeed needs distinct names.
    shared = dataclasses.replace(TWO_NODES, node_addrs=("127.0.0.1", "127.0.0.1"))
    assert deepspeed.hostfile_text(shared) == "127.0.0.1-node0 slots=4\n127.0.0.1-node1 slots=4\n"


def test_deepspeed_overrides() -> None:
    overrides = ["--master_port=1111", "--include", "localhost:0,2", "--bind_cores_to_rank"]
    assert deepspeed.build_argv(ONE_NODE, overrides, Script(("train.py",))) == [
        "deepspeed", "--master_addr", "127.0.0.1", "--master_port=1111",
        "--no_python", "--no_local_rank", "--include", "localhost:0,2", "--bind_cores_to_rank",
        "python3", "-m", "stratus.launchers.wrap_rank", "RANK", "--", "python3", "train.py",
    ]  # fmt: skip


def test_deepspeed_refuses_module_and_needs_a_hostfile_on_several_nodes() -> None:
    with pytest.raises(LaunchConfigError, match="--module"):
        deepspeed.build_argv(ONE_NODE, ["--module"], Script(("train.py",)))
    with pytest.raises(ValueError, match="hostfile"):
        deepspeed.build_argv(TWO_NODES, [], Script(("train.py",)))


# ---- wrap_rank's arguments ------------------------------------------------------------------------------


def test_wrap_rank_args() -> None:
    assert wrap_rank.parse_args(["3", "python3", "-c", "x"], {}) == (3, ["python3", "-c", "x"])
    assert wrap_rank.parse_args(["0", "--", "echo", "--"], {}) == (0, ["echo", "--"])
    env = {"OMPI_COMM_WORLD_RANK": "5", "PMI_RANK": "9"}
    assert wrap_rank.parse_args(["HOROVOD_RANK,OMPI_COMM_WORLD_RANK,PMI_RANK", "--", "x"], env) == (5, ["x"])


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        ([], {}, "no RANK"),
        (["1"], {}, "no command"),
        (["RANK", "x"], {}, "neither a number nor the name"),
        (["RANK", "x"], {"RANK": "one"}, "not a rank"),
    ],
)
def test_wrap_rank_args_refused(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(LaunchConfigError, match=message):
        wrap_rank.parse_args(argv, env)


# ---- the environment --------------------------------------------------------------------------------


def test_load_launch_info_defaults() -> None:
    assert load_launch_info({}) == LaunchInfo()
    assert LaunchInfo().slots_per_node == 1 and LaunchInfo().hosts == ("localhost",)


def test_load_launch_info_several_nodes() -> None:
    env = {
        "STRATUS_SLOTS": "8",
        "STRATUS_NUM_NODES": "2",
        "STRATUS_NODE_RANK": "1",
        "STRATUS_CHIEF_ADDR": "10.0.0.1",
        "STRATUS_NODE_ADDRS": "10.0.0.1, 10.0.0.2",
        "STRATUS_RUN_ID": "r1",
        "STRATUS_KILL_GRACE_S": "2.5",
        "STRATUS_LAUNCHER_REPORT": "/tmp/report.json",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3",
    }
    assert load_launch_info(env) == LaunchInfo(
        slots=8,
        num_nodes=2,
        node_rank=1,
        chief_addr="10.0.0.1",
        chief_port=29500,
        node_addrs=("10.0.0.1", "10.0.0.2"),
        run_id="r1",
        kill_grace=2.5,
        report_path="/tmp/report.json",
        visible_devices="0,1,2,3",
    )


def test_load_launch_info_several_nodes_leaves_the_chief_to_the_rendezvous() -> None:
    """No STRATUS_CHIEF_ADDR: not an error any more; the chief is unknown until resolve_peers."""
    info = load_launch_info({"STRATUS_SLOTS": "4", "STRATUS_NUM_NODES": "2", "STRATUS_NODE_RANK": "1"})
    assert (info.chief_addr, info.chief_port, info.node_addrs, info.peers_known) == ("", None, (), False)
    chief = load_launch_info({"STRATUS_SLOTS": "2", "STRATUS_NUM_NODES": "2", "STRATUS_CHIEF_PORT": "1234"})
    assert (chief.chief_addr, chief.chief_port) == ("", 1234)  # the port the chief will announce
    with pytest.raises(LaunchConfigError, match="the rendezvous gives them"):
        _ = info.hosts


def test_load_launch_info_aws_batch_multi_node_job() -> None:
    batch = {"AWS_BATCH_JOB_NUM_NODES": "3", "AWS_BATCH_JOB_NODE_INDEX": "2", "STRATUS_SLOTS": "6"}
    info = load_launch_info(batch)
    assert (info.num_nodes, info.node_rank, info.slots_per_node, info.peers_known) == (3, 2, 2, False)
    # Stratus's own variables win.
    info = load_launch_info({**batch, "STRATUS_NUM_NODES": "2", "STRATUS_NODE_RANK": "0"})
    assert (info.num_nodes, info.node_rank) == (2, 0)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"AWS_BATCH_JOB_NUM_NODES": "x"}, "AWS_BATCH_JOB_NUM_NODES='x' is not a whole number"),
        ({"STRATUS_SLOTS": "two"}, "not a whole number"),
        ({"STRATUS_SLOTS": "3", "STRATUS_NUM_NODES": "2", "STRATUS_CHIEF_ADDR": "h"}, "split evenly"),
        ({"STRATUS_NODE_RANK": "1"}, "outside 0..0"),
        ({"STRATUS_CHIEF_PORT": "70000"}, "not a TCP port"),
        ({"STRATUS_KILL_GRACE_S": "-1"}, "seconds >= 0"),
        ({"STRATUS_KILL_GRACE_S": "soon"}, "not a number of seconds"),
        ({"STRATUS_NODE_ADDRS": "a,b"}, "names 2 nodes"),
    ],
)
def test_load_launch_info_refuses(env: dict[str, str], message: str) -> None:
    with pytest.raises(LaunchConfigError, match=message):
        load_launch_info(env)
