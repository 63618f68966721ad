"""numpy's removed aliases for AdaptDL's modules only (`stratus.launchers._adaptdl_numpy`, issue 28): a module of a
covered package that uses ``np.int`` gets it through the hook, while ``numpy`` itself, the user's, stays
without it; modules that need nothing, and a numpy that still has the aliases, are left as they are.
The packages here are small fakes written under tmp_path (a covered prefix of their own, so the real
adaptdl is not touched); tests/integration/test_adaptdl_numpy_boot.py runs the real one."""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import numpy
import pytest

from stratus.launchers import _adaptdl_numpy as layer
from stratus.launchers._adaptdl_sync import Folders
from stratus.launchers.adaptdl import ReplicaLaunch, build_replica_env

USES_INT = """
import numpy as np
import numpy

def zeros(n):
    return np.zeros(n, dtype=np.int)

def total(values):
    return np.product(values)
"""
CLEAN = """
import numpy as np

def zeros(n):
    return np.zeros(n, dtype=int)
"""


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh package ``fakeadl_<n>`` on sys.path with ``goodput`` (uses np.int, np.product) and ``clean``
    (uses no alias); removed from sys.modules afterwards."""
    name = "fakeadl_" + re.sub(r"\W", "_", tmp_path.name)
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "goodput.py").write_text(USES_INT)
    (root / "clean.py").write_text(CLEAN)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield name
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[key]


@pytest.fixture
def said() -> list[str]:
    return []


@pytest.fixture
def hook(package: str, said: list[str]) -> Iterator[layer.AliasFinder]:
    finder = layer.install((package,), say=said.append)
    yield finder
    layer.uninstall(finder)


def test_the_defect_without_the_layer_np_int_is_gone(package: str) -> None:
    goodput = importlib.import_module(f"{package}.goodput")
    with pytest.raises(AttributeError, match="int"):
        goodput.zeros(3)


def test_a_covered_module_gets_the_aliases_it_uses_and_numpy_stays_without_them(
    package: str, hook: layer.AliasFinder, said: list[str]
) -> None:
    goodput = importlib.import_module(f"{package}.goodput")

    assert goodput.zeros(3).tolist() == [0, 0, 0] and goodput.zeros(3).dtype == numpy.dtype(int)
    assert goodput.total([2, 3, 4]) == 24
    assert isinstance(goodput.np, layer.AliasedNumpy) and goodput.np.int is int
    assert goodput.np.product is numpy.prod and goodput.np.zeros is numpy.zeros
    assert goodput.numpy is numpy  # its other global uses no alias: numpy itself
    assert not hasattr(numpy, "int") and not hasattr(numpy, "product")  # the user's numpy is untouched
    assert importlib.import_module("numpy") is numpy
    assert said == [
        f"{package}.goodput uses np.int, np.product, gone from numpy {numpy.__version__}: this module gets "
        "numpy's old aliases (launchers/_adaptdl_numpy.py); numpy itself is unchanged"
    ]
    # nothing else shows the hook: the module's loader is its own
    assert type(goodput.__loader__) is importlib.machinery.SourceFileLoader
    assert goodput.__spec__.loader is goodput.__loader__


def test_a_module_that_uses_no_removed_alias_keeps_numpy_itself(
    package: str, hook: layer.AliasFinder, said: list[str]
) -> None:
    clean = importlib.import_module(f"{package}.clean")
    assert clean.np is numpy and said == []


def test_modules_imported_before_the_hook_get_the_aliases_when_it_is_installed(
    package: str, said: list[str]
) -> None:
    goodput = importlib.import_module(f"{package}.goodput")
    finder = layer.install((package,), say=said.append)
    try:
        assert goodput.zeros(2).tolist() == [0, 0]
        assert layer.install((package,), say=said.append) is finder  # once
        assert sum(f is finder for f in sys.meta_path) == 1
    finally:
        layer.uninstall(finder)
    assert finder not in sys.meta_path


def test_a_module_outside_the_covered_packages_is_not_touched(
    package: str, tmp_path: Path, said: list[str]
) -> None:
    finder = layer.install(("someone_else",), say=said.append)
    try:
        goodput = importlib.import_module(f"{package}.goodput")
        assert goodput.np is numpy and said == []
    finally:
        layer.uninstall(finder)


def test_a_numpy_that_still_has_the_aliases_changes_nothing(package: str, said: list[str]) -> None:
    goodput = importlib.import_module(f"{package}.goodput")
    old = types.ModuleType("numpy")  # numpy < 1.24, as goodput's source sees it
    old.int, old.product, old.zeros = int, numpy.prod, numpy.zeros  # type: ignore[attr-defined]
    goodput.np = old
    assert layer.give_aliases(goodput, old, say=said.append) == {} and goodput.np is old and said == []


def test_the_proxy_is_numpy_for_everything_but_the_aliases() -> None:
    proxy = layer.AliasedNumpy(numpy, {"int": int})
    assert proxy.__name__ == "numpy" and proxy.__version__ == numpy.__version__
    assert proxy.float64 is numpy.float64 and proxy.random is numpy.random
    assert "int" in dir(proxy) and "zeros" in dir(proxy)
    proxy.stratus_probe = 1  # type: ignore[attr-defined]  # set on numpy, as on the module itself
    try:
        assert numpy.stratus_probe == 1  # type: ignore[attr-defined]
    finally:
        del proxy.stratus_probe  # type: ignore[attr-defined]
    assert not hasattr(numpy, "stratus_probe")
    with pytest.raises(AttributeError):
        proxy.no_such_thing  # noqa: B018


def test_each_alias_numpy_2_lacks_is_what_it_was_and_numpy_2s_own_names_are_kept() -> None:
    if int(numpy.__version__.split(".")[0]) < 2:
        pytest.skip(f"numpy {numpy.__version__} still has most of the aliases")
    missing = layer.missing_aliases(numpy)
    assert {
        name: missing[name]
        for name in ("int", "float", "object", "str", "float_", "complex_", "unicode_", "product", "alltrue")
    } == {
        "int": int,
        "float": float,
        "object": object,
        "str": str,
        "float_": numpy.float64,
        "complex_": numpy.complex128,
        "unicode_": numpy.str_,
        "product": numpy.prod,
        "alltrue": numpy.all,
    }
    assert missing["NaN"] != missing["NaN"] and missing["NINF"] == -numpy.inf
    # numpy 2 has its own np.bool and np.long again (numpy's types, not Python's): never replaced
    assert "bool" not in missing and "long" not in missing


def test_used_attributes_reads_one_global_name_only() -> None:
    source = "x = np.int\ny = onp.float\nz = np . product(a)\nw = self.np.bool\n"
    assert layer.used_attributes(source, "np") == {"int", "product"}


def test_replicas_get_the_boot_folder_first_on_pythonpath(tmp_path: Path) -> None:
    assert (layer.BOOT_DIR / "sitecustomize.py").is_file()
    assert sorted(p.name for p in layer.BOOT_DIR.iterdir() if p.suffix == ".py") == ["sitecustomize.py"]
    elsewhere = os.path.join("/opt", "old", "launchers", "adaptdl_numpy")
    env = layer.with_layer({"PYTHONPATH": os.pathsep.join(["/user/lib", elsewhere, "/compat/nni"])})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(layer.BOOT_DIR), "/user/lib", "/compat/nni"]
    assert layer.with_layer({})["PYTHONPATH"] == str(layer.BOOT_DIR)

    folders = Folders(tmp_path / "c", tmp_path / "s", tmp_path / "t")
    launch = ReplicaLaunch(1, "127.0.0.1", 29400, "1/1", 0, "http://127.0.0.1:1", folders)
    replica = build_replica_env(launch, 0, {"PYTHONPATH": "/user/lib"})
    assert replica["PYTHONPATH"].split(os.pathsep) == [str(layer.BOOT_DIR), "/user/lib"]
