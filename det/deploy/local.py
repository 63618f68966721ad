"""`det deploy local up | status | down`: the embedded stack as a detached process.

The stack is `python -m infra.local.stack --port P --slots N --state-dir DIR` (written in `infra/`).
It writes `DIR/stack.json` once it is ready and removes it when it exits. The CLI adds two files of
its own: `DIR/stack.pid` (the pid it started, so that a stack still starting can be seen and stopped)
and `DIR/stack.log` (the stack's stdout and stderr).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from det._client import ApiClient
from det._commands import Subcommands, needs_subcommand
from det._render import format_time, plural
from det._runtime import Runtime
from det.deploy.local_state import (
    DEFAULT_PORT,
    EXIT_NOT_RUNNING,
    LOG_FILE,
    PID_FILE,
    START_TIMEOUT,
    STOP_TIMEOUT,
    WAIT_STEP,
    Alive,
    Kill,
    Process,
    Spawn,
    StackState,
    inspect,
    log_tail,
    pid_alive,
    port_in_use,
    read_state,
    remove_stale_files,
    spawn_detached,
    state_dir,
)
from det.deploy.stack_command import describe_pools, differences, pool_arguments, stack_command
from det.errors import DetError, StackError
from stratus.contract.local_state import AGENTS_RECORD, STATE_DIRS
from stratus.contract.pools import BACKENDS, CLOUD_BACKENDS, SCHEDULER_KINDS, traits

# --- commands ---------------------------------------------------------------------------------


def add_parsers(targets: Subcommands) -> None:
    """`det deploy local up|cluster-up | status | down|cluster-down`."""
    local = targets.add_parser("local", help="the embedded stack on this machine")
    sub = local.add_subparsers(title="local commands", metavar="COMMAND")
    local.set_defaults(command=needs_subcommand(local))
    _add_up_parser(sub)
    sub.add_parser("status", help="whether the local stack runs (exit 3 if not)").set_defaults(command=status)
    down_cmd = sub.add_parser(
        "down",
        aliases=["cluster-down"],
        help="stop the local stack (its experiments, logs and checkpoints are kept)",
    )
    down_cmd.add_argument(
        "--delete-db",
        action="store_true",
        help="also delete what the stack keeps (experiments, trials, metrics, logs, checkpoints, contexts)",
    )
    down_cmd.set_defaults(command=down)


def _add_up_parser(sub: Subcommands) -> None:
    up_cmd = sub.add_parser("up", aliases=["cluster-up"], help="start the local stack")
    up_cmd.add_argument(
        "--slots",
        type=int,
        default=None,
        metavar="N",
        help="slots of each local agent (default: one per GPU that nvidia-smi lists, 2 on a machine without)",
    )
    up_cmd.add_argument(
        "--agents",
        type=int,
        default=None,
        metavar="N",
        help="local agents, each a node of this machine: a trial larger than one agent runs on several "
        "(default: 1)",
    )
    up_cmd.add_argument(
        "--pool",
        action="append",
        metavar=f"NAME[:scheduler={'|'.join(SCHEDULER_KINDS)}][:preemption=on|off][:priority=N][:slots=N]"
        f"[:agents=N][:backend={'|'.join(BACKENDS)}][:min=N][:max=N][:spot=on|off][:idle=S]",
        help="start a resource pool with its own agents (repeatable; slots and agents default to --slots "
        "and --agents; backend=ec2: an Auto Scaling group of min to max instances instead; batch and "
        "sagemaker: a job per trial in moto's Batch or SageMaker, run by a local runner); the pool "
        "'default' always exists",
    )
    up_cmd.add_argument(
        "--cluster-config",
        metavar="FILE",
        help="resource pools in the shape of Determined's master config (`resource_pools:` with pool_name, "
        f"scheduler {{type, preemption, default_priority}} and provider {{type: {'|'.join(CLOUD_BACKENDS)}, ...}} as "
        "`det deploy aws up --pools-file` reads them, plus agents and slots_per_agent for local pools)",
    )
    up_cmd.add_argument(
        "--backend",
        choices=BACKENDS,
        default=None,
        help="where the default pool's trials run: agents on this machine (local), or an EC2 Auto Scaling "
        "group in the stack's moto that scales from zero with the queue, each instance an agent process "
        "here (ec2; spot interruptions can be played, see infra/local/compute.py), or AWS Batch job queues "
        "in moto, each run a job whose agents run here (batch, infra/local/batch.py), or SageMaker training "
        "jobs in moto (sagemaker, infra/local/sagemaker.py)",
    )
    up_cmd.add_argument(
        "--warm-start",
        action="store_true",
        help="agents keep a warm interpreter (torch and the harness imported) and fork trials from it where "
        "safe, cutting each trial's start by the imports (their logs say warm or cold, and why)",
    )
    up_cmd.add_argument("--port", type=int, default=None, metavar="P", help="port of the API (default: 8080)")
    up_cmd.add_argument(
        "--moto-port",
        type=int,
        default=None,
        metavar="N",
        help="port of the embedded moto server, the stack's AWS (default: a free port; "
        "`det deploy local status` shows it)",
    )
    up_cmd.add_argument(
        "--detach",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run in the background (default); --no-detach runs in the foreground",
    )
    up_cmd.set_defaults(command=up)


def up(
    args: argparse.Namespace,
    rt: Runtime,
    *,
    spawn: Spawn = spawn_detached,
    alive: Alive = pid_alive,
    port_taken: Callable[[int], bool] = port_in_use,
) -> int:
    directory = state_dir(rt.environ)
    current = inspect(directory, alive)
    if current.kind == "running" and current.state is not None:
        return _already_running(args, rt, current.state)
    if current.kind == "starting":
        rt.say(
            f"Stratus local stack is already starting (pid {current.pid}); "
            "`det deploy local status` tells when it is ready"
        )
        return 0
    remove_stale_files(directory)
    if args.slots is not None and args.slots < 1:
        raise StackError(f"--slots {args.slots} must be at least 1")
    agents = 1 if getattr(args, "agents", None) is None else int(args.agents)
    if agents < 1:
        raise StackError(f"--agents {agents} must be at least 1")
    pools, cluster_config = pool_arguments(args)
    port = DEFAULT_PORT if args.port is None else args.port
    moto_port = getattr(args, "moto_port", None)
    _check_ports(port, moto_port, port_taken)
    directory.mkdir(parents=True, exist_ok=True)
    command = stack_command(
        port,
        args.slots,
        directory,
        agents,
        pools=pools,
        cluster_config=cluster_config,
        warm_start=bool(getattr(args, "warm_start", False)),
        moto_port=moto_port,
    )
    if not args.detach:
        return subprocess.call(command)
    log_path = directory / LOG_FILE
    process = spawn(command, log_path)
    (directory / PID_FILE).write_text(f"{process.pid}\n")
    rt.note(f"Starting the Stratus local stack (pid {process.pid}, log {log_path})")
    state = _wait_until_ready(rt, process, directory)
    slots = plural(state.slots, "slot")
    if state.agents > 1:
        slots = f"{plural(state.agents, 'agent')} of {slots}"
    if len(state.pools) == 1 and traits(str(state.pools[0].get("backend") or "local")).cloud:
        slots = describe_pools(state.pools)  # a cloud pool: no agent runs until something waits
    rt.say(f"Stratus local stack is up: {state.api_url} ({slots}, pid {state.pid})")
    if len(state.pools) > 1:
        rt.say("  resource pools: " + describe_pools(state.pools))
    _print_hint(rt, state.api_url)
    return 0


def _already_running(args: argparse.Namespace, rt: Runtime, state: StackState) -> int:
    """A second `up`: fine when it asks for nothing the running stack is not (say so, exit 0); an error
    naming the running stack and how to stop it when it asks for another port, slots or pools."""
    running = {
        "api_url": state.api_url,
        "moto_url": state.moto_url,
        "slots": state.slots,
        "agents": state.agents,
        "pools": state.pools,
    }
    asked = differences(args, running)
    if asked:
        raise StackError(
            f"a Stratus local stack already runs at {state.api_url} (pid {state.pid}), not as asked: "
            f"{'; '.join(asked)}; stop it with `det deploy local down` and run this again, or use it "
            f"with `export DET_MASTER={state.api_url}`"
        )
    rt.say(f"Stratus local stack is already running at {state.api_url} (pid {state.pid}), as asked")
    _print_hint(rt, state.api_url)
    return 0


def _check_ports(port: int, moto_port: int | None, port_taken: Callable[[int], bool]) -> None:
    for flag, value in (("--port", port), ("--moto-port", moto_port)):
        if value is not None and not 0 <= value < 65536:
            raise StackError(f"{flag} {value} is not a TCP port; pass a number from 1 to 65535")
    if moto_port and moto_port == port:
        raise StackError(f"--moto-port {moto_port} is the API's --port too; pass two different ports")
    for flag, value in (("--port", port), ("--moto-port", moto_port)):
        if value is not None and port_taken(value):
            raise StackError(
                f"port {value} on 127.0.0.1 is already in use; stop what listens there or pass {flag}"
            )


def status(args: argparse.Namespace, rt: Runtime, *, alive: Alive = pid_alive) -> int:
    directory = state_dir(rt.environ)
    current = inspect(directory, alive)
    if current.kind == "stopped":
        remove_stale_files(directory)
        rt.say("Stratus local stack: not running")
        rt.say("  start it with `det deploy local up`")
        return EXIT_NOT_RUNNING
    if current.kind == "starting" or current.state is None:
        rt.say(f"Stratus local stack: starting (pid {current.pid})")
        rt.say(f"  log:     {directory / LOG_FILE}")
        return EXIT_NOT_RUNNING
    state = current.state
    rt.say("Stratus local stack: running")
    for label, value in (
        ("pid", state.pid),
        ("API", state.api_url),
        ("moto", state.moto_url),
        ("slots", state.slots),
        *([("pools", describe_pools(state.pools))] if len(state.pools) > 1 else []),
        ("started", _format_started(state.started_at)),
        ("health", _health(rt, state.api_url)),
        ("log", directory / LOG_FILE),
    ):
        rt.say(f"  {label + ':':<8} {value}")
    return 0


def down(
    args: argparse.Namespace,
    rt: Runtime,
    *,
    alive: Alive = pid_alive,
    kill: Kill = os.kill,
    kill_group: Kill = os.killpg,
) -> int:
    directory = state_dir(rt.environ)
    current = inspect(directory, alive)
    if current.pid is None:
        remove_stale_files(directory)
        rt.say("Stratus local stack is not running")
        _delete_db(args, rt, directory)
        return 0
    pid = current.pid
    with contextlib.suppress(ProcessLookupError):
        kill(pid, signal.SIGTERM)
    if not _wait_for_exit(rt, pid, STOP_TIMEOUT, alive):
        rt.note(f"The stack (pid {pid}) did not stop within {STOP_TIMEOUT:.0f} s; killing it")
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill_group(pid, signal.SIGKILL)  # its own session: take its children along
        if not _wait_for_exit(rt, pid, 5.0, alive):
            raise StackError(f"cannot stop the local stack (pid {pid}); kill it by hand: kill -9 {pid}")
    remove_stale_files(directory)
    rt.say(f"Stratus local stack stopped (pid {pid})")
    _delete_db(args, rt, directory)
    return 0


def _delete_db(args: argparse.Namespace, rt: Runtime, directory: Path) -> None:
    """`--delete-db`: forget every experiment, trial, metric, log, checkpoint and context."""
    if not getattr(args, "delete_db", False):
        return
    removed = [name for name in STATE_DIRS if (directory / name).exists()]
    for name in removed:
        shutil.rmtree(directory / name, ignore_errors=True)
    (directory / AGENTS_RECORD).unlink(missing_ok=True)
    rt.say(f"Deleted the local stack's state in {directory}" if removed else "No state to delete")


# --- helpers ----------------------------------------------------------------------------------


def _wait_until_ready(rt: Runtime, process: Process, directory: Path) -> StackState:
    deadline = time.monotonic() + START_TIMEOUT
    with _spinner(rt, "Starting the Stratus local stack..."):
        while True:
            code = process.poll()
            if code is not None:
                _print_log_tail(rt, directory)
                remove_stale_files(directory)
                raise StackError(
                    f"the local stack exited with code {code} while starting; "
                    f"the end of {directory / LOG_FILE} is above"
                )
            state = read_state(directory)
            if state is not None and _healthy(rt, state.api_url):
                return state
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGTERM)
                _print_log_tail(rt, directory)
                remove_stale_files(directory)
                raise StackError(
                    f"the local stack was not ready within {START_TIMEOUT:.0f} s and was stopped; "
                    f"the end of {directory / LOG_FILE} is above"
                )
            rt.sleep(WAIT_STEP)


def _wait_for_exit(rt: Runtime, pid: int, timeout: float, alive: Alive) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        rt.sleep(WAIT_STEP)
    return True


def _healthy(rt: Runtime, api_url: str) -> bool:
    try:
        with ApiClient(api_url, transport=rt.transport) as client:
            return client.health().get("status") == "ok"
    except DetError:
        return False


def _health(rt: Runtime, api_url: str) -> str:
    try:
        with ApiClient(api_url, transport=rt.transport) as client:
            answer = client.health()
    except DetError as e:
        return f"unreachable ({e})"
    version = answer.get("version")
    return f"{answer.get('status', '?')}" + (f" (version {version})" if version else "")


def _print_hint(rt: Runtime, api_url: str) -> None:
    """The `export DET_MASTER=...` line, always: a stack on another port than the default is reached
    only through it, and a shell that set it for another stack would talk to that one."""
    if rt.environ.get("DET_MASTER", "").rstrip("/") == api_url.rstrip("/"):
        rt.say("DET_MASTER already points at it in this shell; elsewhere, point the CLI at it with:")
    else:
        rt.say("Point the CLI at it in this shell with:")
    rt.say(f"  export DET_MASTER={api_url}")


def _print_log_tail(rt: Runtime, directory: Path) -> None:
    tail = log_tail(directory / LOG_FILE)
    if tail:
        rt.note(f"--- last lines of {directory / LOG_FILE} ---")
        for line in tail:
            rt.note(line)
        rt.note("---")


def _format_started(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value).strftime("%Y-%m-%d %H:%M:%S")
    return (format_time(str(value)) if value else None) or "?"


@contextlib.contextmanager
def _spinner(rt: Runtime, text: str) -> Iterator[None]:
    if not rt.err_is_tty():
        yield
        return
    with Console(file=rt.err).status(text):
        yield
