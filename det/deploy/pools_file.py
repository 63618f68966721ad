"""The pools file of `det deploy aws up --pools-file FILE`: Determined's master-config `resource_pools:`
list, read by the one reader every side uses (`stratus.contract.resource_pools`; its docstring shows the
shape). One pool must be named `default` (Determined's `default_compute_resource_pool`): experiments that
name no pool run there. A cloud pool's `slots_per_agent` comes at deploy from its instance type
(`det/deploy/aws_compute.py`, whose flags go through the same provider rules).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from det.errors import UsageError
from stratus.contract.errors import InvalidPoolError
from stratus.contract.pools import PoolSpec
from stratus.contract.resource_pools import read_resource_pools


def read_pools_file(path: Path) -> list[PoolSpec]:
    """The pools of the file; a UsageError naming the file, the pool, the key and the fix for anything
    it cannot use (the local stack's `agents` and `slots_per_agent` among them: AWS pools get theirs
    from their provider)."""
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise UsageError(f"--pools-file {path}: cannot read it ({e.strerror or e}); pass a YAML file") from e
    except yaml.YAMLError as e:
        raise UsageError(f"--pools-file {path} is not YAML ({e}); fix the line it names") from e
    try:
        return [pool.spec for pool in read_resource_pools(data, str(path))]
    except InvalidPoolError as e:
        raise UsageError(str(e)) from e
