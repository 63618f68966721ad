"""The harness with real processes and torch.distributed gloo groups: a trial script in its own
interpreter, the agent's probe of the trial's Python, and one-rank process groups.

The same code with an in-memory control plane and no process is tested in tests/unit/harness/core/,
tests/unit/harness/pytorch/ and tests/unit/harness/compat/test_packages.py."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stratus.harness import core
from stratus.harness.compat import compat_path
from stratus.harness.trial_process import compat_pythonpath, missing_packages

REPO = Path(__file__).resolve().parents[2]


def test_invalid_hp_in_a_real_process_exits_zero(tmp_path: Path) -> None:
    script = tmp_path / "trial.py"
    script.write_text(
        textwrap.dedent(
            """
            from stratus import harness
            with harness.init():
                raise harness.InvalidHP("batch_size 4096 does not fit")
            raise SystemExit(3)  # never reached
            """
        )
    )
    events = tmp_path / "events.jsonl"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "STRATUS_LOCAL_EVENTS": str(events)}
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "invalid hyperparameters: batch_size 4096 does not fit" in done.stdout
    assert core.read_events(events) == [
        {"type": "invalid_hp", "steps_completed": 0, "message": "batch_size 4096 does not fit"}
    ]


def test_any_rank_uses_the_process_group(tmp_path: Path) -> None:
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        two_ranks = core.DistributedContext(rank=0, size=2)
        assert two_ranks.any_rank(True) is True and two_ranks.any_rank(False) is False
    finally:
        dist.destroy_process_group()


def test_the_probe_asks_the_trials_python(tmp_path: Path) -> None:
    env = {"PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])}
    assert missing_packages(env, ["determined", "nni", "json"]) == {"determined", "nni"}
    installed = tmp_path / "site"
    (installed / "determined").mkdir(parents=True)
    (installed / "determined" / "__init__.py").write_text("")
    assert missing_packages({**env, "PYTHONPATH": str(installed)}, ["determined", "nni"]) == {"nni"}
    assert compat_pythonpath({**env, "PYTHONPATH": str(installed)}) == [str(compat_path("nni"))]
    assert missing_packages({"PATH": str(tmp_path)}, ["determined"]) == frozenset()  # no Python: no folder


def test_distributed_context_from_torch_distributed(compat: None, tmp_path: Path) -> None:
    dist = pytest.importorskip("torch.distributed")
    import determined as det

    with pytest.raises(RuntimeError, match="not initialised"):
        det.core.DistributedContext.from_torch_distributed()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        d = det.core.DistributedContext.from_deepspeed()
        assert (d.get_rank(), d.get_size(), d.get_local_rank(), d.get_cross_size()) == (0, 1, 0, 1)
        assert d.broadcast("x") == "x" and d.allgather(3) == [3] and d.gather(4) == [4]
    finally:
        dist.destroy_process_group()
