"""A lock: every package a product installs at one exact version, with the sha256 of each of that version's
files on the index, resolved by uv for the platform the product runs on (`uv pip compile
--generate-hashes`, which resolves for a platform other than this machine's; pip-tools cannot). The
products' locks are `infra/aws/lambda.lock` (`package.lock`) and `infra/aws/compute.lock`
(`compute_package.lock`); `python -m infra.aws.lock` (`make lock`) writes them anew.

The file is pip's requirements format, installed with `pip install --require-hashes --no-deps -r LOCK`,
under a header that records the sha256 of what it was resolved from (the requirements and uv's options
for the platform): a lock whose requirements or platform changed since is refused (`Lock.pins`), naming
the file and `make lock`, so a build never installs versions resolved from other requirements.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

COMMAND = "make lock"
_INPUT = re.compile(r"#\s*input-sha256:\s*([0-9a-f]{64})\b")
_PINNED = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)")
_HASH = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class Pin:
    """One package of a lock: its name (normalized, PEP 503), exact version, environment marker (a
    universal lock's packages for some platforms only) and the hashes pip accepts for its files."""

    name: str
    version: str
    marker: str
    hashes: tuple[str, ...]

    @property
    def requirement(self) -> str:
        """As a requirement (a wheel's `Requires-Dist`): `name==version`, and `; marker` where it has one."""
        return f"{self.name}=={self.version}" + (f"; {self.marker}" if self.marker else "")


@dataclass(frozen=True)
class Lock:
    path: Path
    source: str  # where its requirements are written, for messages: "requirements.txt"
    requirements: tuple[str, ...]  # as written there, comments left out
    options: tuple[str, ...]  # uv pip compile's options: the platform it is resolved for
    about: str  # the header's first line: whose dependencies, for which platform

    @property
    def input_sha256(self) -> str:
        """The hash of what the lock is made from, recorded in its header: the requirements and the options."""
        recipe = ["uv pip compile --generate-hashes", *self.options, "--", *self.requirements]
        return hashlib.sha256("\n".join(recipe).encode()).hexdigest()

    def problem(self) -> str | None:
        """Why this lock cannot be installed as it is (absent, made from other requirements or options, a
        package without an exact version or a hash), or None."""
        return self._problem(self._text())

    def read(self) -> tuple[str, list[Pin]]:
        """The lock's text and its packages; SystemExit naming the file and `make lock` where it cannot be
        installed as it is (`problem`)."""
        text = self._text()
        problem = self._problem(text)
        if text is None or problem:
            raise SystemExit(problem)
        return text, parse(text)

    def _text(self) -> str | None:
        return self.path.read_text() if self.path.is_file() else None

    def _problem(self, text: str | None) -> str | None:
        if text is None:
            return f"{self.path}: no such lock; run `{COMMAND}` to make it from {self.source}"
        recorded = _INPUT.search(text)
        if recorded is None or recorded[1] != self.input_sha256:
            return (
                f"{self.path}: made from other requirements than {self.source} now holds (or for another "
                f"platform); run `{COMMAND}` to update it"
            )
        try:
            pins = parse(text)
        except ValueError as e:
            return f"{self.path}: {e}; run `{COMMAND}` to make it anew"
        return None if pins else f"{self.path}: pins nothing; run `{COMMAND}` to make it anew"

    def pins(self) -> list[Pin]:
        """The lock's packages; SystemExit naming the file and `make lock` where it cannot be installed."""
        return self.read()[1]

    def write(self) -> list[Pin]:
        """Resolve the requirements anew with uv (from the package index) and write the lock: its packages."""
        if importlib.util.find_spec("uv") is None:
            raise SystemExit("uv is not installed here; `make install` installs it (requirements-dev.txt)")
        command = [
            sys.executable, "-m", "uv", "pip", "compile", "-", "--generate-hashes", "--no-header",
            "--no-config", "--quiet", "--python", sys.executable, *self.options,
        ]  # fmt: skip
        # The requirements on stdin: uv annotates each package pulled in by another (`# via optuna`), and
        # names no temporary file in the lock.
        done = subprocess.run(
            command, input="\n".join(self.requirements) + "\n", capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise SystemExit(f"{self.path}: uv could not resolve {self.source}:\n{done.stderr.strip()}")
        text = self.header() + done.stdout
        pins = parse(text)
        partial = self.path.with_name(self.path.name + ".partial")
        partial.write_text(text)
        os.replace(partial, self.path)
        return pins

    def header(self) -> str:
        return (
            f"# {self.about}\n"
            f"# Made by `{COMMAND}` (python -m infra.aws.lock) from {self.source}: change that and run `{COMMAND}`;\n"
            "# never edit this file.\n"
            f"# uv pip compile --generate-hashes {' '.join(self.options)}\n"
            f"# input-sha256: {self.input_sha256}\n"
        )


def parse(text: str) -> list[Pin]:
    """A lock's packages, in its order; ValueError on an entry that is not `name==version` with hashes."""
    pins = []
    for line in re.sub(r"\\\n", " ", text).splitlines():  # an entry continues on the lines after a `\`
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        requirement, *hashes = re.split(r"\s+--hash=", line)
        spec, _, marker = requirement.partition(";")
        pinned = _PINNED.fullmatch(spec.strip())
        if pinned is None:
            raise ValueError(f"{requirement.strip()!r} is not one exact version (name==version)")
        if not hashes or not all(_HASH.fullmatch(h.strip()) for h in hashes):
            raise ValueError(f"{requirement.strip()!r} has no sha256 hash")
        name = re.sub(r"[-_.]+", "-", pinned[1]).lower()
        pins.append(Pin(name, pinned[2], marker.strip(), tuple(h.strip() for h in hashes)))
    return pins
