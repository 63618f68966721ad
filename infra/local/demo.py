"""`make demo`: start the embedded local stack, run examples/digits to completion with the real CLI,
print the outcome (state, final validation accuracy, checkpoint URI), then stop the stack.

Every step is a `det` command a user could type, from a folder of their own (as the README's first
lines: `det example copy digits`, then create it from the copy); this script only strings them together.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def det(
    *args: str, env: dict[str, str], cwd: Path, capture: bool = False
) -> subprocess.CompletedProcess[str]:
    print(f"$ det {' '.join(args)}", flush=True)
    return subprocess.run(
        [sys.executable, "-P", "-m", "det", *args], env=env, cwd=cwd, text=True, capture_output=capture
    )


def main() -> int:
    port = os.environ.get("STRATUS_DEMO_PORT", "8080")
    home = Path(os.environ.get("STRATUS_HOME") or tempfile.mkdtemp(prefix="stratus-demo-"))
    env = {**os.environ, "STRATUS_HOME": str(home), "DET_MASTER": f"http://127.0.0.1:{port}"}
    work = Path(tempfile.mkdtemp(prefix="stratus-demo-work-"))  # the user's folder, not the checkout
    copied = det("example", "copy", "digits", env=env, cwd=work)
    if copied.returncode != 0:
        return copied.returncode
    up = det("deploy", "local", "up", "--slots", "2", "--port", port, env=env, cwd=work)
    if up.returncode != 0:
        return up.returncode
    try:
        created = det("experiment", "create", "digits/const.yaml", "digits", "-f", env=env, cwd=work)
        listed = det("experiment", "list", "--json", env=env, cwd=work, capture=True)
        experiments = json.loads(listed.stdout)
        experiments = (
            experiments.get("experiments", experiments) if isinstance(experiments, dict) else experiments
        )
        experiment_id = max(int(e["id"]) for e in experiments)
        described = det(
            "experiment", "describe", str(experiment_id), "--json", env=env, cwd=work, capture=True
        )
        detail = json.loads(described.stdout)
        experiment, trials = detail["experiment"], detail["trials"]
        trial = trials[0] if trials else {}
        accuracy = (trial.get("latest_validation") or {}).get("validation_accuracy")
        checkpoint = (trial.get("latest_checkpoint") or {}).get("uri")
        print()
        print(f"Experiment {experiment_id}: {experiment['state']}")
        print(
            f"Trial {trial.get('id')} final validation accuracy: {accuracy if accuracy is None else f'{accuracy:.4f}'}"
        )
        print(f"Checkpoint: {checkpoint}")
        ok = (
            created.returncode == 0
            and experiment["state"] == "COMPLETED"
            and accuracy is not None
            and accuracy > 0.9
        )
        return 0 if ok else 1
    finally:
        det("deploy", "local", "down", env=env, cwd=work)


if __name__ == "__main__":
    sys.exit(main())
