"""The functions' runtime and size: one Python version for the package and the template, and one memory
size for the template and Chalice's own config (`chalice local`, `chalice deploy`)."""

from __future__ import annotations

import json
from pathlib import Path

from infra.aws import package, template_app

ROOT = Path(__file__).resolve().parents[4]


def test_the_functions_run_the_python_the_package_is_built_for() -> None:
    assert template_app.RUNTIME == package.LAMBDA_RUNTIME == f"python{package.LAMBDA_PYTHON}"
    major, minor = map(int, package.LAMBDA_PYTHON.split("."))
    assert (major, minor) >= (3, 12)  # python3.11 on Lambda is past its deprecation (2026-06-30)
    assert package.PLATFORMS[0] == "manylinux_2_34_x86_64"  # Amazon Linux 2023's glibc first


def test_the_template_and_chalices_config_give_the_functions_the_same_memory() -> None:
    config = json.loads((ROOT / ".chalice" / "config.json").read_text())
    assert config["lambda_memory_size"] == template_app.MEMORY_MB
