"""NNI PBT trial code through the `nni` stand-in: the checkpoint folders NNI's PBTTuner passes as
parameters, backed by the Core API's checkpoints, and a round that ends when the script exits.

Runs against the in-memory control plane of tests/unit/harness/fakes.py (`plane_kit`) and the local test
mode's twins; `NniTrial.end_pbt_round()` stands for the script's exit (where it is registered)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stratus import harness
from stratus.harness.compat._nni import NniTrial

PBT_CONFIG: dict[str, Any] = {
    "searcher": {
        "name": "pbt",
        "metric": "default",
        "smaller_is_better": False,
        "population_size": 2,
        "num_rounds": 2,
        "length_per_round": {"epochs": 1},
    },
    "hyperparameters": {"lr": {"type": "double", "minval": 0.01, "maxval": 0.1}},
}


@pytest.fixture(autouse=True)
def clean_env(no_trial_env: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)


def use_plane(monkeypatch: pytest.MonkeyPatch, plane: Any) -> None:
    real_init = harness.core.init

    def init(**kwargs: Any) -> harness.core.Context:
        kwargs.update(plane.init_options())
        return real_init(**kwargs)

    monkeypatch.setattr(harness.core, "init", init)


def nni_pbt_round(
    nni: NniTrial, results: list[float], model: str | None
) -> tuple[dict[str, Any], str | None]:
    """What an NNI PBT script does in one run: read its parameters, load the model if there is one,
    report its results, save its model AFTER the final result (as NNI's example does), exit."""
    params = nni.get_next_parameter()
    saved = Path(params["load_checkpoint_dir"]) / "model.txt"
    loaded = saved.read_text() if saved.is_file() else None
    for value in results[:-1]:
        nni.report_intermediate_result(value)
    nni.report_final_result(results[-1])
    if model is not None:
        Path(params["save_checkpoint_dir"], "model.txt").write_text(model)
    nni.end_pbt_round()
    nni.close()  # the script's exit: its core context (and heartbeat thread) ends with it
    return params, loaded


def test_a_first_round_hands_out_folders_and_uploads_the_saved_model_before_completing(
    monkeypatch: pytest.MonkeyPatch, plane_kit
) -> None:
    plane_kit.platform_env({"lr": 0.05})
    plane = plane_kit.SearcherPlane([1], config=PBT_CONFIG, unit="epochs")
    use_plane(monkeypatch, plane)
    nni = NniTrial()
    try:
        params = nni.get_next_parameter()
        assert params["lr"] == 0.05
        load_dir, save_dir = Path(params["load_checkpoint_dir"]), Path(params["save_checkpoint_dir"])
        assert not load_dir.exists()  # the first round has nothing to load, as in NNI
        assert save_dir.is_dir() and not any(save_dir.iterdir())
        nni.report_intermediate_result(0.4)
        nni.report_final_result(0.6)
        assert plane.completed == []  # the round ends at exit: the script may still save its model
        (save_dir / "model.txt").write_text("weights after round 1")
        nni.end_pbt_round()
    finally:
        nni.close()
    assert plane.metric_posts("validation") == [(1, {"default": 0.4}), (2, {"default": 0.6})]
    (checkpoint,) = plane.checkpoint_reports()
    assert checkpoint["steps_completed"] == 2
    assert checkpoint["metadata"] == {
        "steps_completed": 2,
        "nni_pbt_trial_id": plane_kit.trial,
        "nni_pbt_round": 1,
    }
    assert plane.completed == [{"length": 1, "metric": 0.6}]
    paths = [path for _, path, _ in plane.api_calls()]
    stored = paths.index(f"/v1/trials/{plane_kit.trial}/checkpoints")
    completed = paths.index(f"/v1/trials/{plane_kit.trial}/searcher/completed")
    assert stored < completed  # the searcher's round-end pause finds the checkpoint
    assert paths[-1] == f"/v1/trials/{plane_kit.trial}/searcher"  # then it waits for the pause (stop)
    assert not save_dir.exists()  # the folders are removed at exit


def test_a_continued_member_loads_its_own_checkpoint_and_counts_on(
    monkeypatch: pytest.MonkeyPatch, plane_kit
) -> None:
    plane_kit.platform_env({"lr": 0.05})
    plane = plane_kit.SearcherPlane([1], config=PBT_CONFIG, unit="epochs")
    use_plane(monkeypatch, plane)
    _, loaded = nni_pbt_round(NniTrial(), [0.4, 0.6], "round 1")
    assert loaded is None
    (first,) = plane.checkpoint_reports()

    plane.lengths = [1, 2]  # the searcher continues it: round 2 (cumulative length 2)
    monkeypatch.setenv("STRATUS_LATEST_CHECKPOINT", first["uuid"])
    params, loaded = nni_pbt_round(NniTrial(), [0.7, 0.8], "round 2")
    assert loaded == "round 1"
    assert not Path(params["load_checkpoint_dir"]).exists()  # removed at exit
    assert [s for s, _ in plane.metric_posts("validation")] == [1, 2, 3, 4]  # its results count on
    assert [c["steps_completed"] for c in plane.checkpoint_reports()] == [2, 4]
    assert plane.completed == [{"length": 1, "metric": 0.6}, {"length": 2, "metric": 0.8}]


def test_a_replacement_loads_its_parents_model_and_counts_from_zero(
    monkeypatch: pytest.MonkeyPatch, plane_kit
) -> None:
    plane_kit.platform_env({"lr": 0.05})
    plane = plane_kit.SearcherPlane([1], config=PBT_CONFIG, unit="epochs")
    use_plane(monkeypatch, plane)
    nni_pbt_round(NniTrial(), [0.9], "the parent's model")
    (parent,) = plane.checkpoint_reports()
    marker = next(key for key in plane.s3 if key.endswith(f"{parent['uuid']}/metadata.json"))
    plane.s3[marker] = json.dumps({"steps_completed": 1, "nni_pbt_trial_id": 999}).encode()  # another trial's

    plane.completed.clear()
    monkeypatch.setenv("STRATUS_LATEST_CHECKPOINT", parent["uuid"])  # the warm start's checkpoint
    params, loaded = nni_pbt_round(NniTrial(), [0.95], "the child's model")
    assert loaded == "the parent's model"
    assert plane.metric_posts("validation")[-1] == (1, {"default": 0.95})  # its own count, from 0
    assert plane.checkpoint_reports()[-1]["steps_completed"] == 1
    assert plane.completed == [{"length": 1, "metric": 0.95}]


def test_no_final_result_ends_no_round_and_an_empty_save_folder_stores_nothing(
    monkeypatch: pytest.MonkeyPatch, plane_kit
) -> None:
    plane_kit.platform_env({"lr": 0.05})
    plane = plane_kit.SearcherPlane([1], config=PBT_CONFIG, unit="epochs")
    use_plane(monkeypatch, plane)
    crashed = NniTrial()
    crashed.get_next_parameter()
    crashed.report_intermediate_result(0.3)
    crashed.end_pbt_round()  # it exits without a final result (it failed, or it was preempted)
    crashed.close()
    assert plane.checkpoint_reports() == [] and plane.completed == []

    nni_pbt_round(NniTrial(), [0.5], None)  # a script that saves nothing still ends its round
    assert plane.checkpoint_reports() == []
    assert plane.completed == [{"length": 1, "metric": 0.5}]


def test_other_searchers_get_no_checkpoint_folders(monkeypatch: pytest.MonkeyPatch, plane_kit) -> None:
    plane_kit.platform_env({"lr": 0.05})
    plane = plane_kit.SearcherPlane([1], config={"searcher": {"name": "tpe", "metric": "default"}})
    use_plane(monkeypatch, plane)
    nni = NniTrial()
    try:
        assert nni.get_next_parameter() == {"lr": 0.05}
    finally:
        nni.close()


def test_local_test_mode_keeps_the_rounds_checkpoints_locally(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    local = tmp_path / "local.json"
    local.write_text(json.dumps({"hparams": {"lr": 0.05}, "config": PBT_CONFIG, "length": 1}))
    monkeypatch.setenv("STRATUS_LOCAL_CONFIG", str(local))
    _, loaded = nni_pbt_round(NniTrial(), [0.5], "local round 1")
    assert loaded is None
    (stored,) = [p for p in (tmp_path / "checkpoints").iterdir() if p.is_dir()]
    assert (stored / "model.txt").read_text() == "local round 1"

    local.write_text(
        json.dumps(
            {"hparams": {"lr": 0.05}, "config": PBT_CONFIG, "length": 1, "latest_checkpoint": stored.name}
        )
    )
    _, loaded = nni_pbt_round(NniTrial(), [0.6], "local round 2")
    assert loaded == "local round 1"
