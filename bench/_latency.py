"""What the latency benches share: polling for a milestone with a deadline, and a stage's table row
(median and max over the runs). Times the control plane wrote are read with
`chalicelib.services.clock.epoch_of`."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The benches' own polling of the API and the stack's records.
POLL_S = 0.02
TIMEOUT_S = 180.0


def wait_for(what: str, probe: Callable[[], Any], timeout: float = TIMEOUT_S) -> Any:
    """Poll ``probe`` until it returns something truthy; exit naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"no {what} within {timeout:.0f} s")
        time.sleep(POLL_S)


def stage_row(key: str, what: str, results: list[dict[str, float]]) -> str:
    """``| key | what | median | max |`` of one stage or milestone over the runs."""
    values = [r[key] for r in results]
    return f"| {key.strip()} | {what} | {statistics.median(values):.3f} | {max(values):.3f} |"


def upload_context(api: Any, folder: Path) -> str:
    """Pack `folder` and upload it as `det experiment create` does (a det._client.ApiClient); its sha256."""
    from det._context import pack

    packed = pack(folder)
    answer = api.request_context_upload(packed.sha256, len(packed.data))
    if answer.get("upload"):
        api.upload(answer["upload"], packed.data)
    return packed.sha256
