"""`det version` and `det master info`, as in Determined: the CLI's version and the API's (`GET /info`: its
version, the stack it belongs to, its region), as YAML (`det master info --json`: JSON).

`det version` works without a reachable API (the master's fields empty, a hint on stderr, exit 0, as
Determined's does) and says when the CLI and the API differ in version."""

from __future__ import annotations

import argparse
import json
from typing import Any

import yaml

from det import _distribution
from det._commands import Subcommands
from det._runtime import Runtime
from det.errors import ApiError, ConnectionFailedError

Json = dict[str, Any]


def add_parsers(commands: Subcommands) -> None:
    version = commands.add_parser("version", help="show the CLI's and the API's versions")
    version.set_defaults(command=show_version)
    master = commands.add_parser("master", help="the API (Determined's master)")
    sub = master.add_subparsers(title="master commands", metavar="COMMAND")
    info = sub.add_parser("info", help="the API's version, stack and region")
    info.add_argument("--json", action="store_true", help="as JSON")
    info.set_defaults(command=master_info)
    master.set_defaults(command=master_info, json=False)


def client_version() -> str:
    """The installed distribution's version (`det._distribution`)."""
    return _distribution.version()


def show_version(args: argparse.Namespace, rt: Runtime) -> int:
    master: Json = {"cluster_id": "", "region": "", "version": ""}
    try:
        with rt.client() as client:
            master = client.info()
    except (ConnectionFailedError, ApiError):
        pass  # said below: the master's fields stay empty
    ours = client_version()
    rt.say(_yaml({"client": {"version": ours}, "master": master, "master_address": rt.master}))
    theirs = str(master.get("version") or "")
    if not theirs:
        rt.note(
            f"Master not found at {rt.master}. Hint: set DET_MASTER to the Stratus API's URL (`det deploy "
            "local up` prints it; `det deploy aws up` too) or pass -m URL."
        )
    elif theirs != ours:
        older, newer = ("CLI", "master") if _key(ours) < _key(theirs) else ("master", "CLI")
        rt.note(
            f"The {older}'s version ({ours if older == 'CLI' else theirs}) is older than the {newer}'s "
            f"({theirs if newer == 'master' else ours}): upgrade the {older}."
        )
    return 0


def master_info(args: argparse.Namespace, rt: Runtime) -> int:
    with rt.client() as client:
        info = client.info()
    rt.say(json.dumps(info, indent=4) if args.json else _yaml(info))
    return 0


def _yaml(data: Json) -> str:
    return yaml.safe_dump(data, default_flow_style=False, sort_keys=True).rstrip("\n")


def _key(version: str) -> tuple[int, ...]:
    """A version's numeric parts, for ordering (`0.10.0` after `0.9.1`)."""
    parts = []
    for part in version.split("."):
        digits = "".join(c for c in part if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)
