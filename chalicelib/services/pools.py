"""The configured resource pools (`Settings.pools`): which pool a request names, and whether it can
ever fit there."""

from __future__ import annotations

from chalicelib import config as cfg
from chalicelib.domain.words import plural
from chalicelib.errors import BadRequestError
from chalicelib.settings import Settings
from stratus.contract.pools import PoolSpec, why_never_fits


def configured_names(settings: Settings) -> str:
    return ", ".join(pool.name for pool in settings.pools)


def require_pool(settings: Settings, name: str) -> PoolSpec:
    """The configured pool `name`, or a BadRequestError that lists the configured ones."""
    pool = settings.pool(name)
    if pool is None:
        raise BadRequestError(
            f"resource pool {name!r} is not configured; use one of {configured_names(settings)} "
            "(`det resource-pool list` shows them)"
        )
    return pool


def check_request_fits(settings: Settings, resources: cfg.ResourcesConfig) -> None:
    """Refuse (ConfigInvalidError, at submission) a config whose pool is not configured, or whose trials
    could never fit in it where the pool's shape is known: they would wait in the queue forever."""
    pool = settings.pool(resources.resource_pool)
    if pool is None:
        problem = cfg.ConfigProblem(
            "resources.resource_pool",
            f"resource pool {resources.resource_pool!r} is not configured; use one of "
            f"{configured_names(settings)} (`det resource-pool list` shows them)",
        )
        raise cfg.ConfigInvalidError([problem])
    reason = why_never_fits(pool, resources.slots_per_trial or 1)
    if reason is not None:
        if pool.slots_per_agent is None or pool.max_agents is None:
            shape = f"agents of {pool.slots_per_agent} slots"
        else:
            shape = f"{plural(pool.max_agents, 'agent')} of {plural(pool.slots_per_agent, 'slot')}"
        problem = cfg.ConfigProblem(
            "resources.slots_per_trial",
            f"{reason}; the pool has {shape}: lower slots_per_trial or use another pool",
        )
        raise cfg.ConfigInvalidError([problem])
