"""`det experiment create --local --test-mode`: real (tiny) training processes, started the way the agent
starts them, that append the harness's events themselves; nothing sleeps to wait for them.

The remote test mode (against the in-memory fake API) is tested in tests/unit/det/test_testmode.py."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from det import cli
from det._runtime import Runtime

# A stand-in for a training script on the harness: it appends the events the harness's local twins
# append, and checks what it was started with.
TRAIN = """\
import json, os, shutil, sys

events = os.environ["STRATUS_LOCAL_EVENTS"]
with open(os.environ["STRATUS_LOCAL_CONFIG"]) as f:
    local = json.load(f)
print("hparams", json.dumps(local["hparams"], sort_keys=True))
print("length", local["length"], "searcher", local["config"]["searcher"]["name"])
print("hook says", os.environ.get("FROM_HOOK"), "config env", os.environ.get("FROM_CONFIG"))
print("python3 is ours:", os.path.dirname(shutil.which("python3")) == os.path.dirname(sys.executable))
print("ignored file shipped:", os.path.exists("data/big.bin"))
print("on the platform:", "STRATUS_TRIAL_ID" in os.environ)
sys.stdout.flush()

def event(kind, **fields):
    with open(events, "a") as f:
        f.write(json.dumps({"type": kind, **fields}) + "\\n")

steps = sys.argv[1:] or ["training", "validation", "checkpoint"]
for step in steps:
    if step.startswith("exit="):
        sys.exit(int(step[5:]))
    event(step, steps_completed=1, message="lr too large")
    print("reported", step)
os.makedirs("checkpoints", exist_ok=True)
"""

LOCAL_CONFIG = """\
name: local
entrypoint: {entrypoint}
hyperparameters:
  lr: {{type: double, minval: 0.5, maxval: 1.0}}
  opt: {{type: categorical, vals: [sgd, adam]}}
searcher: {{name: single, metric: loss}}
environment:
  environment_variables: [FROM_CONFIG=yes]
"""


def _local_project(tmp_path: Path, entrypoint: str, hook: str | None = None) -> tuple[Path, Path]:
    ctx = tmp_path / "ctx"
    (ctx / "data").mkdir(parents=True)
    (ctx / "train.py").write_text(TRAIN)
    (ctx / "data" / "big.bin").write_bytes(b"x" * 100)
    (ctx / ".detignore").write_text("*.bin\n")
    if hook is not None:
        (ctx / "startup-hook.sh").write_text(hook)
    config = tmp_path / "local.yaml"
    config.write_text(LOCAL_CONFIG.format(entrypoint=entrypoint))
    return config, ctx


@dataclass
class Result:
    code: int
    out: str
    err: str


def run_local(config: Path, ctx: Path, *extra: str) -> Result:
    """`det e create --local --test-mode`; the control plane is never asked anything."""
    environ = {k: v for k, v in os.environ.items() if k != "FROM_HOOK"}
    environ["STRATUS_TRIAL_ID"] = "99"  # inherited from a trial: must not reach the local run
    asked: list[str] = []

    def no_control_plane(request: httpx.Request) -> httpx.Response:
        asked.append(f"{request.method} {request.url}")
        return httpx.Response(503)

    out, err = io.StringIO(), io.StringIO()
    rt = Runtime(environ=environ, transport=httpx.MockTransport(no_control_plane), out=out, err=err)
    code = cli.main(["e", "create", "--local", "--test-mode", str(config), str(ctx), *extra], runtime=rt)
    assert asked == []
    return Result(code, out.getvalue(), err.getvalue())


def test_local_test_mode_passes(tmp_path: Path) -> None:
    config, ctx = _local_project(tmp_path, "python3 train.py", hook="export FROM_HOOK=hello\n")

    result = run_local(config, ctx)

    assert result.code == 0, result.out + result.err
    assert result.out == (
        'hparams {"lr": 0.5, "opt": "sgd"}\n'
        "length 1 searcher single\n"
        "hook says hello config env yes\n"
        "python3 is ours: True\n"
        "ignored file shipped: False\n"
        "on the platform: False\n"
        "reported training\n"
        "reported validation\n"
        "reported checkpoint\n"
        "Local test passed\n"
    )
    assert result.err.splitlines()[-4:] == [
        "[✓] scheduling",
        "[✓] training",
        "[✓] validation",
        "[✓] checkpointing",
    ]
    # train.py and the hook: .detignore and the ignored data/big.bin are not copied
    assert result.err.startswith(f"Testing {ctx} locally: 2 files")
    assert sorted(p.name for p in ctx.iterdir()) == [".detignore", "data", "startup-hook.sh", "train.py"]


@pytest.mark.parametrize(
    ("entrypoint", "out_end", "err_end"),
    [
        pytest.param(
            "python3 train.py training checkpoint",
            "reported checkpoint\nLocal test failed at validation: the script reported no validation metric\n",
            ["[✓] checkpointing", "[✗] validation"],
            id="without_a_validation",
        ),
        pytest.param(
            "python3 train.py training exit=3",
            "reported training\nLocal test failed at validation: the entrypoint exited with code 3\n",
            ["[✓] training", "[✗] validation", "[✗] checkpointing"],
            id="when_the_script_fails",
        ),
    ],
)
def test_local_test_mode_fails(tmp_path: Path, entrypoint: str, out_end: str, err_end: list[str]) -> None:
    config, ctx = _local_project(tmp_path, entrypoint)

    result = run_local(config, ctx)

    assert result.code == 1
    assert result.out.endswith(out_end)
    assert result.err.splitlines()[-len(err_end) :] == err_end


def test_local_test_mode_passes_without_a_checkpoint_with_a_warning(tmp_path: Path) -> None:
    config, ctx = _local_project(tmp_path, "python3 train.py training validation")

    result = run_local(config, ctx)

    assert result.code == 0, result.out + result.err
    assert result.out.endswith("reported validation\nLocal test passed\n")
    assert result.err.splitlines()[-2:] == [
        "[✗] checkpointing",
        "Warning: the script saved no checkpoint, so checkpointing was not tested: a paused or preempted "
        "trial of this code starts over from its first batch (Determined's test mode passes such code too)",
    ]


def test_local_training_counts_after_a_validation_and_a_clean_exit(tmp_path: Path) -> None:
    config, ctx = _local_project(tmp_path, '["python3", "train.py", "validation", "checkpoint"]')

    result = run_local(config, ctx)

    assert result.code == 0, result.out + result.err
    assert "[✓] training" in result.err


def test_local_test_mode_reports_a_failing_startup_hook(tmp_path: Path) -> None:
    config, ctx = _local_project(tmp_path, "python3 train.py", hook="echo preparing\nfalse\n")

    result = run_local(config, ctx)

    assert result.code == 1
    assert result.out == (
        "preparing\n"
        "startup-hook.sh failed (exit code 1); the entrypoint was not started\n"
        "Local test failed at training: startup-hook.sh failed (exit code 1); the entrypoint was not started\n"
    )


def test_local_searcher_completed_counts_as_training(tmp_path: Path) -> None:
    config, ctx = _local_project(tmp_path, "python3 train.py searcher_completed validation checkpoint")

    result = run_local(config, ctx)

    assert result.code == 0, result.out + result.err


def test_local_test_mode_fails_on_invalid_hp(tmp_path: Path) -> None:
    config, ctx = _local_project(tmp_path, "python3 train.py training invalid_hp")

    result = run_local(config, ctx)

    assert result.code == 1
    assert result.out.splitlines()[-1] == (
        "Local test failed at validation: the script refused the test hyperparameters "
        "(InvalidHP: lr too large)"
    )
