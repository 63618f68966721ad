"""Names the control plane's cloud adapters (`chalicelib/compute/`) and the stack's template
(`infra/aws/`) must agree on, declared here so that the template reads them without importing an adapter."""

from __future__ import annotations

#: Where a Batch or SageMaker job's agents find their credentials: `credentials/<job name>/<lane>`.
CREDENTIALS_PREFIX = "credentials/"
#: Multi-node parallel jobs go to the pool's on-demand queue and job definition of this suffix (AWS Batch
#: runs no multi-node job on spot capacity).
MULTI_NODE_SUFFIX = "-mnp"
