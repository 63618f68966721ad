"""EC2's vCPU quotas by instance family, as Service Quotas names them: the CLI's preflight
(`det/deploy/quotas.py`) and the control plane's check before it scales a group (`chalicelib/compute/ec2.py`)
read the same table.

EC2 counts running vCPUs per quota, not instances: on-demand and spot apart, and families grouped (G and
VT, P, "standard" A C D H I M R T Z)."""

from __future__ import annotations

import re

CONSOLE_URL = "https://console.aws.amazon.com/servicequotas/home/services/ec2/quotas/{code}"
_STANDARD = "A, C, D, H, I, M, R, T, Z"
#: (family group, spot) -> (quota code, quota name).
QUOTAS: dict[tuple[str, bool], tuple[str, str]] = {
    ("g", False): ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    ("p", False): ("L-417A185B", "Running On-Demand P instances"),
    ("standard", False): ("L-1216C47A", f"Running On-Demand Standard ({_STANDARD}) instances"),
    ("g", True): ("L-3819A6DF", "All G and VT Spot Instance Requests"),
    ("p", True): ("L-7212CCBC", "All P Spot Instance Requests"),
    ("standard", True): ("L-34B43A08", f"All Standard ({_STANDARD}) Spot Instance Requests"),
}
_GROUPS = {"g": "g", "vt": "g", "p": "p", **{letter: "standard" for letter in "acdhimrtz"}}


def quota_for(instance_type: str, spot: bool) -> tuple[str, str] | None:
    """The quota (code, name) of a type's family (`g5.xlarge` -> G and VT), or None for another family
    (Inf, Trn, X, F, DL, ...)."""
    family = re.match(r"[a-z]+", instance_type.lower())
    group = _GROUPS.get(family.group(0) if family else "")
    return QUOTAS[(group, spot)] if group else None
