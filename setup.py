"""Which packages the distribution installs, and under which names; pyproject.toml holds the rest.

The packages whose code runs inside a trial's own processes, beside the user's modules, are installed
under the `stratus` namespace: `contract` as `stratus.contract`, `harness` as `stratus.harness`,
`launchers` as `stratus.launchers`. A context holding its own `contract.py`, `harness.py` or
`launchers/` (ordinary names in ML repositories) then imports its own module, and ours import ours
(issue 28). The repository keeps them as top-level folders; `make` installs the checkout editable, so
`stratus.harness` is the `harness/` folder there. The CLI (`det`), the control plane (`chalicelib`,
`app`) and `infra` never share a process with user code, and every process we start runs with Python's
safe path (`-P`), so the folder it is started from is never searched first.
"""

from setuptools import find_packages, setup

#: Imported as `stratus.<name>` (docs/architecture.md, "Names").
NAMESPACED = ("contract", "harness", "launchers")
TOP_LEVEL = ("det", "chalicelib", "infra")


def packages() -> list[str]:
    found = find_packages(include=[f"{name}*" for name in (*NAMESPACED, *TOP_LEVEL)])
    return [f"stratus.{p}" if p.split(".")[0] in NAMESPACED else p for p in found]


setup(
    packages=packages(),
    package_dir={f"stratus.{name}": name for name in NAMESPACED},
    package_data={
        # The determined/nni stand-ins are folders put on a trial's PYTHONPATH, not subpackages of harness.
        "stratus.harness": ["compat/determined/**/*.py", "compat/nni/**/*.py"],
        # The sitecustomize folder put first on an AdaptDL replica's PYTHONPATH (launchers/_adaptdl_numpy.py).
        "stratus.launchers": ["adaptdl_numpy/sitecustomize.py"],
    },
)
