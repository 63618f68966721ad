"""Latency probe: timestamps its own start, imports, and first training batch, then reports them."""

import time

T_PROCESS_START = time.time()

import torch  # noqa: E402

from stratus import harness  # noqa: E402

T_IMPORTED = time.time()

with harness.init() as core:
    T_INIT = time.time()
    model = torch.nn.Linear(64, 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = torch.nn.functional.cross_entropy(model(torch.randn(32, 64)), torch.randint(0, 10, (32,)))
    loss.backward()
    optimizer.step()
    T_FIRST_BATCH = time.time()
    core.train.report_training_metrics(
        steps_completed=1,
        metrics={
            "loss": float(loss),
            "t_process_start": T_PROCESS_START,
            "t_imported": T_IMPORTED,
            "t_init": T_INIT,
            "t_first_batch": T_FIRST_BATCH,
        },
    )
