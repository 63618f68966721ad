"""Every lock of the deployment's dependencies, made anew from their requirements (`make lock`). Run from the
repository root:

    python -m infra.aws.lock [--check]

- `infra/aws/lambda.lock`: the Lambda package's (`requirements.txt`), for CPython 3.12 on manylinux_2_34
  x86_64, wheels only (`infra/aws/package.py`).
- `infra/aws/compute.lock`: the compute wheel's (pyproject.toml's requirements of what the compute side
  imports), for every platform from its Requires-Python up (`infra/aws/compute_package.py`).

Each is resolved by uv from the package index (PyPI), newest versions within the requirements' ranges, with
the sha256 of each version's files (`infra/aws/lockfile.py`); the builders install nothing else. After
changing `requirements.txt` or pyproject.toml's requirement of a compute dependency, run `make lock` and
commit the locks with the change (a build, and tests/unit/infra/aws/test_locks.py, refuse a stale lock).
`--check` resolves nothing: it says whether each lock was made from its requirements as they are now.
"""

from __future__ import annotations

import argparse
import sys

from infra.aws import compute_package, package
from infra.aws.lockfile import Lock, parse


def locks() -> list[Lock]:
    return [package.lock(), compute_package.lock()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="check the locks against their requirements")
    args = parser.parse_args(argv)
    failed = 0
    for lock in locks():
        name = lock.path.relative_to(package.ROOT)
        if args.check:
            problem = lock.problem()
            failed += problem is not None
            print(problem or f"{name}: up to date ({_packages(len(lock.pins()))})")
            continue
        try:  # the versions before, even from a stale lock, to say what changed
            before = {pin.name: pin.version for pin in parse(lock.path.read_text())}
        except (OSError, ValueError):
            before = {}
        pins = lock.write()
        after = {pin.name: pin.version for pin in pins}
        changed = [f"{n} {before.get(n, 'new')} -> {v}" for n, v in after.items() if before.get(n) != v]
        changed += [f"{n} {v} -> gone" for n, v in before.items() if n not in after]
        print(
            f"{name}: {_packages(len(pins))} from {lock.source}; "
            + (", ".join(changed) or "no version changed")
        )
    return 1 if failed else 0


def _packages(count: int) -> str:
    return f"{count} package" + ("" if count == 1 else "s")


if __name__ == "__main__":
    sys.exit(main())
