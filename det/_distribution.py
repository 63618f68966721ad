"""The installed distribution that brings `det` (pyproject's `[project] name`), read in one place.

PyPI's `stratus` is another project, so the distribution is `stratus-dl`: `pip install 'stratus[plot]'`
would fetch that stranger. Everything that reads the distribution's metadata (an extra's requirements,
the files it installed, such as the examples) asks here. The CLI's version is its code's
(`stratus.contract.versions.VERSION`), which the API and the agents compare theirs with.
"""

from __future__ import annotations

import os
import re
from importlib import metadata

from stratus.contract.versions import DISTRIBUTION

__all__ = ["DISTRIBUTION", "extra_requirements", "installed_files"]


def extra_requirements(extra: str, fallback: tuple[str, ...]) -> list[str]:
    """The requirements of one extra (`plot`: `matplotlib>=3.9`) as the installed metadata declares
    them, so that a hint names what `pip install 'stratus-dl[EXTRA]'` would install; `fallback` when
    the distribution is not installed."""
    try:
        declared = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return list(fallback)
    marker = re.compile(rf"""extra\s*==\s*["']{re.escape(extra)}["']""")
    found = [spec.split(";", 1)[0].strip() for spec in declared if marker.search(spec)]
    return found or list(fallback)


def installed_files(part: str, dist: metadata.Distribution | None = None) -> list[tuple[str, str]]:
    """(relative path under `part`, absolute path) of every file the distribution (`dist`, else the
    installed one) installed below a folder named `part` (e.g. `share/stratus-dl/examples`), wherever
    the installer put it (a venv's prefix, `--user`, `--prefix`: its RECORD says); empty when the
    distribution is not installed."""
    if dist is None:
        try:
            dist = metadata.distribution(DISTRIBUTION)
        except metadata.PackageNotFoundError:
            return []
    found = []
    marker = f"{part.strip('/')}/"
    for file in dist.files or []:
        text = str(file).replace("\\", "/")
        at = text.find(marker)
        if at >= 0 and not text.endswith((".pyc", "/")):
            found.append((text[at + len(marker) :], os.path.normpath(str(dist.locate_file(file)))))
    return found
