"""`det experiment pause | cancel | kill ID` and `det trial kill ID`: stop work (Determined's verbs).

Pause stops the running trials at their next checkpoint and frees their slots (`det experiment activate`
resumes each from its checkpoint); queued trials wait unstarted. Cancel lets running trials checkpoint and exit; kill ends them without a checkpoint. Either way the
experiment creates no more trials and ends CANCELED once every trial has ended; the command returns at
once (`det experiment describe ID` shows the progress)."""

from __future__ import annotations

import argparse

from det._commands import Subcommands
from det._runtime import Runtime


def add_experiment_parsers(sub: Subcommands) -> None:
    """`det experiment pause | cancel | kill ID`."""
    pause = sub.add_parser(
        "pause", help="pause an experiment: running trials checkpoint, stop and free their slots"
    )
    pause.add_argument("experiment_id", type=int, metavar="ID", help="experiment id")
    pause.set_defaults(command=pause_experiment)
    cancel = sub.add_parser(
        "cancel", help="cancel an experiment: no new trials; running ones checkpoint and stop"
    )
    cancel.add_argument("experiment_id", type=int, metavar="ID", help="experiment id")
    cancel.set_defaults(command=cancel_experiment)
    kill = sub.add_parser("kill", help="kill an experiment: no new trials; running ones are killed")
    kill.add_argument("experiment_id", type=int, metavar="ID", help="experiment id")
    kill.set_defaults(command=kill_experiment)


def add_trial_parsers(sub: Subcommands) -> None:
    """`det trial kill ID`."""
    kill = sub.add_parser("kill", help="kill a trial (no checkpoint); its experiment goes on")
    kill.add_argument("trial_id", type=int, metavar="ID", help="trial id")
    kill.set_defaults(command=kill_trial)


def pause_experiment(args: argparse.Namespace, rt: Runtime) -> int:
    with rt.client() as client:
        answer = client.pause_experiment(args.experiment_id)
    rt.say(
        f"Paused experiment {args.experiment_id} ({_state(answer, 'experiment')}): running trials "
        f"checkpoint and free their slots; `det experiment activate {args.experiment_id}` resumes them"
    )
    return 0


def cancel_experiment(args: argparse.Namespace, rt: Runtime) -> int:
    with rt.client() as client:
        answer = client.cancel_experiment(args.experiment_id)
    rt.say(f"Canceled experiment {args.experiment_id} ({_state(answer, 'experiment')})")
    return 0


def kill_experiment(args: argparse.Namespace, rt: Runtime) -> int:
    with rt.client() as client:
        answer = client.kill_experiment(args.experiment_id)
    rt.say(f"Killed experiment {args.experiment_id} ({_state(answer, 'experiment')})")
    return 0


def kill_trial(args: argparse.Namespace, rt: Runtime) -> int:
    with rt.client() as client:
        answer = client.kill_trial(args.trial_id)
    rt.say(f"Killed trial {args.trial_id} ({_state(answer, 'trial')})")
    return 0


def _state(answer: object, kind: str) -> str:
    record = answer.get(kind) if isinstance(answer, dict) else None
    state = record.get("state") if isinstance(record, dict) else None
    return str(state or "state unknown")
