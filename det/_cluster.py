"""`det resource-pool list` (alias `rp`), `det agent list` and `det slot list`: the cluster's pools,
agents and slots in Determined's columns, each also as JSON or CSV.

A pool row shows its scheduler (priority, with or without preemption, or fair_share), its default
priority, its agents and slots (used of available, from the agents alive now) and its queued jobs. An
agent is Enabled while it heartbeats and nobody disabled it (`det agent disable`); a slot shows the run
(Allocation ID) and trial that hold it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from det._client import ApiClient
from det._commands import Subcommands
from det._render import Cell, field, records_table, time_field
from det._runtime import Runtime

Json = dict[str, Any]

_POOL_CELLS: dict[str, Cell] = {
    "Name": field("name"),
    "Description": field("description"),
    "Type": field("type"),
    "Scheduler Type": field("scheduler_type"),
    "Preemption": field("preemption"),
    "Default Priority": lambda p: p["default_priority"] if p["scheduler_type"] == "priority" else None,
    "Agents": field("num_agents"),
    "Max Agents": field("max_agents"),
    "Slots per Agent": field("slots_per_agent"),
    "Slots Used": field("slots_used"),
    "Slots Available": field("slots_available"),
    "Queued Jobs": field("queued_jobs"),
}
_AGENT_CELLS: dict[str, Cell] = {
    "ID": field("id"),
    "Last Heartbeat": time_field("last_heartbeat"),
    "Slots": field("slots"),
    "Slots Used": field("slots_used"),
    "Containers": field("containers"),
    "Resource Pool": field("resource_pool"),
    "Enabled": lambda a: bool(a["alive"] and a.get("enabled", True)),
    "Draining": field("draining"),
}
_SLOT_CELLS: dict[str, Cell] = {
    "Agent ID": field("agent_id"),
    "Resource Pool": field("resource_pool"),
    "Slot ID": field("slot_id"),
    "Enabled": field("enabled"),
    "Allocation ID": field("run_id"),
    "Task Name": lambda s: (
        f"Trial {s['trial_id']} (Experiment {s['experiment_id']})" if s.get("trial_id") is not None else None
    ),
}


def add_parsers(commands: Subcommands) -> None:
    _add(commands, "resource-pool", ["rp"], "resource pools", "list the resource pools", "resource_pools")
    agent = _add(commands, "agent", ["a"], "agents", "list the agents", "agents")
    credential = agent.add_parser(
        "credential",
        help="mint the credential of an agent you start by hand (it can act as that agent only)",
    )
    credential.add_argument("agent_id", metavar="AGENT_ID")
    credential.set_defaults(command=mint_credential)
    for action, enabled in (("enable", True), ("disable", False)):
        toggle = agent.add_parser(
            action,
            help="put agents back into placement"
            if enabled
            else "take agents out of placement: their runs checkpoint and move (--drain: finish there)",
        )
        which = toggle.add_mutually_exclusive_group(required=True)
        which.add_argument("agent_id", nargs="?", metavar="AGENT_ID")
        which.add_argument("--all", action="store_true", help=f"{action} every agent")
        if not enabled:
            toggle.add_argument(
                "--drain",
                action="store_true",
                help="let the runs on it finish there instead of checkpointing and moving to other agents",
            )
        toggle.set_defaults(command=set_enabled, enabled=enabled, drain=False)
    _add(commands, "slot", ["s"], "slots", "list every agent's slots and who holds them", "slots")


def _add(
    commands: Subcommands,
    name: str,
    aliases: list[str],
    noun: str,
    list_help: str,
    kind: str,
) -> Subcommands:
    group = commands.add_parser(name, aliases=aliases, help=f"inspect the cluster's {noun}")
    sub = group.add_subparsers(title=f"{name} commands", metavar="COMMAND")
    # `det agent` alone lists, as `det job` does.
    group.set_defaults(command=list_cluster, kind=kind, json=False, csv=False)
    listing = sub.add_parser("list", aliases=["ls"], help=list_help)
    output = listing.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print as JSON")
    output.add_argument("--csv", action="store_true", help="print as CSV")
    listing.set_defaults(command=list_cluster, kind=kind)
    return sub


_LISTS: dict[str, tuple[Callable[[ApiClient], list[Json]], dict[str, Cell]]] = {
    "resource_pools": (ApiClient.list_resource_pools, _POOL_CELLS),
    "agents": (ApiClient.list_agents, _AGENT_CELLS),
    "slots": (ApiClient.list_slots, _SLOT_CELLS),
}


def mint_credential(args: argparse.Namespace, rt: Runtime) -> int:
    """`det agent credential ID`: the credential on stdout, how to use it on stderr."""
    with rt.client() as client:
        answer = client.mint_agent_credential(args.agent_id)
    rt.say(str(answer["credential"]))
    rt.note(
        f"start the agent with: STRATUS_AGENT_TOKEN=<the line above> python -m stratus.harness.agent --api "
        f"<this API> --agent-id {args.agent_id} --pool <pool> --work-dir <dir>  (or put it in a file and "
        "pass --token-file); keep it secret: it acts as that agent"
    )
    return 0


def set_enabled(args: argparse.Namespace, rt: Runtime) -> int:
    """`det agent enable | disable [--drain] AGENT_ID | --all`, as Determined's (a disabled agent's runs
    checkpoint and move, where Determined kills them)."""
    with rt.client() as client:
        ids = [args.agent_id] if args.agent_id else [a["id"] for a in client.list_agents()]
        remaining = []
        for agent_id in ids:
            answer = client.set_agent_enabled(agent_id, args.enabled, drain=args.drain)
            rt.note(f"{'Enabled' if args.enabled else 'Disabled'} agent {agent_id}.")
            for run_id in answer.get("moved", []):
                rt.note(
                    f"  run {run_id} checkpoints and goes back to the queue (it resumes on another agent)"
                )
            remaining += [(agent_id, run_id) for run_id in answer.get("remaining", [])]
    if args.drain:
        if remaining:
            rt.say("Tasks still in progress on draining nodes:")
            rt.say("\n".join(f"  run {run_id} on {agent_id}" for agent_id, run_id in remaining))
        else:
            rt.say("No tasks in progress on draining nodes.")
    return 0


def list_cluster(args: argparse.Namespace, rt: Runtime) -> int:
    fetch, cells = _LISTS[args.kind]
    with rt.client() as client:
        records = fetch(client)
    if args.json:
        rt.say(json.dumps({args.kind: records}, indent=4))
        return 0
    rt.say(records_table(cells, tuple(cells), records, as_csv=args.csv))
    return 0
