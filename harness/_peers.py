"""The addresses of a multi-node trial's nodes, for Determined's `info.container_addrs`, found through
the control plane's rendezvous (`stratus.launchers._rendezvous`) the first time a process asks for them.

The chief registers the port of its socket collectives (a free one) with its address. The answer is
exported into this process's environment (``STRATUS_NODE_ADDRS``, ``STRATUS_COLLECTIVE_PORT``), so the
processes it starts next (Determined's 4_distributed launcher starts its workers after reading
`container_addrs`) see the same nodes and the same port without a second rendezvous.
"""

from __future__ import annotations

import dataclasses
import os

from stratus.contract import env as names
from stratus.harness.errors import HarnessError


def resolve_node_addrs() -> tuple[str, ...]:
    """Every node's address, chief first, after the rendezvous; exported as described above."""
    from stratus.launchers._info import free_port, load_launch_info
    from stratus.launchers._rendezvous import rendezvous
    from stratus.launchers.errors import LauncherError

    try:
        info = load_launch_info()
        if info.node_rank == 0 and info.chief_port is None:
            info = dataclasses.replace(info, chief_port=free_port())
        resolved = rendezvous(info)
    except LauncherError as e:
        raise HarnessError(f"the trial's node addresses could not be found: {e}") from e
    os.environ[names.NODE_ADDRS] = ",".join(resolved.node_addrs)
    if resolved.chief_port is not None:
        os.environ[names.COLLECTIVE_PORT] = str(resolved.chief_port)
    return resolved.node_addrs
