"""The backends' registries on every side (chalicelib/compute/backends.py: the control plane's
`PoolCompute`; infra/aws/backends.py: the template's parts; infra/local/backends.py: the local stack's
runners): every cloud backend declared in `stratus.contract.pools` has exactly one entry on each side,
each entry is what its side calls, and no module of the product asks a backend's name
(`pool.backend == "ec2"`): a backend's nature is a trait, what it does is its registry entry
(docs/extending.md)."""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

import chalicelib
import det
import infra
from chalicelib.compute.backends import BACKENDS as CONTROL_PLANE
from infra.aws import compute_sagemaker
from infra.aws.backends import TEMPLATE_PARTS, NoTemplatePartError, parts_of
from infra.aws.compute_resources import compute_resources
from infra.aws.template import template
from infra.local import sagemaker as local_sagemaker
from infra.local.agents import AgentLauncher, StackContext
from infra.local.backends import RUNNERS
from infra.local.clouds import LocalClouds, NoRunnerError
from infra.shape import with_groups
from stratus.contract.pools import BACKENDS, CLOUD_BACKENDS, PoolSpec, Provider, traits

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/stratus:latest"


def _gaps(registry: Mapping[str, Any], declared: Iterable[str]) -> list[str]:
    """What is wrong with a registry of the cloud backends `declared`: a backend without an entry, an
    entry for a backend that is not declared."""
    declared = list(declared)
    return [f"{b!r} has no entry" for b in declared if b not in registry] + [
        f"{b!r} is not a declared cloud backend" for b in registry if b not in declared
    ]


@pytest.mark.parametrize(
    ("side", "registry"),
    [("control plane", CONTROL_PLANE), ("template", TEMPLATE_PARTS), ("local", RUNNERS)],
)
def test_every_cloud_backend_has_one_entry_on_each_side_and_nothing_else_has(side, registry):
    assert _gaps(registry, CLOUD_BACKENDS) == [], f"the {side} registry"


def test_the_check_names_a_missing_backend_and_an_undeclared_one():
    assert _gaps({"ec2": 1, "tpu": 2}, ("ec2", "batch")) == [
        "'batch' has no entry",
        "'tpu' is not a declared cloud backend",
    ]
    assert _gaps({"local": 1}, ()) == ["'local' is not a declared cloud backend"]


# ---- the template's parts --------------------------------------------------------------------------


def _pool(backend: str, name: str | None = None) -> PoolSpec:
    """A pool of `backend` its part can render: its instance type as the backend spells it, an image
    where its trials run in one."""
    kind = traits(backend)
    provider = Provider(
        instance_types=(kind.instance_prefix + "g5.xlarge",), image=IMAGE if kind.runs_image else ""
    )
    return PoolSpec(name=name or f"{backend}-pool", backend=backend, provider=provider)


