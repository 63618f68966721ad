"""Fixtures and helpers shared by every tier.

Tiers (each a folder, see docs/testing.md):
  unit         no IO: no process, socket, network or process group; files only under tmp_path
  contract     the HTTP API document against the routes and the clients (no IO)
  integration  real processes, loopback sockets and gloo groups on this machine (marker ``integration``)
  aws          a moto server per session (marker ``aws``)
  e2e          the embedded local stack and real trials (marker ``e2e``)
  gpu          a CUDA device (marker ``gpu``; skips itself elsewhere)

Test modules never import each other, nor a conftest.py: what two of them share lives here, in the tier's
conftest.py or in the conftest.py of the folder that holds them (tests/unit mirrors the packages; a large
fake sits in a `fakes.py` beside that conftest.py, which alone imports it), and reaches them as a fixture
(one that returns a function, a class or a small namespace where a test needs that).
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import zstandard

from stratus.harness.compat import compat_path


def pytest_configure(config: pytest.Config) -> None:
    """Under ``--dist loadgroup`` (the e2e tier), xdist hands out the groups in the order the tests are
    collected, which tests/e2e/conftest.py makes longest first; by default it would reorder them by
    their number of tests."""
    if getattr(config.option, "dist", "no") == "loadgroup":
        config.option.loadscopereorder = False


# ---- the CLI's tables (det/_render.py), for the unit and the e2e tests ------------------------------------


def table_rows(text: str, title: str | None = None) -> list[list[str]]:
    """Cells of the presto table after the line `title` (or the first table), header first."""
    lines = text.splitlines()
    start = lines.index(title) + 1 if title else 0
    rows = []
    for line in lines[start:]:
        if not line.strip():
            break
        if set(line) <= {"-", "+"}:
            continue
        rows.append([c.strip() for c in line.split("|")])
    return rows


@pytest.fixture(name="table_rows")
def _table_rows() -> Callable[..., list[list[str]]]:
    return table_rows


# ---- a context folder to pack (det/_context.py) --------------------------------------------------------


def make_tree(root: Path, files: dict[str, str | bytes]) -> Path:
    """Write ``files`` (relative name -> text or bytes) below ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


CONTEXT_TREE: dict[str, str | bytes] = {
    "train.py": "print('hi')\n",
    "model/net.py": "class Net: ...\n" * 50,
    "model/__init__.py": "",
    "data/weights.bin": bytes(range(256)) * 300,
    "scripts/run.sh": "#!/bin/sh\necho run\n",
    "README.md": "# model\n",
    "a" * 120 + "/long-name-" + "b" * 90 + ".txt": "long",
    "sub/héllo wörld.txt": "unicode",
}


class ContextTree:
    """A context folder with awkward names, binary data, an executable script and a symlink (the
    `context_tree` fixture): `files` is what `build(root)` writes below ``root``, besides ``link.py``
    linking to model/net.py."""

    files = CONTEXT_TREE

    @staticmethod
    def build(root: Path) -> Path:
        make_tree(root, CONTEXT_TREE)
        (root / "scripts" / "run.sh").chmod(0o755)
        (root / "link.py").symlink_to("model/net.py")
        return root


@pytest.fixture
def context_tree() -> type[ContextTree]:
    return ContextTree


@pytest.fixture(name="make_tree")
def _make_tree() -> Callable[[Path, dict[str, str | bytes]], Path]:
    return make_tree


# ---- the Determined and NNI compatibility packages ----------------------------------------------------


