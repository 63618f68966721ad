"""The control plane's registry of cloud backends: each backend's module makes its `PoolCompute` from
`BackendParts` (`chalicelib.compute.pool_compute`). A new backend is its module here and one line below;
`stratus.contract.pools.BACKEND_TRAITS` declares it, and `tests/unit/architecture/test_backend_registry.py`
fails while any side lacks its part (docs/extending.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from chalicelib.compute import batch, ec2, sagemaker
from chalicelib.compute.pool_compute import BackendParts, PoolCompute
from stratus.contract.pools import Backend

BACKENDS: Mapping[Backend, Callable[[BackendParts], PoolCompute]] = {
    "ec2": ec2.for_pools,
    "batch": batch.for_pools,
    "sagemaker": sagemaker.for_pools,
}
