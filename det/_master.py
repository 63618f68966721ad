"""`det version` and `det master info`, as in Determined: the CLI's version and the API's (`GET /info`: its
version, the oldest CLI and agent it answers, the stack it belongs to, its region), as YAML (`det master
info --json`: JSON).

`det version` also lists the live agents' versions (`GET /agents`, where the caller may read it) and says on
stderr which one is behind and how to upgrade it, by `stratus.contract.versions.compare`, the same rule the
API refuses a too old CLI or agent by. It works without a reachable API (the master's fields empty, a hint
on stderr, exit 0, as Determined's does)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import yaml

from det._commands import Subcommands
from det._runtime import Runtime
from det.errors import ApiError, ConnectionFailedError
from stratus.contract.versions import VERSION, Comparison, Side, Standing, compare

Json = dict[str, Any]

#: How `det version` shows an agent whose heartbeat named no version (a compute package from before).
UNKNOWN_AGENT_VERSION = "unknown"


def add_parsers(commands: Subcommands) -> None:
    version = commands.add_parser("version", help="show the CLI's, the API's and the agents' versions")
    version.set_defaults(command=show_version)
    master = commands.add_parser("master", help="the API (Determined's master)")
    sub = master.add_subparsers(title="master commands", metavar="COMMAND")
    info = sub.add_parser("info", help="the API's version, stack and region")
    info.add_argument("--json", action="store_true", help="as JSON")
    info.set_defaults(command=master_info)
    master.set_defaults(command=master_info, json=False)


def client_version() -> str:
    """The CLI's version: its code's (`stratus.contract.versions.VERSION`, pyproject's version)."""
    return VERSION


def show_version(args: argparse.Namespace, rt: Runtime) -> int:
    master: Json = {"cluster_id": "", "region": "", "version": ""}
    agents: dict[str, str] = {}
    try:
        with rt.client() as client:
            master = client.info()
            agents = _agent_versions(client.list_agents)
    except (ConnectionFailedError, ApiError):
        pass  # said below: the master's fields stay empty
    shown: Json = {"client": {"version": client_version()}, "master": master, "master_address": rt.master}
    if agents:
        shown["agents"] = agents
    rt.say(_yaml(shown))
    for line in version_notes(master, agents):
        rt.note(line)
    if not master.get("version"):
        rt.note(
            f"Master not found at {rt.master}. Hint: set DET_MASTER to the Stratus API's URL (`det deploy "
            "local up` prints it; `det deploy aws up` too) or pass -m URL."
        )
    return 0


def version_notes(master: Json, agents: dict[str, str]) -> list[str]:
    """One line for the CLI and one per version the agents run, for each that differs from the API's:
    which one is behind, both versions and the fix (none when the API's version is not known)."""
    api = str(master.get("version") or "")
    if not api:
        return []
    lines = []
    cli = compare(
        Side.CLI, client_version(), api_version=api, oldest=str(master.get("oldest_client_version") or "")
    )
    if cli.standing is not Standing.SAME:
        lines.append(_note(cli))
    by_version: dict[str, list[str]] = {}
    for agent_id, version in sorted(agents.items()):
        by_version.setdefault(version, []).append(agent_id)
    for version, ids in sorted(by_version.items()):
        label = f"agent {ids[0]}" if len(ids) == 1 else f"agents {', '.join(ids)}"
        agent = compare(
            Side.AGENT,
            None if version == UNKNOWN_AGENT_VERSION else version,
            api_version=api,
            oldest=str(master.get("oldest_agent_version") or ""),
            name=label,
        )
        if agent.standing is not Standing.SAME:
            lines.append(_note(agent))
    return lines


def _note(comparison: Comparison) -> str:
    """The comparison's sentence, led by which one is behind ("CLI", "agent" or "API")."""
    return f"{comparison.behind} behind: {comparison.message}" if comparison.behind else comparison.message


def _agent_versions(list_agents: Callable[[], list[Json]]) -> dict[str, str]:
    """The live agents' versions by id; none when the API does not let this caller list them (a user
    without the `GET /agents` grant) or is too old to say."""
    try:
        listed = list_agents()
    except ApiError:
        return {}
    return {
        str(agent["id"]): str(agent.get("version") or UNKNOWN_AGENT_VERSION)
        for agent in listed
        if isinstance(agent, dict) and "id" in agent and agent.get("alive", True)
    }


def master_info(args: argparse.Namespace, rt: Runtime) -> int:
    with rt.client() as client:
        info = client.info()
    rt.say(json.dumps(info, indent=4) if args.json else _yaml(info))
    return 0


def _yaml(data: Json) -> str:
    return yaml.safe_dump(data, default_flow_style=False, sort_keys=True).rstrip("\n")
