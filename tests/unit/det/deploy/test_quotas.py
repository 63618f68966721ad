"""The quota preflight of `det deploy aws up` (`det/deploy/quotas.py`), on a fake of its AWS calls: the
need of each EC2 vCPU quota is summed over the EC2 and Batch pools drawing on it, on-demand and spot apart
(a spot Batch pool on both); SageMaker's training quotas, found by name, over the SageMaker pools of a
type; a quota too low refuses with everything needed to fix it (a quota of 0 said so); a quota that cannot
be read only warns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from det.deploy.quotas import CONSOLE_URL, InstanceShape, QuotaError, QuotaValue, check_quotas, quota_for
from stratus.contract.pools import PoolSpec, Provider

SHAPES = {
    "g5.xlarge": InstanceShape(vcpus=4, gpus=1),
    "g5.2xlarge": InstanceShape(vcpus=8, gpus=1),
    "p4d.24xlarge": InstanceShape(vcpus=96, gpus=8),
    "c6i.large": InstanceShape(vcpus=2, gpus=0),
    "inf2.xlarge": InstanceShape(vcpus=4, gpus=0),
}


class FakeCalls:
    """EC2 quotas by code; `named`: the quotas of other services by (service, name), None for one that
    cannot be read (a name absent: no such quota); `listed=False`: no service's quotas can be listed."""

    region = "eu-west-1"

    def __init__(
        self,
        quotas: Mapping[str, float],
        named: Mapping[tuple[str, str], QuotaValue | None] | None = None,
        listed: bool = True,
    ) -> None:
        self.quotas = dict(quotas)
        self.named = dict(named or {})
        self.listed = listed
        self.asked: list[str] = []

    def instance_types(self, names: Sequence[str]) -> Mapping[str, InstanceShape]:
        return {name: SHAPES[name] for name in names}

    def service_quota(self, code: str) -> float | None:
        self.asked.append(code)
        return self.quotas.get(code)

    def named_quotas(self, service: str, names: Sequence[str]) -> Mapping[str, QuotaValue | None] | None:
        self.asked.extend(f"{service}: {name}" for name in names)
        if not self.listed:
            return None
        return {name: self.named[(service, name)] for name in names if (service, name) in self.named}


def pool(
    name: str, *types: str, max_instances: int = 5, spot: bool = False, backend: str = "ec2"
) -> PoolSpec:
    provider = Provider(instance_types=types, max_instances=max_instances, spot=spot)
    return PoolSpec(name, backend=backend, provider=provider, max_agents=max_instances)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("instance_type", "spot", "code"),
    [
        ("g5.xlarge", False, "L-DB2E81BA"),
        ("vt1.3xlarge", False, "L-DB2E81BA"),
        ("p4d.24xlarge", False, "L-417A185B"),
        ("m5.large", False, "L-1216C47A"),
        ("c6gn.medium", False, "L-1216C47A"),
        ("g6e.xlarge", True, "L-3819A6DF"),
        ("p5.48xlarge", True, "L-7212CCBC"),
        ("t3.micro", True, "L-34B43A08"),
    ],
)
def test_each_family_draws_on_its_quota(instance_type: str, spot: bool, code: str) -> None:
    found = quota_for(instance_type, spot)
    assert found is not None and found[0] == code


def test_families_without_a_known_quota_have_none() -> None:
    assert quota_for("inf2.xlarge", False) is None and quota_for("trn1.2xlarge", True) is None


def test_slots_are_gpus_and_a_cpu_only_type_gives_one() -> None:
    assert SHAPES["p4d.24xlarge"].slots == 8 and SHAPES["g5.xlarge"].slots == 1
    assert SHAPES["c6i.large"].slots == 1


def test_pools_within_their_quotas_pass_silently() -> None:
    calls = FakeCalls({"L-DB2E81BA": 64, "L-1216C47A": 10})
    pools = [pool("gpu", "g5.xlarge", max_instances=5), pool("cpu", "c6i.large", max_instances=5)]
    assert check_quotas(calls, pools) == []
    assert sorted(calls.asked) == ["L-1216C47A", "L-DB2E81BA"]


