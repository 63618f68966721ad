"""A trial with a GPU's pace, for bench/control_plane_cost.py: each step waits `step_s` (a model's
forward and backward on a GPU, without using this machine's CPU); a training metric every 100 steps,
a validation and a checkpoint every `validate_every` steps (and at the end), the operation's progress at
each report, `should_preempt()` after every step: what a Determined Core API script does."""

from __future__ import annotations

import sys
import time

from stratus import harness

REPORT_EVERY = 100


def main(step_s: float, validate_every: int) -> None:
    with harness.init() as core:
        for op in core.searcher.operations():
            steps = 0
            while steps < op.length:
                time.sleep(step_s)
                steps += 1
                if steps % REPORT_EVERY == 0:
                    core.train.report_training_metrics(steps_completed=steps, metrics={"loss": 1.0 / steps})
                    op.report_progress(steps)
                if steps % validate_every == 0 or steps == op.length:
                    core.train.report_validation_metrics(
                        steps_completed=steps, metrics={"accuracy": 1 - 1 / steps}
                    )
                    with core.checkpoint.store_path({"steps_completed": steps}) as (path, _):
                        (path / "state.bin").write_bytes(b"\0" * 1_000_000)
                if core.preempt.should_preempt():
                    return
            op.report_completed(1 - 1 / steps)


if __name__ == "__main__":
    main(float(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 1000)