@pytest.fixture
def compat(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`import determined` and `import nni` give the compatibility packages (as on the trial's PYTHONPATH)."""
    monkeypatch.syspath_prepend(str(compat_path("determined")))
    monkeypatch.syspath_prepend(str(compat_path("nni")))
    yield
    for name in list(sys.modules):
        if name.split(".")[0] in ("determined", "nni"):
            del sys.modules[name]


# ---- a torch.distributed script (gloo on CPU) ---------------------------------------------------------

# Every rank adds rank + 1 and prints the sum with what DistributedContext.from_env() read: with two
# ranks, "sum=3 rank=R/2 local=L".
ALL_REDUCE = """
    import datetime, os
    import torch, torch.distributed as dist
    from stratus.harness.core import DistributedContext
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    ctx = DistributedContext.from_env()
    print(f"sum={t.item():g} rank={ctx.rank}/{ctx.size} local={ctx.local_rank}", flush=True)
    dist.destroy_process_group()
"""


@pytest.fixture
def all_reduce() -> str:
    """ALL_REDUCE: a torch.distributed script, to write into a trial's folder."""
    return ALL_REDUCE


# ---- hand-made context archives (a member escaping its folder, a link), packed as `det` packs one ------


def tar_zst(*members: tuple[str, bytes] | tarfile.TarInfo) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tar.addfile(member)
            else:
                info = tarfile.TarInfo(member[0])
                info.size = len(member[1])
                tar.addfile(info, io.BytesIO(member[1]))
    return zstandard.ZstdCompressor().compress(raw.getvalue())


def tar_link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    """A link member (symbolic, or hard with ``tarfile.LNKTYPE``) for `tar_zst`."""
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


@pytest.fixture(name="tar_zst")
def _tar_zst() -> Callable[..., bytes]:
    return tar_zst


@pytest.fixture(name="tar_link")
def _tar_link() -> Callable[..., tarfile.TarInfo]:
    return tar_link


# ---- a `GetProducts` PriceList entry written by hand in the shape AWS documents --------------------------
# (https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_pricing_GetProducts.html): each
# product a JSON string with its attributes and its OnDemand and Reserved terms.


def price_product(
    instance_type: str, usd: str, *, gpu: str | None = "1", operation: str = "RunInstances"
) -> str:
    """One `GetProducts` PriceList entry, in the shape AWS documents (a JSON string per product)."""
    sku = "X3Q9ZB5HSVFWKMCB"
    attributes = {
        "servicecode": "AmazonEC2",
        "location": "US East (N. Virginia)",
        "locationType": "AWS Region",
        "regionCode": "us-east-1",
        "instanceType": instance_type,
        "instanceFamily": "GPU instance",
        "vcpu": "4",
        "memory": "16 GiB",
        "tenancy": "Shared",
        "operatingSystem": "Linux",
        "licenseModel": "No License required",
        "usagetype": f"BoxUsage:{instance_type}",
        "operation": operation,
        "capacitystatus": "Used",
        "preInstalledSw": "NA",
        "marketoption": "OnDemand",
    }
    if gpu is not None:
        attributes["gpu"] = gpu
    return json.dumps(
        {
            "product": {"productFamily": "Compute Instance", "attributes": attributes, "sku": sku},
            "serviceCode": "AmazonEC2",
            "terms": {
                "OnDemand": {
                    f"{sku}.JRTCKXETXF": {
                        "priceDimensions": {
                            f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                                "unit": "Hrs",
                                "endRange": "Inf",
                                "description": f"${usd} per On Demand Linux {instance_type} Instance Hour",
                                "appliesTo": [],
                                "rateCode": f"{sku}.JRTCKXETXF.6YS6EN2CT7",
                                "beginRange": "0",
                                "pricePerUnit": {"USD": usd},
                            }
                        },
                        "sku": sku,
                        "effectiveDate": "2025-12-01T00:00:00Z",
                        "offerTermCode": "JRTCKXETXF",
                        "termAttributes": {},
                    }
                },
                "Reserved": {
                    f"{sku}.4NA7Y494T4": {
                        "priceDimensions": {
                            f"{sku}.4NA7Y494T4.6YS6EN2CT7": {"unit": "Hrs", "pricePerUnit": {"USD": "0.4"}}
                        }
                    }
                },
            },
            "version": "20251201000000",
            "publicationDate": "2025-12-01T00:00:00Z",
        }
    )


@pytest.fixture(name="price_product")
def _price_product() -> Callable[..., str]:
    return price_product


# ---- AdaptDL's scheduling hints, as its rank 0 sends them (with the launcher's speedup table) -------------

ADAPTDL_HINTS: dict[str, object] = {
    "initBatchSize": 32,
    "localBszBounds": [16, 128],
    "globalBatchSize": None,
    "maxBatchSize": 256,
    "maxProfiledReplicas": 1,
    "gradientAccumulation": True,
    "gradParams": {"norm": 0.0, "var": 0.457},
    "perfParams": {
        "alpha_c": 0.0282,
        "beta_c": 0.000887,
        "alpha_n": 1.1e-08,
        "beta_n": 1.1e-08,
        "alpha_r": 1e-08,
        "beta_r": 1e-08,
        "gamma": 1.001,
    },
    "speedup": {"1": 1.0, "2": 1.71},
}


@pytest.fixture
def adaptdl_hints() -> dict[str, object]:
    return json.loads(json.dumps(ADAPTDL_HINTS))  # a copy a test may change
