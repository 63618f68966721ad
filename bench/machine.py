"""The machine a benchmark ran on, for the header of its committed results."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def describe() -> str:
    model = "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory = ""
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        kib = int(meminfo.read_text().split()[1])
        memory = f", {kib / 2**20:.0f} GiB RAM"
    return f"{platform.machine()}, {model}, {os.cpu_count()} cores{memory}, Python {platform.python_version()}, {platform.system()} {platform.release()}"
