"""The Determined and NNI compatibility packages, and the agent's rule for putting them on PYTHONPATH.

Determined Core API scripts, PyTorchTrial classes and NNI scripts (the examples included) run against
the in-memory control plane of tests/unit/harness/fakes.py (stratus.contract.http.InMemoryTransport): no
network, no sleeps. The agent's probe of a real interpreter and gloo groups are in
tests/integration/test_harness_processes.py."""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from stratus.contract.launch import LaunchSpec
from stratus.harness.agent._settings import Settings
from stratus.harness.agent._spawn import build_environment
from stratus.harness.compat import compat_path
from stratus.harness.compat._nni import NniTrial, flatten_hparams, merge_parameter

REPO = Path(__file__).resolve().parents[4]
EXAMPLES = REPO / "examples"


@pytest.fixture(autouse=True)
def clean_env(no_trial_env: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)


def load_example(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the agent puts a compatibility folder on PYTHONPATH only for a missing package -----------------


def spec(environment: dict[str, str] | None = None) -> LaunchSpec:
    return LaunchSpec.from_json(
        {
            "run_id": "r",
            "trial_id": 1,
            "experiment_id": 2,
            "slots": 1,
            "entrypoint": ["python3", "train.py"],
            "environment": environment or {},
            "context_url": None,
            "api_url": "http://m",
        }
    )


def settings(tmp_path: Path) -> Settings:
    return Settings(api_url="http://m", agent_id="a", pool="default", slots=1, work_dir=tmp_path)


def fake_probe(missing: set[str]) -> Any:
    asked: list[tuple[str, ...]] = []

    def probe(env: Any, names: Sequence[str]) -> set[str]:
        asked.append(tuple(names))
        return missing & set(names)

    probe.asked = asked  # type: ignore[attr-defined]
    return probe


def test_compat_folders_only_for_missing_packages(tmp_path: Path) -> None:
    base = {"PATH": "/usr/bin"}
    determined_dir, nni_dir = str(compat_path("determined")), str(compat_path("nni"))
    env = build_environment(spec(), settings(tmp_path), None, base, probe=fake_probe({"determined", "nni"}))
    assert env["PYTHONPATH"] == os.pathsep.join([determined_dir, nni_dir])
    env = build_environment(spec(), settings(tmp_path), None, base, probe=fake_probe({"nni"}))
    assert env["PYTHONPATH"] == nni_dir
    probe = fake_probe(set())
    env = build_environment(spec(), settings(tmp_path), None, base, probe=probe)
    assert "PYTHONPATH" not in env and probe.asked == [("determined", "nni")]
    # the trial's own PYTHONPATH comes first (its modules win), and is kept whole
    env = build_environment(
        spec({"PYTHONPATH": f"/ctx/lib{os.pathsep}{nni_dir}"}),
        settings(tmp_path),
        None,
        base,
        probe=fake_probe({"determined", "nni"}),
    )
    assert env["PYTHONPATH"].split(os.pathsep) == ["/ctx/lib", determined_dir, nni_dir]
    assert (compat_path("determined") / "determined" / "__init__.py").is_file()
    assert (compat_path("nni") / "nni" / "__init__.py").is_file()


# --- Determined ---------------------------------------------------------------------------------


def test_determined_is_a_thin_alias_layer(compat: None) -> None:
    import determined as det
    import determined.core
    import determined.pytorch

    from stratus import harness

    assert det.InvalidHP is harness.InvalidHP and det.get_cluster_info is harness.get_cluster_info
    assert det.LOG_FORMAT == "%(levelname)s: [%(process)s] %(name)s: %(message)s"
    for name in ("PyTorchTrial", "PyTorchTrialContext", "DataLoader", "Trainer", "init", "LRScheduler"):
        assert getattr(determined.pytorch, name) is getattr(harness.pytorch, name)
    assert det.core.SearcherOperation is harness.core.SearcherOperation
    assert issubclass(det.core.DistributedContext, harness.core.DistributedContext)
    with det.core.init(
        preempt_mode=det.core.PreemptMode.ChiefOnly,
        tensorboard_mode=det.core.TensorboardMode.MANUAL,
        checkpoint_storage="ckpts",
        async_checkpointing=False,
    ) as ctx:
        assert isinstance(ctx, harness.Context)
        assert isinstance(ctx.checkpoint, harness.core.LocalCheckpointContext)
        assert ctx.checkpoint.checkpoint_dir.name == "ckpts"
    with pytest.raises(NotImplementedError, match="Horovod"):
        det.core.DistributedContext.from_horovod(None)


def test_cluster_info_has_determineds_names(compat: None, monkeypatch: pytest.MonkeyPatch, plane_kit) -> None:
    plane_kit.platform_env({"lr": 0.1}, STRATUS_LATEST_CHECKPOINT="ck-1", STRATUS_SLOTS="2")
    plane = plane_kit.SearcherPlane(config={"searcher": {"metric": "m"}, "data": {"url": "x"}})
    plane_kit.use(plane)
    import determined as det

    with det.core.init():
        info = det.get_cluster_info()
        assert info is not None
        assert (info.trial.trial_id, info.trial.experiment_id, info.trial.trial_seed) == (
            plane_kit.trial,
            plane_kit.experiment,
            42,
        )
        assert info.trial.hparams == {"lr": 0.1} and info.latest_checkpoint == "ck-1"
        assert (info.cluster_id, info.task_type, info.allocation_id, info.slot_ids) == (
            "stratus",
            "TRIAL",
            "run-1",
            [0, 1],
        )
        assert (
            info.user_data == {"url": "x"}
            and info.master_url == plane_kit.api
            and info.session_token == plane_kit.token
        )
        assert info.task_id == f"{plane_kit.experiment}.{plane_kit.trial}"


def test_core_api_example_runs_the_searchers_operations(
    compat: None, monkeypatch: pytest.MonkeyPatch, plane_kit
) -> None:
    plane_kit.platform_env({"learning_rate": 0.01, "hidden_size": 32, "batch_size": 16})
    config = {
        "searcher": {"name": "adaptive_asha", "metric": "validation_accuracy", "max_length": {"batches": 100}}
    }
    plane = plane_kit.SearcherPlane([25, 100], config=config)
    plane_kit.use(plane)
    example = load_example(EXAMPLES / "determined_core" / "train.py", "example_determined_core")
    import determined as det

    with det.core.init() as core_context:
        example.main(core_context)
    assert [s for s, _ in plane.metric_posts("training")] == [25, 50, 75, 100]
    validations = plane.metric_posts("validation")
    assert [s for s, _ in validations] == [25, 100]
    assert validations[-1][1]["validation_accuracy"] > 0.8
    assert plane.completed == [
        {"length": 25, "metric": validations[0][1]["validation_accuracy"]},
        {"length": 100, "metric": validations[1][1]["validation_accuracy"]},
    ]
    assert [c["steps_completed"] for c in plane.checkpoint_reports()] == [25, 100]


def test_core_api_example_checkpoints_when_preempted_and_resumes(
    compat: None, monkeypatch: pytest.MonkeyPatch, plane_kit
) -> None:
    plane_kit.platform_env({"learning_rate": 0.01, "hidden_size": 32, "batch_size": 16})
    config = {"searcher": {"name": "single", "metric": "validation_accuracy"}}
    plane = plane_kit.SearcherPlane([100], config=config)
    plane.preempt = True
    plane_kit.use(plane, heartbeat_interval_s=0.01)
    example = load_example(EXAMPLES / "determined_core" / "train.py", "example_determined_core")
    import determined as det

    with det.core.init() as core_context:
        assert plane.wait_heartbeats(2)  # the heartbeat's answer has latched preemption
        example.main(core_context)
    assert [c["steps_completed"] for c in plane.checkpoint_reports()] == [25]
    assert plane.completed == []

    plane.preempt = False
    monkeypatch.setenv("STRATUS_LATEST_CHECKPOINT", plane.checkpoint_reports()[0]["uuid"])
    with det.core.init() as core_context:
        example.main(core_context)
    assert [s for s, _ in plane.metric_posts("training")] == [25, 50, 75, 100]
    assert [c["length"] for c in plane.completed] == [100]
    assert [c["steps_completed"] for c in plane.checkpoint_reports()] == [25, 100]


def test_invalid_hp_from_a_core_api_script(compat: None, monkeypatch: pytest.MonkeyPatch, plane_kit) -> None:
    plane_kit.platform_env({"learning_rate": 0.01, "hidden_size": 32, "batch_size": 4096})
    plane = plane_kit.SearcherPlane([100], config={"searcher": {"metric": "validation_accuracy"}})
    plane_kit.use(plane)
    example = load_example(EXAMPLES / "determined_core" / "train.py", "example_determined_core")
    import determined as det

    with pytest.raises(SystemExit) as exited, det.core.init() as core_context:
        example.main(core_context)
    assert exited.value.code == 0
    assert plane.invalid_hp == [{"message": "batch_size 4096 is larger than the 1438 training images"}]


def test_pytorch_trial_example_runs_through_determined_pytorch(
    compat: None, monkeypatch: pytest.MonkeyPatch, plane_kit
) -> None:
    hparams = {"global_batch_size": 32, "learning_rate": 0.003, "hidden_size": 32, "dropout": 0.1}
    plane_kit.platform_env(hparams)
    config = {
        "searcher": {"name": "single", "metric": "validation_accuracy", "max_length": {"epochs": 2}},
        "records_per_epoch": 1438,
        "min_validation_period": {"epochs": 1},
        "scheduling_unit": 20,
    }
    plane = plane_kit.SearcherPlane([89], config=config)  # 2 epochs: 2 * 1438 // 32
    plane_kit.use(plane)
    from stratus.harness.exec import run_trial

    trial_class = run_trial.load_trial_class("model_def:DigitsTrial", str(EXAMPLES / "determined_trial"))
    try:
        import determined.pytorch

        assert issubclass(trial_class, determined.pytorch.PyTorchTrial)
        assert run_trial.run("model_def:DigitsTrial") == 0
    finally:
        sys.modules.pop("model_def", None)
        sys.path.remove(str(EXAMPLES / "determined_trial"))
    assert [s for s, _ in plane.metric_posts("training")] == [20, 40, 44, 60, 80, 88, 89]
    validations = plane.metric_posts("validation")
    assert [s for s, _ in validations] == [44, 88, 89]
    assert plane.completed == [{"length": 89, "metric": validations[-1][1]["validation_accuracy"]}]
    assert [c["steps_completed"] for c in plane.checkpoint_reports()] == [89]


# --- NNI ----------------------------------------------------------------------------------------

NNI_SPACE = {
    "lr": {"type": "log", "minval": -3, "maxval": -1},
    "conv": {"kernel": {"type": "int", "minval": 1, "maxval": 5}},
}


def test_nni_calls_map_to_reports_and_the_searcher(
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest, plane_kit
) -> None:
    plane_kit.platform_env({"lr": 0.01, "conv": {"kernel": 3}, "choice": {"_name": "a", "x": 1}})
    plane = plane_kit.SearcherPlane(
        [2], config={"searcher": {"metric": "default"}, "hyperparameters": NNI_SPACE}
    )
    plane_kit.use(plane)
    before = signal.getsignal(signal.SIGTERM)
    nni = NniTrial()
    request.addfinalizer(nni.close)
    assert nni.get_next_parameter() == {"lr": 0.01, "conv/kernel": 3, "choice": {"_name": "a", "x": 1}}
    assert signal.getsignal(signal.SIGTERM) == before  # NNI scripts never poll: SIGTERM keeps its action
    assert (nni.get_trial_id(), nni.get_experiment_id(), nni.get_sequence_id()) == (
        str(plane_kit.trial),
        str(plane_kit.experiment),
        plane_kit.trial,
    )
    nni.report_intermediate_result(0.5)
    with pytest.raises(SystemExit) as exited:
        nni.report_intermediate_result({"default": 0.6, "loss": 0.2})
    assert exited.value.code == 0
    assert plane.metric_posts("validation") == [(1, {"default": 0.5}), (2, {"default": 0.6, "loss": 0.2})]
    assert [(method, path) for method, path, _ in plane.searcher_calls()] == [
        ("GET", f"/v1/trials/{plane_kit.trial}/searcher"),
        ("POST", f"/v1/trials/{plane_kit.trial}/searcher/completed"),
        ("GET", f"/v1/trials/{plane_kit.trial}/searcher"),  # answered stop: the trial exits
    ]
    assert plane.completed == [{"length": 2, "metric": 0.6}]


def test_nni_final_result_completes_an_open_ended_operation(
    monkeypatch: pytest.MonkeyPatch, plane_kit
) -> None:
    plane_kit.platform_env({"lr": 0.01})
    plane = plane_kit.SearcherPlane([None], config={"searcher": {"metric": "default"}})
    plane_kit.use(plane)
    nni = NniTrial()
    try:
        for value in (0.1, 0.2):
            nni.report_intermediate_result(value)
        nni.report_final_result({"default": 0.9, "loss": 0.05})
    finally:
        nni.close()
    assert plane.metric_posts("validation")[-1] == (3, {"default": 0.9, "loss": 0.05})
    assert plane.completed == [{"length": 3, "metric": 0.9}]
    with pytest.raises(ValueError, match="default"):
        NniTrial().report_final_result({"accuracy": 1.0})


def test_nni_exits_when_the_platform_preempts(preempted_nni) -> None:
    plane, nni = preempted_nni
    with pytest.raises(SystemExit) as exited:
        nni.report_intermediate_result(0.3)
    assert exited.value.code == 0
    assert plane.metric_posts("validation") == [(1, {"default": 0.3})]


def test_nni_standalone_prints(
    compat: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import nni
    import nni.trial

    fresh = NniTrial()
    monkeypatch.setattr(nni.trial, "_trial", fresh)  # where the calls live, as in NNI
    try:
        assert nni.get_next_parameter() == {} and nni.trial.get_next_parameter is nni.get_next_parameter
        assert (nni.get_trial_id(), nni.get_experiment_id(), nni.get_sequence_id()) == (
            "STANDALONE",
            "STANDALONE",
            0,
        )
        for i in range(150):  # no searcher dialogue off the platform: the 100-batch default does not apply
            nni.report_intermediate_result(i / 150)
        nni.report_final_result(0.99)
    finally:
        fresh.close()
    out = capsys.readouterr().out
    assert "[validation] steps_completed=1 default=0" in out and "steps_completed=151 default=0.99" in out


def test_nni_example_runs_on_the_platform(compat: None, monkeypatch: pytest.MonkeyPatch, plane_kit) -> None:
    hparams = {
        "learning_rate": 0.005,
        "dropout": 0.1,
        "hidden_size": 40,
        "batch_size": 64,
        "activation": "tanh",
    }
    plane_kit.platform_env(hparams)
    plane = plane_kit.SearcherPlane([None], config={"searcher": {"metric": "default"}})
    plane_kit.use(plane)
    import nni

    fresh = NniTrial()
    monkeypatch.setattr(nni.trial, "_trial", fresh)  # where the calls live, as in NNI
    example = load_example(EXAMPLES / "nni_digits" / "trial.py", "example_nni_digits")
    try:
        example.main()
    finally:
        fresh.close()
    validations = plane.metric_posts("validation")
    assert [s for s, _ in validations] == list(range(1, example.EPOCHS + 2))
    assert validations[-1][1]["default"] > 0.8
    assert plane.completed == [{"length": example.EPOCHS + 1, "metric": validations[-1][1]["default"]}]


def test_nni_hyperband_trials_see_their_budget_and_run_again_when_promoted(
    monkeypatch: pytest.MonkeyPatch, plane_kit
) -> None:
    plane_kit.platform_env({"lr": 0.01})
    config = {"searcher": {"name": "hyperband", "metric": "default"}}
    plane = plane_kit.SearcherPlane([3, 9], config=config)
    plane_kit.use(plane)
    restarts: list[int] = []

    def run(budget: int) -> None:
        nni = NniTrial(restart=lambda: restarts.append(budget))
        try:
            params = nni.get_next_parameter()
            assert params == {"lr": 0.01, "TRIAL_BUDGET": budget}
            for epoch in range(params["TRIAL_BUDGET"]):  # NNI's mnist-advisor: a result per budget unit
                nni.report_intermediate_result(epoch / 10)
            nni.report_final_result(budget / 10)
            nni._after_budget()  # what the process does as it exits
        finally:
            nni.close()

    run(3)  # rung 1: budget 3, then promoted at once to 9: the script runs again
    assert restarts == [3]
    run(9)  # budget 9, the last: stopped, the process ends
    assert restarts == [3]
    assert plane.completed == [{"length": 3, "metric": 0.3}, {"length": 9, "metric": 0.9}]
    assert [s for s, _ in plane.metric_posts("validation")] == [3, 9]  # the final results, at their budgets
    assert len(plane.metric_posts("training")) == 12  # intermediate results: not searcher results


def test_flatten_hparams_and_merge_parameter() -> None:
    hparams = {"a": 1, "g": {"b": 2, "h": {"c": 3}}, "cat": {"k": "v"}}
    space = {"a": {"type": "int"}, "g": {"b": {"type": "int"}, "h": {"c": 3}}, "cat": {"type": "categorical"}}
    assert flatten_hparams(hparams, space) == {"a": 1, "g/b": 2, "g/h/c": 3, "cat": {"k": "v"}}
    assert flatten_hparams({"g": {"b": 2}, "n": {"_name": "x"}}) == {"g/b": 2, "n": {"_name": "x"}}
    base = argparse.Namespace(lr=0.1, epochs=3, name="x")
    merged = merge_parameter(base, {"lr": 0.5, "epochs": 4.0})
    assert merged is base and (base.lr, base.epochs) == (0.5, 4) and isinstance(base.epochs, int)
    assert merge_parameter({"lr": 0.1}, {"lr": "0.2"}) == {"lr": 0.2}
    with pytest.raises(ValueError, match="'nope'"):
        merge_parameter(base, {"nope": 1})
