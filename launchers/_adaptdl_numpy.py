"""numpy's removed aliases, for AdaptDL's modules only (issue 28).

adaptdl 0.2.11's ``GoodputFunction.optimize(accumulation=False)`` uses ``np.int``, which numpy 1.24 removed.
It is what ``autoscale_batch_size`` runs at AdaptDL's default (``gradient_accumulation=False``) as soon as
AdaptDL has fitted its performance model, so an AdaptDL trial written as AdaptDL documents it died a few
epochs in. This layer makes it run without patching site-packages and without putting ``np.int`` back
for anyone else:

- `install` puts an import hook (`AliasFinder`) first on ``sys.meta_path``. When a module of ``adaptdl``
  is executed, and after that for the ones already imported, `give_aliases` replaces each of its globals
  bound to numpy by an `AliasedNumpy`: numpy itself for every attribute, plus the removed aliases that
  the module's source uses and this numpy lacks (``np.int`` -> ``int``).
- The module's own globals are the only thing that changes. ``import numpy`` anywhere else, the user's
  code included, is the real numpy, without ``np.int``.
- Nothing changes where nothing is missing: with numpy < 1.24, or an adaptdl whose source uses no removed
  alias, no global is replaced.

Replicas get it from ``launchers/adaptdl_numpy/sitecustomize.py`` (on their ``PYTHONPATH``, see
`with_layer`); the launcher's own process (`stratus.launchers._adaptdl_proxy`, which runs AdaptDL's goodput
model for the speedup table) calls `install` itself. A module that used an alias at import time, or
imported one by name (``from numpy import int``), would fail before the hook sees it; adaptdl uses them
only inside functions.

Only the standard library is imported here: the sitecustomize loads this file into every Python process
a replica starts, before anything else.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import re
import sys
import types
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

#: The packages whose modules get the aliases.
PREFIXES: tuple[str, ...] = ("adaptdl",)
#: The folder whose ``sitecustomize.py`` loads this layer into a replica (first on its ``PYTHONPATH``).
BOOT_DIR = Path(__file__).resolve().parent / "adaptdl_numpy"

#: Removed in numpy 1.24 (deprecated in 1.20): aliases of Python's own types.
BUILTIN_ALIASES: Mapping[str, object] = {
    "int": int,
    "float": float,
    "bool": bool,
    "object": object,
    "complex": complex,
    "str": str,
    "long": int,
    "unicode": str,
}
#: Removed in numpy 2.0 (NEP 52) or deprecated since: alias -> the numpy name it is the same object as.
RENAMED: Mapping[str, str] = {
    "NaN": "nan",
    "NAN": "nan",
    "Inf": "inf",
    "Infinity": "inf",
    "infty": "inf",
    "PINF": "inf",
    "float_": "float64",
    "complex_": "complex128",
    "cfloat": "complex128",
    "singlecomplex": "complex64",
    "longfloat": "longdouble",
    "clongfloat": "clongdouble",
    "longcomplex": "clongdouble",
    "string_": "bytes_",
    "unicode_": "str_",
    "int0": "intp",
    "uint0": "uintp",
    "bool8": "bool_",
    "object0": "object_",
    "str0": "str_",
    "bytes0": "bytes_",
    "void0": "void",
    "product": "prod",
    "cumproduct": "cumprod",
    "alltrue": "all",
    "sometrue": "any",
    "round_": "round",
    "row_stack": "vstack",
    "trapz": "trapezoid",
    "mat": "asmatrix",
}
#: Removed in numpy 2.0: constants.
CONSTANTS: Mapping[str, float] = {"NINF": float("-inf"), "PZERO": 0.0, "NZERO": -0.0}
ALIASES: frozenset[str] = frozenset({*BUILTIN_ALIASES, *RENAMED, *CONSTANTS})

#: How a finder of this layer is recognised on ``sys.meta_path`` (also from another copy of this file).
MARKER = "adds_numpy_aliases"

Say = Callable[[str], None]


def missing_aliases(numpy: types.ModuleType, names: Iterable[str] = ALIASES) -> dict[str, object]:
    """Those of the aliases ``names`` that ``numpy`` lacks, with what each was (where this numpy can still
    say it). An alias numpy still serves, even with a deprecation warning (numpy 1.20-1.23), is not
    missing: the module keeps numpy's own behaviour, warning included."""
    found: dict[str, object] = {}
    for name in sorted(set(names) & ALIASES):
        with warnings.catch_warnings():  # numpy 2 warns when asked for np.str / np.object
            warnings.simplefilter("ignore")
            if hasattr(numpy, name):
                continue
        if name in BUILTIN_ALIASES:
            found[name] = BUILTIN_ALIASES[name]
        elif name in CONSTANTS:
            found[name] = CONSTANTS[name]
        elif hasattr(numpy, RENAMED[name]):
            found[name] = getattr(numpy, RENAMED[name])
    return found