def test_the_need_is_summed_over_pools_and_a_quota_too_low_refuses_naming_everything() -> None:
    # 5 x 4 + 3 x 8 (the widest of the pool's types) = 44 G vCPUs on demand; the quota is 32.
    calls = FakeCalls({"L-DB2E81BA": 32})
    pools = [pool("a", "g5.xlarge", max_instances=5), pool("b", "g5.xlarge", "g5.2xlarge", max_instances=3)]

    with pytest.raises(QuotaError) as caught:
        check_quotas(calls, pools)

    assert str(caught.value) == (
        "pool 'a' (5 x g5.xlarge of 4 vCPUs) and pool 'b' (3 x g5.2xlarge of 8 vCPUs) need 44 vCPUs at most, "
        "but the account's quota L-DB2E81BA (Running On-Demand G and VT instances) is 32 vCPUs; lower "
        "max_instances or ask for more at https://console.aws.amazon.com/servicequotas/home/services/ec2/quotas/L-DB2E81BA"
    )


def test_spot_and_on_demand_are_counted_apart() -> None:
    calls = FakeCalls({"L-417A185B": 96, "L-7212CCBC": 96})
    pools = [
        pool("od", "p4d.24xlarge", max_instances=1),
        pool("spot", "p4d.24xlarge", max_instances=1, spot=True),
    ]
    assert check_quotas(calls, pools) == []
    with pytest.raises(
        QuotaError, match=r"pool 'spot' \(2 x p4d.24xlarge of 96 vCPUs\) needs 192 vCPUs.*L-7212CCBC"
    ):
        check_quotas(calls, [pool("spot", "p4d.24xlarge", max_instances=2, spot=True)])


def test_a_quota_that_cannot_be_read_warns_and_goes_on() -> None:
    warnings = check_quotas(FakeCalls({}), [pool("gpu", "g5.xlarge", max_instances=5)])
    assert warnings == [
        "could not read the quota L-DB2E81BA (Running On-Demand G and VT instances); 20 vCPUs are needed, "
        "check it at " + CONSOLE_URL.format(code="L-DB2E81BA")
    ]


def test_an_unknown_family_warns_and_local_pools_are_not_checked() -> None:
    calls = FakeCalls({})
    pools = [PoolSpec("default"), pool("inf", "inf2.xlarge", backend="batch")]
    assert check_quotas(calls, pools) == [
        "pool 'inf': no vCPU quota known for inf2.xlarge's family; not checked"
    ]
    assert calls.asked == []


def test_a_spot_batch_pool_draws_on_the_on_demand_quota_too() -> None:
    """Its queue falls back to its on-demand environment, and its multi-node queue has only that one."""
    calls = FakeCalls({"L-3819A6DF": 64, "L-DB2E81BA": 8})
    with pytest.raises(QuotaError) as caught:
        check_quotas(calls, [pool("b", "g5.xlarge", max_instances=5, spot=True, backend="batch")])
    assert str(caught.value).startswith(
        "pool 'b' (5 x g5.xlarge of 4 vCPUs) needs 20 vCPUs at most, but the account's quota L-DB2E81BA "
        "(Running On-Demand G and VT instances) is 8 vCPUs;"
    )
    assert sorted(calls.asked) == ["L-3819A6DF", "L-DB2E81BA"]
    # An EC2 spot pool runs spot instances only.
    assert check_quotas(calls, [pool("e", "g5.xlarge", max_instances=5, spot=True)]) == []


def test_an_ec2_quota_of_zero_is_said_so() -> None:
    with pytest.raises(QuotaError) as caught:
        check_quotas(FakeCalls({"L-417A185B": 0}), [pool("big", "p4d.24xlarge", max_instances=2)])
    assert str(caught.value) == (
        "pool 'big' (2 x p4d.24xlarge of 96 vCPUs) needs 192 vCPUs at most, but the account's quota L-417A185B "
        "(Running On-Demand P instances) is 0 vCPUs: the account can run no instance of these types until it "
        "is raised; lower max_instances or ask for more at " + CONSOLE_URL.format(code="L-417A185B")
    )


