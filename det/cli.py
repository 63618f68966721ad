"""The `det` command line (also installed as `stratus`), shaped like Determined's.

    det [-m MASTER] experiment|e  create | list|ls | describe | config | logs | activate|unpause
                                  | archive | unarchive | pause | cancel | kill | list-trials|lt
                                  | list-checkpoints|lc | download | delete | wait | dashboard | plot
                                  | set description|name|max-slots|priority|weight | label add|remove
    det [-m MASTER] checkpoint|c  list|ls | describe | download | delete|rm
    det [-m MASTER] trial|t       describe | logs | download | kill
    det [-m MASTER] job|j         list|ls | update|u | update-batch
    det example                   list|ls | copy|cp NAME [DIR]
    det deploy|d local            up|cluster-up | status | down|cluster-down
    det deploy|d aws              up | down | list | status

Every `DetError` ends the command with one line `Error: <message>` on stderr (plus one indented
line per config problem) and the error's exit code. Ctrl-C ends it with 130, SIGTERM and SIGHUP with
128+N, once what was being done has unwound (its temporary files removed, `det._signals`); a command
interrupted in a step it named says which and what it left (`Interrupted: ...`), else quietly.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from det import (
    _checkpoint,
    _cluster,
    _deploy,
    _deploy_aws,
    _examples,
    _exp_downloads,
    _experiment,
    _experiment_set,
    _job,
    _lifecycle,
    _master,
    _monitoring,
    _stop,
    _submit,
    _trial,
)
from det._master_url import master_url
from det._runtime import DEFAULT_MASTER, Runtime
from det._signals import EXIT_INTERRUPTED, Terminated, on_termination
from det.errors import ApiError, DetError

Command = Callable[[argparse.Namespace, Runtime], int]

EXIT_BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None, *, runtime: Runtime | None = None) -> int:
    """Run one command; `runtime` replaces the outside world (API transport, clock, streams) in tests."""
    rt = runtime or Runtime(environ=os.environ)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, or a usage error argparse already printed
        return e.code if isinstance(e.code, int) else 2
    command: Command | None = getattr(args, "command", None)
    if command is None:
        parser.print_help(rt.err)
        return 2
    try:
        with on_termination():
            rt = dataclasses.replace(rt, master=master_url(args.master, rt.environ.get("DET_MASTER")))
            return command(args, rt)
    except DetError as e:
        report_error(e, rt.err)
        return e.exit_code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Terminated as e:  # SIGTERM or SIGHUP: what was being done unwound, its files removed
        return e.exit_code
    except BrokenPipeError:
        # `det trial logs 3 | head`: the reader left; say nothing more, on a stdout that is gone.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def report_error(error: DetError, stream: TextIO) -> None:
    """`Error: <message>`, then one indented line per problem the API listed. Where the message already
    lists them (the API's `config has 2 problems: a: x; b: y`), only its head is kept: each problem
    is printed once."""
    problems = error.problems if isinstance(error, ApiError) else []
    lines = [_problem_line(p) for p in problems]
    message = str(error)
    first = message.find(lines[0]) if lines else -1
    if lines and first > 0 and all(line in message for line in lines):
        message = message[:first].rstrip(" :;") + ":"
    print(f"{error.label}: {message}", file=stream)
    for line in lines:
        print(f"  {line}", file=stream)
    stream.flush()


def _problem_line(problem: dict[str, str]) -> str:
    where = problem.get("path") or ""
    return f"{where}: {problem.get('message', '')}" if where else str(problem.get("message", ""))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="det", description="Stratus: Determined's CLI on a serverless control plane."
    )
    parser.add_argument(
        "-m",
        "--master",
        metavar="URL",
        help=f"the Stratus API (default: $DET_MASTER, else {DEFAULT_MASTER})",
    )
    parser.add_argument("-v", "--version", action="version", version=f"%(prog)s {_master.client_version()}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    _add_experiment(commands)
    _add_trial(commands)
    _job.add_parser(commands)
    _checkpoint.add_parser(commands)
    _cluster.add_parsers(commands)
    _master.add_parsers(commands)
    _examples.add_parser(commands)
    _add_deploy(commands)
    return parser


def _add_experiment(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    experiment = commands.add_parser("experiment", aliases=["e"], help="manage experiments")
    sub = experiment.add_subparsers(title="experiment commands", metavar="COMMAND")
    # `det e` alone lists, as in Determined.
    experiment.set_defaults(
        command=_experiment.list_experiments, all=False, limit=None, offset=None, json=False, csv=False
    )

    create = sub.add_parser("create", help="create an experiment")
    create.add_argument("config_file", type=Path, metavar="CONFIG", help="experiment config file (.yaml)")
    create.add_argument(
        "model_def", type=Path, nargs="?", metavar="CONTEXT", help="folder with the model code to upload"
    )
    create.add_argument(
        "-i",
        "--include",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="additional file or folder to put into the context (repeatable)",
    )
    create.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --config resources.slots_per_trial=2 (repeatable)",
    )
    how = create.add_mutually_exclusive_group()  # as in Determined
    how.add_argument(
        "-f",
        "--follow-first-trial",
        action="store_true",
        help="follow the logs of the first trial that is created",
    )
    how.add_argument("--paused", action="store_true", help="do not activate the experiment")
    how.add_argument(
        "-t",
        "--test-mode",
        action="store_true",
        help="test the config and the model code with a one-batch experiment: checks scheduling, "
        "training, validation and checkpointing, prints the trial's log on failure",
    )
    create.add_argument(
        "--local",
        action="store_true",
        help="with --test-mode: run the test on this machine, without the control plane",
    )
    for flag in ("--project", "--workspace", "--project_id"):
        create.add_argument(flag, help=argparse.SUPPRESS)  # accepted for Determined scripts; no projects here
    create.set_defaults(command=_submit.create)

    listing = sub.add_parser("list", aliases=["ls"], help="list experiments")
    listing.add_argument(
        "-a",
        "--all",
        action="store_true",
        help="show all experiments, the archived ones too, with an Archived column",
    )
    listing.add_argument("--limit", type=int, metavar="N", help="show at most the N newest experiments")
    listing.add_argument("--offset", type=int, metavar="N", help="skip the N newest experiments")
    listing.add_argument("--json", action="store_true", help="print the API's JSON")
    listing.add_argument("--csv", action="store_true", help="print as CSV")
    listing.set_defaults(command=_experiment.list_experiments)

    describe = sub.add_parser("describe", help="describe experiments")
    describe.add_argument(
        "experiment_ids", metavar="ID[,ID...]", help="experiment id, or a comma-separated list"
    )
    describe.add_argument("--metrics", action="store_true", help="show the metrics of every workload")
    describe.add_argument("--json", action="store_true", help="print the API's JSON")
    describe.add_argument("--csv", action="store_true", help="print the tables as CSV")
    describe.set_defaults(command=_experiment.describe)

    activate = sub.add_parser("activate", aliases=["unpause"], help="activate (unpause) an experiment")
    activate.add_argument("experiment_id", type=int, metavar="ID", help="experiment id")
    activate.set_defaults(command=_submit.activate)
    _add_archiving(sub)
    _lifecycle.add_parsers(sub)
    _experiment_set.add_parsers(sub)
    _monitoring.add_parsers(sub)
    _exp_downloads.add_experiment_parsers(sub)


def _add_archiving(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`det experiment archive|unarchive ID`: hide an ended experiment from `det experiment list`."""
    archive = sub.add_parser("archive", help="archive an experiment that has ended")
    archive.add_argument("experiment_id", type=int, metavar="ID", help="experiment id")
    archive.set_defaults(command=_experiment.archive)
    unarchive = sub.add_parser("unarchive", help="unarchive an experiment")
    unarchive.add_argument("experiment_id", type=int, metavar="ID", help="experiment id")
    unarchive.set_defaults(command=_experiment.unarchive)

    _add_stop_verbs(sub)


def _add_trial(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    trial = commands.add_parser("trial", aliases=["t"], help="manage trials")
    sub = trial.add_subparsers(title="trial commands", metavar="COMMAND")
    trial.set_defaults(command=_needs_subcommand(trial))

    describe = sub.add_parser("describe", help="describe a trial")
    describe.add_argument("trial_id", type=int, metavar="ID", help="trial id")
    describe.add_argument("--metrics", action="store_true", help="show the metrics of every workload")
    describe.add_argument("--json", action="store_true", help="print the API's JSON")
    describe.add_argument("--csv", action="store_true", help="print the tables as CSV")
    describe.set_defaults(command=_trial.describe)

    logs = sub.add_parser("logs", help="print a trial's logs")
    logs.add_argument("trial_id", type=int, metavar="ID", help="trial id")
    _trial.add_log_arguments(logs)
    logs.set_defaults(command=_trial.logs)

    kill = sub.add_parser("kill", help="kill a trial (no checkpoint); its experiment goes on")
    kill.add_argument("trial_id", type=int, metavar="ID", help="trial id")
    kill.set_defaults(command=_stop.kill_trial)
    _exp_downloads.add_trial_parsers(sub)


def _add_stop_verbs(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pause = sub.add_parser(
        "pause", help="pause an experiment: running trials checkpoint, stop and free their slots"
    )
    pause.add_argument("experiment_id", type=int, metavar="ID", help="experiment id")
    pause.set_defaults(command=_stop.pause_experiment)
    cancel = sub.add_parser(
        "cancel", help="cancel an experiment: no new trials; running ones checkpoint and stop"
    )
    cancel.add_argument("experiment_id", type=int, metavar="ID", help="experiment id")
    cancel.set_defaults(command=_stop.cancel_experiment)
    kill = sub.add_parser("kill", help="kill an experiment: no new trials; running ones are killed")
    kill.add_argument("experiment_id", type=int, metavar="ID", help="experiment id")
    kill.set_defaults(command=_stop.kill_experiment)


def _add_deploy(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    deploy = commands.add_parser("deploy", aliases=["d"], help="run Stratus")
    targets = deploy.add_subparsers(title="targets", metavar="TARGET")
    deploy.set_defaults(command=_needs_subcommand(deploy))
    local = targets.add_parser("local", help="the embedded stack on this machine")
    sub = local.add_subparsers(title="local commands", metavar="COMMAND")
    local.set_defaults(command=_needs_subcommand(local))

    up = sub.add_parser("up", aliases=["cluster-up"], help="start the local stack")
    up.add_argument(
        "--slots",
        type=int,
        default=None,
        metavar="N",
        help="slots of each local agent (default: one per GPU that nvidia-smi lists, 2 on a machine without)",
    )
    up.add_argument(
        "--agents",
        type=int,
        default=None,
        metavar="N",
        help="local agents, each a node of this machine: a trial larger than one agent runs on several "
        "(default: 1)",
    )
    up.add_argument(
        "--pool",
        action="append",
        metavar="NAME[:scheduler=priority|fair_share][:preemption=on|off][:priority=N][:slots=N][:agents=N]"
        "[:backend=local|ec2|batch|sagemaker][:min=N][:max=N][:spot=on|off][:idle=S]",
        help="start a resource pool with its own agents (repeatable; slots and agents default to --slots "
        "and --agents; backend=ec2: an Auto Scaling group of min to max instances instead; batch and "
        "sagemaker: a job per trial in moto's Batch or SageMaker, run by a local runner); the pool "
        "'default' always exists",
    )
    up.add_argument(
        "--cluster-config",
        metavar="FILE",
        help="resource pools in the shape of Determined's master config (`resource_pools:` with pool_name, "
        "scheduler {type, preemption, default_priority}, plus agents and slots_per_agent)",
    )
    up.add_argument(
        "--backend",
        choices=["local", "ec2", "batch", "sagemaker"],
        default=None,
        help="where the default pool's trials run: agents on this machine (local), or an EC2 Auto Scaling "
        "group in the stack's moto that scales from zero with the queue, each instance an agent process "
        "here (ec2; spot interruptions can be played, see infra/local_compute.py), or AWS Batch job queues "
        "in moto, each run a job whose agents run here (batch, infra/local_batch.py), or SageMaker training "
        "jobs in moto (sagemaker, infra/local_sagemaker.py)",
    )
    up.add_argument(
        "--warm-start",
        action="store_true",
        help="agents keep a warm interpreter (torch and the harness imported) and fork trials from it where "
        "safe, cutting each trial's start by the imports (their logs say warm or cold, and why)",
    )
    up.add_argument("--port", type=int, default=None, metavar="P", help="port of the API (default: 8080)")
    up.add_argument(
        "--moto-port",
        type=int,
        default=None,
        metavar="N",
        help="port of the embedded moto server, the stack's AWS (default: a free port; "
        "`det deploy local status` shows it)",
    )
    up.add_argument(
        "--detach",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run in the background (default); --no-detach runs in the foreground",
    )
    up.set_defaults(command=_deploy.up)
    sub.add_parser("status", help="whether the local stack runs (exit 3 if not)").set_defaults(
        command=_deploy.status
    )
    down = sub.add_parser(
        "down",
        aliases=["cluster-down"],
        help="stop the local stack (its experiments, logs and checkpoints are kept)",
    )
    down.add_argument(
        "--delete-db",
        action="store_true",
        help="also delete what the stack keeps (experiments, trials, metrics, logs, checkpoints, contexts)",
    )
    down.set_defaults(command=_deploy.down)
    _deploy_aws.add_parser(targets, _needs_subcommand)


def _needs_subcommand(parser: argparse.ArgumentParser) -> Command:
    def show_help(args: argparse.Namespace, rt: Runtime) -> int:
        parser.print_help(rt.err)
        return 2

    return show_help


if __name__ == "__main__":
    sys.exit(main())
