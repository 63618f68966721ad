"""Pause probe: trains nothing, waits for should_preempt(), checkpoints N MB (argv[1]) and exits 0,
printing its own clock readings (`BENCH <name> <epoch seconds>`) for bench/pause_latency.py."""

import atexit
import sys
import time

import torch

from stratus import harness

MEGABYTES = float(sys.argv[1])
POLL_S = 0.01  # how often the "training loop" asks should_preempt(): far below the heartbeat interval
GIVE_UP_S = 300.0


def mark(name: str) -> None:
    print(f"BENCH {name} {time.time():.6f}", flush=True)


atexit.register(mark, "exit")  # the last thing the interpreter runs before it ends the process
state = torch.randn(int(MEGABYTES * 2**20) // 4)  # float32: N MB of incompressible bytes

with harness.init() as core:
    core.train.report_training_metrics(steps_completed=1, metrics={"t_running": time.time()})
    started = time.monotonic()
    while not core.preempt.should_preempt():
        if time.monotonic() - started > GIVE_UP_S:
            sys.exit(f"no pause request within {GIVE_UP_S:.0f} s")
        time.sleep(POLL_S)
    mark("preempt_seen")
    with core.checkpoint.store_path({"steps_completed": 1}) as (path, storage_id):
        mark("checkpoint_start")
        torch.save({"state": state}, path / "state.pt")
        mark("checkpoint_written")
    mark("checkpoint_stored")
mark("harness_closed")
