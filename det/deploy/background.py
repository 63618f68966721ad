"""A local stack in a child process, for the tests and the benchmarks (users have `det deploy local up`):
started with the command line `det deploy local up` uses, ready once it wrote its `stack.json`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from det.deploy.stack_command import stack_command


class BackgroundStack:
    """A local stack in a child process (for tests and benchmarks; users have `det deploy local up`)."""

    def __init__(
        self,
        state_dir: Path,
        *,
        port: int = 0,
        slots: int | None = 2,
        agents: int = 1,
        timeout: float = 120,
        env: Mapping[str, str] | None = None,
        pools: Sequence[str] = (),
        cluster_config: Path | None = None,
    ) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        state_file = state_dir / "stack.json"
        state_file.unlink(missing_ok=True)  # left by a stack killed with -9: not this one's
        self.log_path = state_dir / "stack.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            stack_command(port, slots, state_dir, agents, pools=pools, cluster_config=cluster_config),
            cwd=Path(__file__).resolve().parents[2],
            env={**os.environ, **(env or {})},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while not state_file.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the local stack did not start:\n" + self.log_path.read_text()[-3000:])
            time.sleep(0.1)
        self.state: dict[str, Any] = json.loads(state_file.read_text())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log.close()