class AliasedNumpy(types.ModuleType):
    """numpy as one module sees it: numpy's every attribute (looked up in numpy at each access, and set
    there), and ``aliases`` besides, which numpy lacks."""

    def __init__(self, numpy: types.ModuleType, aliases: Mapping[str, object]) -> None:
        super().__init__(numpy.__name__, numpy.__doc__)
        self.__dict__.update(
            {
                k: numpy.__dict__[k]
                for k in ("__spec__", "__loader__", "__package__", "__file__")
                if k in numpy.__dict__
            }
        )
        self.__dict__.update(aliases)
        self.__dict__["_numpy"] = numpy

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_numpy"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.__dict__["_numpy"], name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self.__dict__["_numpy"], name)

    def __dir__(self) -> list[str]:
        return sorted({*dir(self.__dict__["_numpy"]), *self.__dict__})

    def __repr__(self) -> str:
        aliases = sorted(k for k in self.__dict__ if k in ALIASES)
        return f"<{self.__dict__['_numpy']!r} with the old aliases {', '.join(aliases)}>"


def used_attributes(source: str, name: str) -> set[str]:
    """The attributes ``source`` reads from its global ``name`` (``np.int`` -> ``int``)."""
    return set(re.findall(rf"(?<![\w.]){re.escape(name)}\s*\.\s*([A-Za-z_]\w*)", source))


def give_aliases(
    module: types.ModuleType, numpy: types.ModuleType | None = None, *, say: Say | None = None
) -> dict[str, list[str]]:
    """Replace ``module``'s globals bound to ``numpy`` (the imported one by default) by an `AliasedNumpy`
    carrying the removed aliases its source uses and numpy lacks; {global: [aliases]} of those replaced.
    Without the source (a module from bytecode only) every alias numpy lacks is given."""
    numpy = numpy if numpy is not None else sys.modules.get("numpy")
    if numpy is None:
        return {}
    source = _source(module)
    given: dict[str, list[str]] = {}
    for name, value in list(vars(module).items()):
        if value is not numpy:
            continue
        missing = missing_aliases(numpy, ALIASES if source is None else used_attributes(source, name))
        if missing:
            setattr(module, name, AliasedNumpy(numpy, missing))
            given[name] = sorted(missing)
    if given:
        (say or _say)(
            f"{module.__name__} uses "
            + ", ".join(f"{name}.{alias}" for name, aliases in given.items() for alias in aliases)
            + f", gone from numpy {getattr(numpy, '__version__', '?')}: this module gets numpy's old aliases "
            "(launchers/_adaptdl_numpy.py); numpy itself is unchanged"
        )
    return given


class _AliasingLoader(importlib.abc.Loader):
    """The module's own loader, then `give_aliases`. The module gets its own loader back before its code
    runs, so nothing but its numpy globals shows that it went through here."""

    def __init__(self, loader: importlib.abc.Loader, say: Say | None) -> None:
        self._loader, self._say = loader, say

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        give_aliases(module, say=self._say)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class AliasFinder(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: finds nothing itself; for a module of ``prefixes`` it asks the finders
    after it and wraps the loader of the spec they return in `_AliasingLoader`."""

    adds_numpy_aliases = True

    def __init__(self, prefixes: Sequence[str] = PREFIXES, *, say: Say | None = None) -> None:
        self.prefixes = tuple(prefixes)
        self._say = say

    def covers(self, fullname: str) -> bool:
        return any(fullname == p or fullname.startswith(p + ".") for p in self.prefixes)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not self.covers(fullname):
            return None
        for finder in list(sys.meta_path):
            if getattr(finder, MARKER, False):
                continue
            find = getattr(finder, "find_spec", None)
            spec: importlib.machinery.ModuleSpec | None = find(fullname, path, target) if find else None
            if spec is None:
                continue
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _AliasingLoader(spec.loader, self._say)
            return spec
        return None


def install(prefixes: Sequence[str] = PREFIXES, *, say: Say | None = None) -> AliasFinder:
    """Put the hook first on ``sys.meta_path`` (once: an installed one with the same prefixes is
    returned) and give the aliases to the covered modules already imported."""
    for finder in sys.meta_path:
        if getattr(finder, MARKER, False) and tuple(getattr(finder, "prefixes", ())) == tuple(prefixes):
            return finder  # type: ignore[return-value]
    finder = AliasFinder(prefixes, say=say)
    sys.meta_path.insert(0, finder)
    for name, module in list(sys.modules.items()):
        if module is not None and finder.covers(name):
            give_aliases(module, say=say)
    return finder


def uninstall(finder: AliasFinder) -> None:
    """Take the hook off ``sys.meta_path`` (modules already given aliases keep them)."""
    if finder in sys.meta_path:
        sys.meta_path.remove(finder)


def with_layer(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with `BOOT_DIR` first on ``PYTHONPATH``: Python imports the first ``sitecustomize`` on its
    path at startup, and ours then runs the one it hides (the image's, a user's folder's)."""
    kept = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and not is_boot_dir(p)]
    return {**env, "PYTHONPATH": os.pathsep.join([str(BOOT_DIR), *kept])}


def is_boot_dir(path: str) -> bool:
    """Whether ``path`` is a boot folder of this layer (this copy's, or another install's)."""
    parts = Path(os.path.abspath(path or os.curdir)).parts
    return tuple(parts[-2:]) == ("launchers", BOOT_DIR.name)


def _source(module: types.ModuleType) -> str | None:
    loader = getattr(module.__spec__, "loader", None) or getattr(module, "__loader__", None)
    get_source = getattr(loader, "get_source", None)
    if get_source is None:
        return None
    try:
        source = get_source(module.__name__)
    except (ImportError, OSError):
        return None
    return source if isinstance(source, str) else None


def _say(message: str) -> None:
    print(f"[stratus] {message}", file=sys.stderr, flush=True)
