"""The trial's start script (`stratus.harness.trial_process.build_script`) run by a real bash: a failing startup
hook stops it before the entrypoint and leaves its sentence in the marker file.

How the script and the environment are built is tested without a process in
tests/unit/harness/test_trial_process.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

from stratus.harness.trial_process import build_script


def test_a_failing_hook_leaves_the_sentence_in_its_marker(tmp_path: Path) -> None:
    (tmp_path / "startup-hook.sh").write_text("echo preparing\nexit 4\n")
    marker = tmp_path / "hook.failed"
    script = build_script(["echo", "entrypoint ran"], marker, who="[agent] ")

    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, check=False)

    why = "startup-hook.sh failed (exit code 4); the entrypoint was not started"
    assert (done.returncode, done.stdout) == (4, "preparing\n")
    assert done.stderr == f"[agent] {why}\n"
    assert marker.read_text() == f"{why}\n"