@pytest.mark.parametrize("backend", CLOUD_BACKENDS)
def test_each_part_adds_its_rule_statements_parameters_and_variables_to_the_template(backend):
    part = TEMPLATE_PARTS[backend]
    built = template([PoolSpec(name="default"), _pool(backend)])
    resources = built["Resources"]
    statements = resources["ComputeControlPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert statements == part.control_statements()
    (queue,) = resources["EventsQueuePolicy"]["Properties"]["PolicyDocument"]["Statement"]
    sources = queue["Condition"]["ArnEquals"]["aws:SourceArn"]
    rules = ["SpotWarningRule", *([part.STATE_RULE] if part.STATE_RULE else [])]
    arns = [{"Fn::GetAtt": [rule, "Arn"]} for rule in rules]
    assert sources == (arns if len(arns) > 1 else arns[0])  # each rule may send to the events queue
    assert all(rule in resources for rule in rules)
    assert set(part.PARAMETERS) <= set(built["Parameters"])
    variables = resources["ApiFunction"]["Properties"]["Environment"]["Variables"]
    assert {name: variables.get(name) for name in part.CONTROL_ENVIRONMENT} == dict(part.CONTROL_ENVIRONMENT)


@pytest.mark.parametrize("backend", CLOUD_BACKENDS)
def test_the_traits_decide_the_agents_network_and_the_pools_group(backend):
    built = template([PoolSpec(name="default"), _pool(backend, "p")])
    kind = traits(backend)
    assert ("AgentSecurityGroup" in built["Resources"]) is kind.networked
    assert ("AgentSubnetIds" in built["Parameters"]) is kind.networked
    pools = built["Resources"]["ApiFunction"]["Properties"]["Environment"]["Variables"]["STRATUS_POOLS"]
    text = pools["Fn::Sub"] if isinstance(pools, dict) else pools
    (rendered,) = [p for p in json.loads(text) if p["name"] == "p"]
    assert (rendered["provider"].get("group") == "${AWS::StackName}-p") is kind.grouped


def test_a_part_is_asked_only_for_its_own_pools_in_the_registrys_order():
    pools = [_pool("sagemaker", "s"), PoolSpec(name="default"), _pool("ec2", "a"), _pool("ec2", "b")]
    found = [(part, [p.name for p in of]) for part, of in parts_of(pools)]
    assert found == [(TEMPLATE_PARTS["ec2"], ["a", "b"]), (TEMPLATE_PARTS["sagemaker"], ["s"])]
    assert parts_of([PoolSpec(name="default")]) == []
    assert compute_resources([PoolSpec(name="default")]) == ({}, {}, {}, {})


def test_a_cloud_pool_whose_backend_has_no_part_is_refused_by_name():
    with pytest.raises(NoTemplatePartError, match="backend 'batch' has no part.*TEMPLATE_PARTS"):
        parts_of([_pool("ec2"), _pool("batch")], {"ec2": TEMPLATE_PARTS["ec2"]})


# ---- the local stack's runners ---------------------------------------------------------------------


class _Runner:
    def __init__(self, calls: list[tuple[str, ...]], context: StackContext, pools: list[PoolSpec]) -> None:
        self.context = context
        self.pools = pools
        self.calls = calls
        self.name = pools[0].backend

    def create(self) -> None:
        self.calls.append(("create", self.name))

    def start(self) -> None:
        self.calls.append(("start", self.name))

    def stop(self) -> None:
        self.calls.append(("stop", self.name))


def _context(tmp_path: Path, session: Any = None) -> StackContext:
    return StackContext(
        "lab",
        session if session is not None else object(),
        "http://127.0.0.1:1",
        AgentLauncher(tmp_path, "http://127.0.0.1:2", "token"),
        "http://127.0.0.1:1/queue/events",
        tmp_path,
    )


def _clouds(pools: list[PoolSpec], runners: Mapping[str, Any], tmp_path: Path) -> LocalClouds:
    return LocalClouds(_context(tmp_path), pools, runners=runners)


def test_the_local_stack_makes_one_runner_per_backend_in_use_with_its_pools_only(tmp_path):
    calls: list[tuple[str, ...]] = []
    made: list[_Runner] = []

    def factory(context: StackContext, pools: list[PoolSpec]) -> _Runner:
        made.append(_Runner(calls, context, pools))
        return made[-1]

    pools = [PoolSpec(name="default"), _pool("batch", "b"), _pool("ec2", "a"), _pool("ec2", "c")]
    clouds = _clouds(pools, {backend: factory for backend in CLOUD_BACKENDS}, tmp_path)
    assert [(r.name, [p.name for p in r.pools]) for r in made] == [
        ("ec2", ["a", "c"]),
        ("batch", ["b"]),
    ]
    assert made[0].context.stack == "lab" and made[0].context.state_dir == tmp_path
    clouds.create()
    clouds.start()
    clouds.stop()
    assert calls == [(step, name) for step in ("create", "start", "stop") for name in ("ec2", "batch")]


def test_a_cloud_pool_whose_backend_has_no_runner_is_refused_by_name(tmp_path):
    with pytest.raises(NoRunnerError, match="backend 'sagemaker' has no runner.*RUNNERS"):
        _clouds([_pool("ec2"), _pool("sagemaker")], {"ec2": RUNNERS["ec2"]}, tmp_path)


@pytest.mark.parametrize("backend", CLOUD_BACKENDS)
def test_each_runner_is_made_from_the_stacks_context_and_is_created_started_and_stopped(backend):
    inspect.signature(RUNNERS[backend]).bind(None, [])  # (context, pools), as LocalClouds makes them
    assert all(callable(getattr(RUNNERS[backend], step, None)) for step in ("create", "start", "stop"))


def test_the_sagemaker_runner_names_the_role_its_jobs_run_as(tmp_path, monkeypatch):
    class Session:
        def client(self, service: str, endpoint_url: str) -> object:
            return object()

    monkeypatch.delenv(compute_sagemaker.ROLE_VARIABLE, raising=False)
    runner = RUNNERS["sagemaker"](_context(tmp_path, Session()), [_pool("sagemaker")])
    runner.create()
    assert local_sagemaker.ROLE_VARIABLE == compute_sagemaker.ROLE_VARIABLE  # what the control plane reads
    assert re.fullmatch(r"arn:aws:iam::\d{12}:role/lab-sagemaker", os.environ[local_sagemaker.ROLE_VARIABLE])


def test_the_local_stack_names_a_group_after_each_grouped_pool():
    pools = with_groups([PoolSpec(name="default"), *(_pool(b, b) for b in CLOUD_BACKENDS)], "lab")
    groups = {p.name: p.provider.group if p.provider else None for p in pools}
    assert groups == {
        "default": None,
        **{b: f"lab-{b}" if traits(b).grouped else "" for b in CLOUD_BACKENDS},
    }


# ---- no backend's name is asked in infra/ ------------------------------------------------------------

#: A name that holds a backend or backends: `backend`, `pool.backend`, `backends`, `cloud_backend`.
_BACKENDISH = re.compile(r"(^|_)backends?$")
_COMPARISONS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot)


