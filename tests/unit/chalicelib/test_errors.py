"""One error tree for the control plane: every exception class chalicelib defines descends from
`StratusError`, so the API answers each with its own code and status, never a bare 500."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import chalicelib
from chalicelib import config as cfg
from chalicelib.domain.searchers import SearcherNotSupportedError
from chalicelib.errors import BadRequestError, StratusError


def _chalicelib_modules() -> list[str]:
    return [m.name for m in pkgutil.walk_packages(chalicelib.__path__, "chalicelib.")]


def test_every_error_class_of_chalicelib_is_in_the_one_tree():
    outside = []
    for name in _chalicelib_modules():
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == name
                and not issubclass(value, StratusError)
            ):
                outside.append(f"{name}.{value.__name__}")
    assert outside == []


def test_the_tree_module_imports_nothing_of_the_project():
    # The pure packages (domain, config) raise its errors, so it must stay a leaf.
    source = inspect.getsource(importlib.import_module("chalicelib.errors"))
    assert "import chalicelib" not in source and "from chalicelib" not in source


def test_a_config_error_is_a_bad_request_with_its_problems():
    error = cfg.ConfigInvalidError([cfg.ConfigProblem("searcher.max_trials", "must be ≥ 1")])
    assert isinstance(error, BadRequestError)
    assert error.status == 400
    assert error.body() == {
        "error": "ConfigInvalid",
        "message": "config has 1 problem: searcher.max_trials: must be ≥ 1",
        "problems": [{"path": "searcher.max_trials", "message": "must be ≥ 1"}],
    }


def test_a_searcher_that_cannot_run_is_a_bad_request():
    assert issubclass(SearcherNotSupportedError, BadRequestError)
    assert SearcherNotSupportedError.status == 400