# ---- SageMaker's training quotas -----------------------------------------------------------------------

TRAINING = ("sagemaker", "ml.g5.xlarge for training job usage")
SPOT_TRAINING = ("sagemaker", "ml.g5.xlarge for spot training job usage")


def test_sagemaker_pools_of_a_type_within_its_training_quota_pass() -> None:
    calls = FakeCalls({}, {TRAINING: QuotaValue("L-TRAIN", 4), SPOT_TRAINING: QuotaValue("L-SPOT", 2)})
    pools = [
        pool("a", "ml.g5.xlarge", max_instances=2, backend="sagemaker"),
        pool("b", "ml.g5.xlarge", max_instances=2, backend="sagemaker"),
        pool("s", "ml.g5.xlarge", max_instances=2, spot=True, backend="sagemaker"),
    ]
    assert check_quotas(calls, pools) == []
    # One listing for the service's names; no EC2 quota: SageMaker's instances are not the account's.
    assert calls.asked == [f"sagemaker: {SPOT_TRAINING[1]}", f"sagemaker: {TRAINING[1]}"]


def test_a_training_quota_too_low_refuses_naming_the_quota_its_value_the_need_and_its_page() -> None:
    calls = FakeCalls({}, {TRAINING: QuotaValue("L-TRAIN", 3)})
    pools = [
        pool("a", "ml.g5.xlarge", max_instances=2, backend="sagemaker"),
        pool("b", "ml.g5.xlarge", "ml.g5.2xlarge", max_instances=2, backend="sagemaker"),
    ]
    with pytest.raises(QuotaError) as caught:
        check_quotas(calls, pools)
    # A training job runs on its pool's first type: ml.g5.2xlarge draws on nothing here.
    assert str(caught.value) == (
        "pool 'a' (2 x ml.g5.xlarge) and pool 'b' (2 x ml.g5.xlarge) need 4 instances at most, but the "
        "account's sagemaker quota L-TRAIN (ml.g5.xlarge for training job usage) is 3 in eu-west-1; lower "
        "max_instances or ask for more at "
        "https://console.aws.amazon.com/servicequotas/home/services/sagemaker/quotas/L-TRAIN?region=eu-west-1"
    )


def test_a_training_quota_of_zero_is_said_so() -> None:
    """New accounts often have 0 for the GPU types."""
    calls = FakeCalls({}, {SPOT_TRAINING: QuotaValue("L-SPOT", 0)})
    with pytest.raises(QuotaError) as caught:
        check_quotas(calls, [pool("s", "ml.g5.xlarge", max_instances=1, spot=True, backend="sagemaker")])
    assert str(caught.value) == (
        "pool 's' (1 x ml.g5.xlarge) needs 1 instance at most, but the account's sagemaker quota L-SPOT "
        "(ml.g5.xlarge for spot training job usage) is 0 in eu-west-1: no sagemaker training job can run on "
        "ml.g5.xlarge until it is raised; lower max_instances or ask for more at "
        "https://console.aws.amazon.com/servicequotas/home/services/sagemaker/quotas/L-SPOT?region=eu-west-1"
    )


def test_a_training_quota_that_cannot_be_read_or_is_not_there_warns_and_goes_on() -> None:
    sm = [pool("sm", "ml.g5.xlarge", max_instances=3, backend="sagemaker")]
    page = "https://console.aws.amazon.com/servicequotas/home/services/sagemaker/quotas?region=eu-west-1"
    unreadable = (
        f"could not read the sagemaker quota {TRAINING[1]!r}; 3 instances are needed, check it at {page}"
    )
    assert check_quotas(FakeCalls({}, listed=False), sm) == [unreadable]
    assert check_quotas(FakeCalls({}, {TRAINING: None}), sm) == [unreadable]
    assert check_quotas(FakeCalls({}), sm) == [
        f"sagemaker has no quota {TRAINING[1]!r} in eu-west-1 (is the type offered for training there?); "
        "pool 'sm' (3 x ml.g5.xlarge) not checked"
    ]