def _is_backend(node: ast.AST) -> bool:
    """An expression that reads a backend: a name or attribute `backend`, `x["backend"]`,
    `x.get("backend", ...)`, or a comprehension of such (`{p.backend for p in pools}`)."""
    if isinstance(node, ast.Name):
        return bool(_BACKENDISH.search(node.id))
    if isinstance(node, ast.Attribute):
        return bool(_BACKENDISH.search(node.attr))
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "backend"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        first = node.args[0] if node.args else None
        return isinstance(first, ast.Constant) and first.value == "backend"
    if isinstance(node, ast.SetComp | ast.ListComp | ast.GeneratorExp):
        return _is_backend(node.elt)
    return False


def _is_text(node: ast.AST) -> bool:
    """A string literal, or a tuple, list or set of them."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return bool(node.elts) and all(_is_text(e) for e in node.elts)
    return False


def _names_asked(source: str) -> list[int]:
    """The lines of `source` that compare a backend with a string literal (or match it against one)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for op, left, right in zip(node.ops, sides[:-1], sides[1:], strict=True):
                if isinstance(op, _COMPARISONS) and (
                    (_is_backend(left) and _is_text(right)) or (_is_text(left) and _is_backend(right))
                ):
                    lines.append(node.lineno)
        elif isinstance(node, ast.Match) and _is_backend(node.subject):
            values = [
                p for case in node.cases for p in ast.walk(case.pattern) if isinstance(p, ast.MatchValue)
            ]
            lines.extend(p.lineno for p in values if _is_text(p.value))
    return sorted(set(lines))


@pytest.mark.parametrize(
    ("source", "asked"),
    [
        ('if pool.backend == "ec2": pass', True),
        ('x = p.backend in ("ec2", "batch")', True),
        ('x = spec.backend != "local"', True),
        ('x = "sagemaker" in backends', True),
        ('x = "ec2" not in {p.backend for p in pools}', True),
        ('x = backend is "local"', True),
        ('x = item["backend"] == "batch"', True),
        ('x = item.get("backend", "local") != "local"', True),
        ('x = 0 < len(name) and default_backend == "ec2"', True),
        ('match pool.backend:\n    case "ec2": pass\n    case _: pass', True),
        ("x = traits(pool.backend).grouped", False),
        ("x = [p for p in pools if p.backend == backend]", False),
        ("x = pool.backend in TEMPLATE_PARTS", False),
        ('x = kind == "SPOT"', False),
        ('x = values.get("backend", "local")', False),
        ('x = backend_kind == "ec2"', False),
    ],
)
def test_the_scan_finds_a_backends_name_asked_and_nothing_else(source, asked):
    assert bool(_names_asked(source)) is asked


@pytest.mark.parametrize("package", [infra, chalicelib, det], ids=lambda package: package.__name__)
def test_no_module_of_the_product_asks_a_backends_name(package):
    root = Path(package.__file__).parent
    found = [
        f"{path.relative_to(root.parent)}:{line}: {path.read_text().splitlines()[line - 1].strip()}"
        for path in sorted(root.rglob("*.py"))
        for line in _names_asked(path.read_text())
    ]
    assert found == [], "read traits(backend) or the side's registry instead:\n" + "\n".join(found)
    assert set(BACKENDS) > set(CLOUD_BACKENDS)  # `local` is declared, and is in no registry


def test_the_contract_asks_a_backends_name_only_where_the_traits_are_declared():
    import stratus.contract as contract

    root = Path(contract.__file__).parent
    found = [path.name for path in sorted(root.rglob("*.py")) if _names_asked(path.read_text())]
    assert found == []


def test_each_control_plane_backend_is_made_from_the_parts_and_answers_what_the_router_asks():
    """The router calls these five on a cloud pool's backend (`PoolCompute`); a backend without one, or
    one its `for_pools` cannot make from `BackendParts`, would fail at its first pool, not here."""
    from chalicelib.compute.cloud import JobCredentials
    from chalicelib.compute.pool_compute import BackendParts, CloudClients, PoolCompute
    from chalicelib.memory import memory_ports

    ports = memory_ports()
    clients = CloudClients(
        lambda: ports.autoscaling, lambda: ports.batch, lambda: ports.sagemaker, lambda: None
    )
    parts = BackendParts(
        ports.agents,
        ports.runs,
        ports.clock,
        30.0,
        "stack",
        "http://127.0.0.1:8080",
        ports.experiments,
        JobCredentials(ports.blobs, "token"),
        clients,
    )
    asked = [n for n, _ in inspect.getmembers(PoolCompute, inspect.isfunction) if not n.startswith("_")]
    assert sorted(asked) == ["hosts", "set_demand", "submit", "sweep", "terminate"]
    for backend, make in CONTROL_PLANE.items():
        made = make(parts)
        for name in asked:
            wanted = list(inspect.signature(getattr(PoolCompute, name)).parameters)[1:]
            method = getattr(made, name, None)
            assert callable(method), f"{backend} has no {name}"
            assert list(inspect.signature(method).parameters) == wanted, f"{backend}.{name}"
