"""The embedded stack keeps its state across `det deploy local down`/`up` and across a kill -9 of the
stack's process, with trials running: after the restart every experiment, trial, metric, checkpoint and
log is there, the running trial resumes from its latest checkpoint (not a restart) and completes, and
nothing of the old stack is left running.

Each test has a state folder of its own and starts the stack on it twice, as a user would.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from det.deploy.background import BackgroundStack

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "examples" / "digits"
BATCHES = 6000
#: A checkpoint every 300 batches (a few a second on this model): the restart always finds one.
LONG = (DIGITS / "const.yaml").read_text().replace(
    "batches: 600", f"batches: {BATCHES}"
) + "min_validation_period:\n  batches: 300\nmin_checkpoint_period:\n  batches: 300\n"


def _trial(det, experiment_id: int) -> dict:
    described = det.read("experiment", "describe", str(experiment_id), "--json")
    assert described.code == 0, described.out + described.err
    (trial,) = json.loads(described.out)["trials"]
    return trial


def _start_long(det, folder: Path, wait_for) -> int:
    (folder / "long.yaml").write_text(LONG)
    created = det("experiment", "create", str(folder / "long.yaml"), str(DIGITS))
    assert created.code == 0, created.out + created.err
    experiment_id = det.created_experiment_id(created.out)

    def checkpointed_while_running() -> bool:
        trial = _trial(det, experiment_id)
        assert trial["state"] != "COMPLETED", "the trial ended before the restart; make it longer"
        return trial["state"] == "RUNNING" and trial["latest_checkpoint"] is not None

    wait_for(checkpointed_while_running, timeout=180, what="a checkpoint of the running trial")
    return experiment_id


def _freeze(det, state: Path, experiment_id: int) -> int:
    """Stop the running trial's processes where they are (SIGSTOP to its process group), so that it is
    still mid-training when the stack goes down however slow the polling was; its process group."""
    trial = _trial(det, experiment_id)
    record = next(state.glob(f"agents/*/runs/{trial['id']}.1/process.json"))
    pgid = json.loads(record.read_text())["pgid"]
    try:
        os.killpg(pgid, signal.SIGSTOP)
    except ProcessLookupError:
        pytest.fail("the trial's process ended before the restart; make it longer")
    trial = _trial(det, experiment_id)
    assert trial["state"] == "RUNNING" and trial["total_batches"] < BATCHES, trial
    return pgid


def _thaw_once_told_to_stop(pgid: int, wait_for) -> None:
    """Let the frozen trial go on once its agent's SIGTERM waits on it: it then checkpoints and exits
    as a trial does when its agent stops (the signal is delivered when the group continues)."""
    wait_for(lambda: _pending(pgid, signal.SIGTERM), 60, "the agent's SIGTERM to the trial")
    os.killpg(pgid, signal.SIGCONT)


def _pending(pid: int, sig: signal.Signals) -> bool:
    """`sig` is pending on process `pid` (sent to it or to its process group, not yet delivered)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    masks = [
        int(line.split()[1], 16) for line in status.splitlines() if line.startswith(("SigPnd", "ShdPnd"))
    ]
    return any(mask & (1 << (sig - 1)) for mask in masks)


def _finished_experiment(det, folder: Path) -> tuple[int, str]:
    """A short experiment run to its end before the restart: its id and its checkpoint's uuid."""
    created = det("experiment", "create", str(DIGITS / "const.yaml"), str(DIGITS), "-f", timeout=300)
    assert created.code == 0, created.out + created.err
    experiment_id = det.created_experiment_id(created.out)
    trial = _trial(det, experiment_id)
    assert trial["state"] == "COMPLETED"
    return experiment_id, trial["latest_checkpoint"]["uuid"]


def _check_after_restart(det, wait_for, folder: Path, done: tuple[int, str], running: int) -> dict:
    # What had ended is all there: its record, its metrics, its logs, its checkpoint's files.
    done_id, uuid = done
    trial = _trial(det, done_id)
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == 600
    metrics = det("trial", "describe", str(trial["id"]), "--metrics", "--json")
    assert metrics.code == 0 and "validation_accuracy" in metrics.out
    logs = det("trial", "logs", str(trial["id"]))
    assert logs.code == 0 and "training to 600 batches" in logs.out
    download = det("checkpoint", "download", uuid, "-o", str(folder / "ckpt"), "--quiet")
    assert download.code == 0, download.out + download.err
    assert (folder / "ckpt" / "state.pt").stat().st_size > 0
    # The running one resumed from its latest checkpoint and completed, without a restart.
    wait_for(
        lambda: _trial(det, running)["state"] in ("COMPLETED", "ERROR", "CANCELED"),
        timeout=300,
        what="the resumed trial to end",
    )
    trial = _trial(det, running)
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 0
    assert trial["total_batches"] == BATCHES
    logs = det("trial", "logs", str(trial["id"]))
    assert "resumed from checkpoint" in logs.out, logs.out[-2000:]
    return trial


def test_down_and_up_keep_everything_and_the_running_trial_resumes(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, det_runner, wait_for
) -> None:
    state = tmp_path_factory.mktemp("restart")
    stack = BackgroundStack(state, slots=1)
    try:
        det = det_runner(stack.state["api_url"])
        done = _finished_experiment(det, tmp_path)
        running = _start_long(det, tmp_path, wait_for)
        pgid = _freeze(det, state, running)
        stack.process.send_signal(signal.SIGTERM)  # what `det deploy local down` does
        _thaw_once_told_to_stop(pgid, wait_for)
    finally:
        stack.stop()

    stack = BackgroundStack(state, slots=1)
    try:
        det = det_runner(stack.state["api_url"])
        trial = _check_after_restart(det, wait_for, tmp_path, done, running)
        # The agent's stop requeued the run (an exit, not a loss); the restart started its next execution.
        assert trial["exit"]["code"] == 0
    finally:
        stack.stop()


def test_a_kill_9_of_the_stack_loses_nothing_and_leaves_nothing_running(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, det_runner, wait_for, run_record
) -> None:
    state = tmp_path_factory.mktemp("kill9")
    stack = BackgroundStack(state, slots=1)
    try:
        det = det_runner(stack.state["api_url"])
        done = _finished_experiment(det, tmp_path)
        running = _start_long(det, tmp_path, wait_for)
        trial_id = _trial(det, running)["id"]
        pgid = _freeze(det, state, running)
        agents = [entry["pid"] for entry in json.loads((state / "agents.json").read_text())]
        os.kill(stack.process.pid, signal.SIGKILL)  # the stack alone: its agent and trial live on
        stack.process.wait()
        _thaw_once_told_to_stop(pgid, wait_for)
        # Its agent sees its stack gone, ends its trial's processes and stops, within its timeout.
        wait_for(lambda: not any(_alive(pid) for pid in [*agents, pgid]), 60, "the orphans to stop")
    finally:
        stack.stop()

    stack = BackgroundStack(state, slots=1)
    try:
        det = det_runner(stack.state["api_url"])
        lost = run_record(stack.state["moto_url"], f"{trial_id}.1")
        assert lost["state"] == "EXITED" and "local stack stopped" in lost["reason"]
        _check_after_restart(det, wait_for, tmp_path, done, running)
    finally:
        stack.stop()


def _alive(pid: int) -> bool:
    """Alive and not a zombie (an orphan may wait a while for its reaper)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")
