"""The cloud backends' parts of the stack's template, one per backend: what `compute_resources` asks of
a backend, found here instead of by comparing its name. A backend's nature (does it run in the agents'
network, does the stack name a group after its pools) is a trait (`stratus.contract.pools.traits`);
what it adds to the stack is its part.

A part is a module with the names of `TemplatePart`; a new backend is a module and a line here, plus a
line in the local stack's registry (`infra.local.backends`) and its traits (`stratus.contract.pools`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from infra.aws import compute_batch, compute_ec2, compute_sagemaker
from infra.aws.compute_agents import PoolInputs
from stratus.contract.pools import Backend, PoolSpec, traits

Template = dict[str, Any]


class TemplatePart(Protocol):
    """What the stack's template needs of one cloud backend (each member a module-level name)."""

    @property
    def PARAMETERS(self) -> Mapping[str, Template]:
        """The template parameters of its pools alone (the agents' network's come with `networked`)."""

    @property
    def STATE_RULE(self) -> str | None:
        """The logical id of its EventBridge rule that sends its jobs' state changes to the events queue
        (the queue's policy lets it send), or None."""

    @property
    def CONTROL_ENVIRONMENT(self) -> Mapping[str, Any]:
        """The variables the control plane's functions need to run its pools' work (with such pools)."""

    def pool_resources(self, pools: Sequence[PoolSpec], inputs: PoolInputs) -> tuple[Template, Template]:
        """The (resources, outputs) of its pools (at least one), or a ValueError naming the pool and fix."""

    def control_statements(self) -> list[Template]:
        """Its statements in the control plane's compute policy (`ComputeControlPolicy`)."""


#: Every cloud backend's part, in the order their statements and rules are rendered.
TEMPLATE_PARTS: dict[Backend, TemplatePart] = {
    "ec2": compute_ec2,
    "batch": compute_batch,
    "sagemaker": compute_sagemaker,
}


class NoTemplatePartError(LookupError):
    """A cloud pool whose backend has no part in `TEMPLATE_PARTS` (a line is missing there)."""


def parts_of(
    pools: Iterable[PoolSpec], parts: Mapping[Backend, TemplatePart] = TEMPLATE_PARTS
) -> list[tuple[TemplatePart, list[PoolSpec]]]:
    """Each part with its pools, in the order of `parts` (`TEMPLATE_PARTS`; a test's own), for the
    backends the cloud pools use (none without cloud pools)."""
    pools = [pool for pool in pools if traits(pool.backend).cloud]
    missing = sorted({pool.backend for pool in pools} - set(parts))
    if missing:
        raise NoTemplatePartError(
            f"backend {missing[0]!r} has no part in the stack's template; add its module to "
            "infra.aws.backends.TEMPLATE_PARTS"
        )
    found = [(part, [pool for pool in pools if pool.backend == backend]) for backend, part in parts.items()]
    return [(part, of) for part, of in found if of]


def control_environment(pools: Iterable[PoolSpec]) -> Template:
    """The variables the control plane's functions need for these pools' backends (copies: the parts'
    own stay as they are, whatever a caller does to the template)."""
    return copy.deepcopy(
        {name: value for part, _ in parts_of(pools) for name, value in part.CONTROL_ENVIRONMENT.items()}
    )
