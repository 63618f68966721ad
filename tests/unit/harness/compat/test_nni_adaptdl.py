"""NNI trial code under `stratus.launchers.adaptdl` (`stratus.harness.compat._nni_adaptdl`): a preempt is left to AdaptDL
(no exit 0, which would end the run without AdaptDL's checkpoint), and the result count goes on from
AdaptDL's checkpoint after a restart instead of landing on steps already stored."""

from __future__ import annotations

from pathlib import Path

import pytest

from stratus.harness.compat import _nni_adaptdl

adaptdl_checkpoint = pytest.importorskip("adaptdl.checkpoint")


@pytest.fixture(autouse=True)
def replica(no_trial_env: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A replica's environment with AdaptDL's checkpoint folder holding restart 0's count (5 results)."""
    monkeypatch.chdir(tmp_path)
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "checkpoint-0").mkdir(parents=True)
    (checkpoint / "checkpoint-0" / _nni_adaptdl.STATE_NAME).write_text("5")
    monkeypatch.setenv("ADAPTDL_CHECKPOINT_PATH", str(checkpoint))
    monkeypatch.setenv("ADAPTDL_NUM_RESTARTS", "1")
    monkeypatch.setenv("STRATUS_ADAPTDL_REPLICA", "1")
    monkeypatch.setattr(_nni_adaptdl, "_count", None)
    yield checkpoint
    adaptdl_checkpoint._NAMES_TO_STATES.pop(_nni_adaptdl.STATE_NAME, None)
    for state, name in list(adaptdl_checkpoint._STATES_TO_NAMES.items()):
        if name == _nni_adaptdl.STATE_NAME:
            adaptdl_checkpoint._STATES_TO_NAMES.pop(state)


def test_a_preempted_replica_goes_on_and_counts_on_from_adaptdls_checkpoint(
    replica: Path, preempted_nni
) -> None:
    plane, nni = preempted_nni

    nni.report_intermediate_result(0.3)  # no SystemExit: AdaptDL's SIGTERM stops the replica
    nni.report_intermediate_result(0.4)
    nni.close()  # sends what it holds

    assert plane.metric_posts("validation") == [(6, {"default": 0.3}), (7, {"default": 0.4})]
    # AdaptDL's save (on SIGTERM, rank 0) writes the count with its other states: restart 1's is 7.
    adaptdl_checkpoint.save_all_states()
    assert (replica / "checkpoint-1" / _nni_adaptdl.STATE_NAME).read_text() == "7"


def test_off_the_launcher_a_preempt_still_exits_0(monkeypatch: pytest.MonkeyPatch, preempted_nni) -> None:
    monkeypatch.delenv("STRATUS_ADAPTDL_REPLICA")
    plane, nni = preempted_nni

    with pytest.raises(SystemExit) as exited:
        nni.report_intermediate_result(0.3)

    assert exited.value.code == 0
    assert plane.metric_posts("validation") == [(1, {"default": 0.3})]
