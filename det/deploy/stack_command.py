"""How `det deploy local up` (and the tests' `infra.local.stack.BackgroundStack`) start the embedded
stack: `python -m infra.local.stack ...`, with the resource pools the user asked for (`--pool`,
`--cluster-config`; the stack reads them, `infra/local/cluster_config.py`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from det.errors import StackError
from stratus.contract.pools import traits

#: The module the stack runs as (`python -m`): also how `det deploy local status` tells the stack's
#: process from another that reused its pid.
STACK_MODULE = "infra.local.stack"


def stack_command(
    port: int,
    slots: int | None,
    directory: Path,
    agents: int = 1,
    *,
    pools: Sequence[str] = (),
    cluster_config: Path | None = None,
    warm_start: bool = False,
    moto_port: int | None = None,
) -> list[str]:
    """The stack's command line. `pools` are `--pool` values and `cluster_config` a file; `slots` None
    leaves the agents' slots to the stack (one per GPU of this machine, else 2); `moto_port` None lets
    the stack pick a free port for its moto server."""
    extra = [arg for pool in pools for arg in ("--pool", pool)]
    if moto_port is not None:
        extra += ["--moto-port", str(moto_port)]
    if warm_start:
        extra.append("--warm-start")
    if cluster_config is not None:
        extra += ["--cluster-config", str(cluster_config)]
    return [
        sys.executable,
        "-P",  # safe path: the folder `up` runs from (its app.py, infra/) is never imported from
        "-m",
        STACK_MODULE,
        "--port",
        str(port),
        *(["--slots", str(slots)] if slots is not None else []),
        "--agents",
        str(agents),
        "--state-dir",
        str(directory),
        *extra,
    ]


def pool_arguments(args: argparse.Namespace) -> tuple[list[str], Path | None]:
    """The `--pool` values (`--backend B` makes the default pool a B pool unless one is given) and the
    `--cluster-config` file (absolute: the stack runs elsewhere)."""
    pools = list(getattr(args, "pool", None) or [])
    backend = getattr(args, "backend", None) or "local"
    if traits(backend).cloud and not any(p.split(":")[0] == "default" for p in pools):
        pools.insert(0, f"default:backend={backend}")
    given = getattr(args, "cluster_config", None)
    if given is None:
        return pools, None
    path = Path(given).expanduser().resolve()
    if not path.is_file():
        raise StackError(f"--cluster-config {path} is not a file; pass the path of a YAML file")
    return pools, path


def describe_pools(pools: Iterable[Mapping[str, Any]]) -> str:
    """`default (1 agent of 2 slots, priority, preemption); gpu (2 agents of 4 slots, fair_share)`."""
    described = []
    for pool in pools:
        agents, slots = int(pool.get("agents") or 0), int(pool.get("slots") or 0)
        scheduler = str(pool.get("scheduler") or "priority")
        if scheduler == "priority":
            scheduler += ", preemption" if pool.get("preemption") else ", no preemption"
        shape = f"{agents} agent{'' if agents == 1 else 's'} of {slots} slot{'' if slots == 1 else 's'}"
        kind = traits(str(pool.get("backend") or "local"))
        if kind.cloud and not kind.job_per_run:
            most = int(pool.get("max_instances") or 0)
            shape = f"{pool.get('backend')}: {pool.get('min_instances') or 0} to {most} instances of {slots} slot{'' if slots == 1 else 's'}"
        elif kind.job_per_run:
            most = int(pool.get("max_instances") or 0)
            lanes = f"{most} lane{'' if most == 1 else 's'} of {slots} slot{'' if slots == 1 else 's'}"
            shape = f"{pool.get('backend')}: {lanes}"
        described.append(f"{pool.get('name')} ({shape}, {scheduler})")
    return "; ".join(described)


def differences(args: argparse.Namespace, running: Mapping[str, Any]) -> list[str]:
    """What `det deploy local up` asks for explicitly that the running stack (its `stack.json`) is not:
    `--port 9001 (it listens on 8080)`. Options left out (a port of 0) match anything;
    `--cluster-config` and `--warm-start` are not recorded by the stack and are not compared."""
    found = []
    for flag, asked, actual in (
        ("--port", getattr(args, "port", None), _port(running.get("api_url"))),
        ("--moto-port", getattr(args, "moto_port", None), _port(running.get("moto_url"))),
    ):
        if asked and asked != actual:  # 0: any free port
            found.append(f"{flag} {asked} (it listens on {actual})")
    pools = {str(p.get("name")): p for p in running.get("pools") or ()}
    for flag, asked, actual in (
        ("--slots", getattr(args, "slots", None), running.get("slots")),
        ("--agents", getattr(args, "agents", None), running.get("agents") or 1),
        ("--backend", getattr(args, "backend", None), (pools.get("default") or {}).get("backend", "local")),
    ):
        if asked is not None and actual is not None and asked != actual:
            found.append(f"{flag} {asked} (it has {actual})")
    for pool in getattr(args, "pool", None) or []:
        name = pool.split(":")[0]
        if pools and name not in pools:
            found.append(f"--pool {name} (its pools are {', '.join(pools)})")
    return found


def _port(url: object) -> int | None:
    tail = str(url or "").rstrip("/").rpartition(":")[2]
    return int(tail) if tail.isdigit() else None
