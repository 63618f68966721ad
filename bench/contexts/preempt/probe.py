"""Preemption probe, for bench/preemption_latency.py. Prints its own clock readings as
`BENCH <name> <epoch seconds>` lines in its log.

    python3 probe.py low MEGABYTES STEP_S   the victim: trains "steps" of STEP_S seconds, reports a metric
                                            each step, asks should_preempt() every 10 ms; once told to stop
                                            it checkpoints MEGABYTES and exits 0. Resumed from that
                                            checkpoint (its requeued run), it restores it, reports one
                                            metric (`resumed` 1) and completes its searcher operation.
    python3 probe.py high                   the high-priority submission: reports its first metric at once
                                            and completes its searcher operation (its exit frees the slot).
"""

import time

T_PROCESS_START = time.time()  # the first thing the interpreter runs of the trial's own code

import atexit  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402

T_TORCH_IMPORTED = time.time()

from stratus import harness  # noqa: E402

T_IMPORTED = time.time()
ROLE = sys.argv[1]
POLL_S = 0.01  # how often the "training loop" asks should_preempt(): far below the agent's heartbeat
GIVE_UP_S = 600.0


def mark(name: str, at: float | None = None) -> None:
    print(f"BENCH {name} {time.time() if at is None else at:.6f}", flush=True)


def finish(core: harness.Context, loss: float) -> None:
    """Complete the searcher's operation (searcher `single`, max_length 1), so the trial ends COMPLETED."""
    for op in core.searcher.operations():
        op.report_completed(loss)


def victim(core: harness.Context, megabytes: float, step_s: float) -> None:
    state = torch.randn(int(megabytes * 2**20) // 4)  # float32: N MB of incompressible bytes
    started = time.monotonic()
    step = 0
    while True:
        step += 1
        step_end = time.monotonic() + step_s
        while time.monotonic() < step_end and not core.preempt.should_preempt():
            time.sleep(POLL_S)
        if core.preempt.should_preempt():
            break
        core.train.report_training_metrics(steps_completed=step, metrics={"loss": 1.0 / step})
        if time.monotonic() - started > GIVE_UP_S:
            sys.exit(f"not preempted within {GIVE_UP_S:.0f} s")
    mark("preempt_seen")
    with core.checkpoint.store_path({"steps_completed": step}) as (path, _storage_id):
        mark("checkpoint_start")
        torch.save({"state": state, "step": step}, path / "state.pt")
        mark("checkpoint_written")
    mark("checkpoint_stored")


def resumed(core: harness.Context, uuid: str) -> None:
    with core.checkpoint.restore_path(uuid) as path:
        step = int(torch.load(path / "state.pt")["step"])
    mark("restored")
    mark("metric_sent")
    core.train.report_training_metrics(steps_completed=step + 1, metrics={"loss": 0.5, "resumed": 1.0})
    finish(core, 0.5)


def high(core: harness.Context) -> None:
    mark("metric_sent")
    core.train.report_training_metrics(steps_completed=1, metrics={"loss": 0.25})
    mark("metric_reported")
    finish(core, 0.25)


atexit.register(mark, "exit")  # the last thing the interpreter runs before it ends the process
mark("process_start", T_PROCESS_START)
mark("torch_imported", T_TORCH_IMPORTED)
mark("imported", T_IMPORTED)
with harness.init() as core:
    mark("init")
    info = harness.get_cluster_info()
    latest = info.latest_checkpoint if info is not None else None
    if ROLE == "high":
        high(core)
    elif latest:
        resumed(core, latest)
    else:
        victim(core, float(sys.argv[2]), float(sys.argv[3]))
mark("harness_closed")
