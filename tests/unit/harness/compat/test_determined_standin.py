"""Determined's API beyond the single-process Core API, in the `determined` stand-in: the distributed
context's rules and constructor, the trial's node addresses, `determined.common.util`, `core_v2`,
`core_context.alert`, `train.get_tensorboard_path()`, the agent's per-run collective port, and the clear
refusal of what the stand-in does not implement. The collectives themselves (real sockets, several
processes) are in tests/integration/test_collectives.py."""

from __future__ import annotations

import dataclasses
import io
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from stratus import harness
from stratus.contract.launch import LaunchSpec
from stratus.harness._info import DEFAULT_COLLECTIVE_PORT, load_cluster_info
from stratus.harness.agent._settings import Settings
from stratus.harness.agent._spawn import build_environment
from stratus.harness.core._alert import alert
from stratus.harness.core._collective import CollectiveError
from stratus.harness.core._tensorboard import tensorboard_path
from stratus.harness.errors import HarnessError


@pytest.fixture(autouse=True)
def clean_env(no_trial_env: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)


def use_plane(monkeypatch: pytest.MonkeyPatch, plane: Any) -> None:
    """Make every `stratus.harness.core.init()` of the code under test talk to `plane`."""
    real_init = harness.core.init

    def init(**kwargs: Any) -> harness.Context:
        kwargs.update(plane.init_options(60.0))
        return real_init(**kwargs)

    monkeypatch.setattr(harness.core, "init", init)


# --- collectives: several ranks and no way to talk is an error, never this rank's object alone ------------


def test_collectives_without_a_way_to_talk_raise() -> None:
    worker = harness.core.DistributedContext(rank=1, size=8)
    for call in (worker.allgather, worker.broadcast, worker.gather):
        with pytest.raises(CollectiveError, match="across 8 ranks needs a way to talk") as raised:
            call(3)
        assert "chief_ip=" in str(raised.value)
    alone = harness.core.DistributedContext()
    assert (alone.allgather(3), alone.broadcast(3), alone.gather(3)) == ([3], 3, [3])
    assert alone.any_rank(True) is True


def test_determineds_constructor_picks_the_chief_and_the_port(
    compat: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import determined as det

    ranks = {"rank": 3, "size": 8, "local_rank": 3, "local_size": 8, "cross_rank": 0, "cross_size": 1}
    one_node = det.core.DistributedContext(**ranks)
    assert one_node._sockets is not None
    assert (one_node._sockets.chief_ip, one_node._sockets.port) == ("127.0.0.1", DEFAULT_COLLECTIVE_PORT)
    monkeypatch.setenv("STRATUS_COLLECTIVE_PORT", "40123")
    assert det.core.DistributedContext(**ranks)._sockets.port == 40123
    chosen = det.core.DistributedContext(**ranks, pub_port=30000, port_offset=5)
    assert chosen._sockets.port == 30005
    two_nodes = {**ranks, "local_size": 4, "cross_size": 2}
    with pytest.raises(CollectiveError, match="needs chief_ip="):
        det.core.DistributedContext(**two_nodes)
    remote = det.core.DistributedContext(**two_nodes, chief_ip="10.0.0.5")
    assert remote._sockets.chief_ip == "10.0.0.5" and remote._sockets._bind_all
    single = det.core.DistributedContext(
        rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1
    )
    assert single._sockets is None and single.allgather("x") == ["x"]
    # The other constructors give harness's context (torch.distributed's collectives)
    assert type(det.core.DistributedContext.from_env()) is harness.core.DistributedContext


def test_a_bad_collective_port_is_named(compat: None, monkeypatch: pytest.MonkeyPatch) -> None:
    import determined as det

    monkeypatch.setenv("STRATUS_COLLECTIVE_PORT", "many")
    with pytest.raises(HarnessError, match="STRATUS_COLLECTIVE_PORT='many'"):
        det.core.DistributedContext(rank=0, size=2, local_rank=0, local_size=2, cross_rank=0, cross_size=1)
    with pytest.raises(CollectiveError, match="port 70000 is not a TCP port"):
        det.core.DistributedContext(rank=0, size=2, pub_port=70000)


# --- the trial's nodes (info.container_addrs, container_rank, slot_ids) ------------------------------


def test_one_node_trial_lists_its_own_address(plane_kit: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    plane_kit.platform_env({}, STRATUS_SLOTS="8")
    info = load_cluster_info()
    assert info is not None
    assert (info.container_addrs, info.container_rank, info.slot_ids) == (["127.0.0.1"], 0, list(range(8)))
    monkeypatch.setenv("STRATUS_NODE_ADDR", "10.1.2.3")
    info = load_cluster_info()
    assert info is not None and info.container_addrs == ["10.1.2.3"]


def test_multi_node_trial_lists_every_node_chief_first(
    plane_kit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    plane_kit.platform_env(
        {}, STRATUS_SLOTS="8", STRATUS_NUM_NODES="2", STRATUS_NODE_RANK="1", STRATUS_NODE_ADDR="10.0.0.2"
    )
    monkeypatch.setenv("STRATUS_NODE_ADDRS", "10.0.0.1,10.0.0.2")  # a static setup
    info = load_cluster_info()
    assert info is not None and (info.container_rank, info.slot_ids) == (1, [0, 1, 2, 3])
    assert info.container_addrs == ["10.0.0.1", "10.0.0.2"]
    # what an earlier rendezvous of this process exported is used by the info read before it
    monkeypatch.delenv("STRATUS_NODE_ADDRS")
    info = load_cluster_info()
    assert info is not None and info.node_addrs == ()
    monkeypatch.setenv("STRATUS_NODE_ADDRS", "10.0.0.1,10.0.0.2")
    assert info.container_addrs == ["10.0.0.1", "10.0.0.2"]
    # without a control plane to meet at, the addresses must be given
    monkeypatch.delenv("STRATUS_NODE_ADDRS")
    detached = dataclasses.replace(info, master_url="")
    with pytest.raises(
        HarnessError, match="runs on 2 nodes and their addresses are not known.*STRATUS_NODE_ADDRS"
    ):
        _ = detached.container_addrs


# --- the agent gives each run on one node its own port --------------------------------------------------


def _spec(environment: dict[str, str]) -> LaunchSpec:
    return LaunchSpec.from_json(
        {
            "run_id": "r",
            "trial_id": 1,
            "experiment_id": 2,
            "slots": 8,
            "entrypoint": ["python3", "train.py"],
            "environment": environment,
            "context_url": None,
            "api_url": "http://m",
        }
    )


def test_the_agent_passes_a_collective_port_on_one_node_only(tmp_path: Path) -> None:
    settings = Settings(api_url="http://m", agent_id="a", pool="default", slots=8, work_dir=tmp_path)

    def env_of(environment: dict[str, str]) -> dict[str, str]:
        return build_environment(
            _spec(environment),
            settings,
            None,
            {"PATH": "/usr/bin"},
            probe=lambda e, n: set(),
            collective_port=41000,
        )

    assert env_of({})["STRATUS_COLLECTIVE_PORT"] == "41000"
    assert env_of({"STRATUS_NUM_NODES": "1"})["STRATUS_COLLECTIVE_PORT"] == "41000"
    assert "STRATUS_COLLECTIVE_PORT" not in env_of({"STRATUS_NUM_NODES": "2", "STRATUS_NODE_RANK": "0"})
    # the experiment's own environment_variables win
    assert env_of({"STRATUS_COLLECTIVE_PORT": "5000"})["STRATUS_COLLECTIVE_PORT"] == "5000"


# --- determined.common, det.LOG_FORMAT, alert, tensorboard ---------------------------------------------


def test_common_util_names_the_metric_groups(compat: None) -> None:
    from determined.common import util as det_util

    assert (det_util._LEGACY_TRAINING, det_util._LEGACY_VALIDATION, det_util._INFERENCE) == (
        "training",
        "validation",
        "inference",
    )
    assert [list(c) for c in det_util.chunks([1, 2, 3, 4, 5], 2)] == [[1, 2], [3, 4], [5]]
    assert det_util.sizeof_fmt(1536) == "1.5KB" and det_util.strtobool("Yes") is True
    with pytest.raises(ValueError, match="'maybe' is not a truth value"):
        det_util.strtobool("maybe")


def test_alert_is_a_line_of_the_trials_output() -> None:
    out = io.StringIO()
    line = alert(title="end of main", level="debug", out=out)
    assert out.getvalue() == "[alert] DEBUG: end of main\n" == line + "\n"
    assert alert("t", "what happened", "warn", out=out) == "[alert] WARN: t: what happened"
    with pytest.raises(ValueError, match="alert level 'loud' is not one of debug, info, warn, error"):
        alert("t", level="loud", out=out)


def test_core_context_alert_and_tensorboard_path(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with harness.core.init() as core:
        core.alert(title="done", description="all good")
        path = core.train.get_tensorboard_path()
    assert "[alert] INFO: done: all good" in capsys.readouterr().err
    assert path.is_dir() and path.parts[-3:] == ("stratus-tensorboard", "local", "rank-0")
    assert tensorboard_path(2, root=tmp_path) == tmp_path / "stratus-tensorboard" / "local" / "rank-2"


# --- what the stand-in does not implement is refused by name ------------------------------------------


def test_unimplemented_api_is_refused_by_name(compat: None) -> None:
    import determined as det

    with pytest.raises(ImportError, match=r"determined\.keras is not implemented by Stratus"):
        from determined import keras  # noqa: F401
    with pytest.raises(ModuleNotFoundError, match=r"determined\.tensorflow is not implemented by Stratus"):
        import determined.tensorflow  # noqa: F401
    with pytest.raises(ImportError, match=r"determined\.core\.DummyDistributedContext is not implemented"):
        _ = det.core.DummyDistributedContext
    with pytest.raises(ImportError, match=r"determined\.experimental\.client is not implemented.*det CLI"):
        from determined.experimental import client  # noqa: F401
    with pytest.raises(ImportError, match=r"determined\.pytorch\.deepspeed is not implemented"):
        from determined.pytorch import deepspeed  # noqa: F401
    # what it has imports as usual, submodules included
    from determined import launch, pytorch
    from determined.launch import deepspeed, horovod, torch_distributed, wrap_rank

    from stratus import launchers

    assert torch_distributed.main is launchers.torch_distributed.main
    assert (deepspeed.main, horovod.main) == (launchers.deepspeed.main, launchers.horovod.main)
    assert wrap_rank.main is launchers.wrap_rank.main

    assert pytorch.PyTorchTrial is harness.pytorch.PyTorchTrial and launch.__name__ == "determined.launch"
    assert not hasattr(det, "__wrapped__")


# --- core_v2 -------------------------------------------------------------------------------------------


def test_core_v2_wraps_the_trials_core_context(
    compat: None, monkeypatch: pytest.MonkeyPatch, plane_kit: Any
) -> None:
    plane_kit.platform_env({"increment_by": 2})
    plane = plane_kit.SearcherPlane(config={"searcher": {"name": "single", "metric": "x"}})
    use_plane(monkeypatch, plane)
    from determined.experimental import core_v2

    assert core_v2.train is None
    core_v2.init(config=core_v2.Config(name="ignored on the platform"), unmanaged=True)
    assert isinstance(core_v2.train, harness.core.PlatformTrainContext)
    assert core_v2.info.trial.hparams == {"increment_by": 2} and core_v2.distributed.size == 1
    assert core_v2.info._trial_info is core_v2.info.trial  # Determined's examples read the private name
    core_v2.train.report_training_metrics(steps_completed=5, metrics={"x": 10})
    with core_v2.checkpoint.store_path({"steps_completed": 5}) as (path, _):
        (path / "state").write_text("10")
    assert core_v2.preempt.should_preempt() is False
    core_v2.close()
    assert core_v2.train is None and core_v2.info is None
    assert [s for s, _ in plane.metric_posts("training")] == [5]
    assert [c["steps_completed"] for c in plane.checkpoint_reports()] == [5]


def test_core_v2_off_the_platform_runs_with_the_local_twins(
    compat: None, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    from determined.experimental import core_v2

    with caplog.at_level(logging.WARNING, logger="stratus.harness.compat"):
        core_v2.init(
            defaults=core_v2.DefaultConfig(name="detached", hparams={"lr": 0.1}, checkpoint_storage="ckpts")
        )
    assert "Stratus has no unmanaged experiments" in caplog.text and "'detached'" in caplog.text
    assert isinstance(core_v2.train, harness.core.LocalTrainContext)
    assert core_v2.info.trial.hparams == {"lr": 0.1} and core_v2.info.is_local
    core_v2.train.report_validation_metrics(steps_completed=10, metrics={"loss": 0.5})
    with core_v2.checkpoint.store_path({"steps_completed": 10}) as (path, storage_id):
        (path / "state").write_text("10")
    assert (tmp_path / "ckpts" / storage_id / "state").read_text() == "10"
    assert core_v2.train.validation_metrics == [{"steps_completed": 10, "metrics": {"loss": 0.5}}]
    core_v2.close()
    core_v2.close()  # idempotent
    assert core_v2.checkpoint is None


def test_core_v2_refuses_what_it_cannot_honour_off_the_platform(compat: None) -> None:
    from determined.experimental import core_v2

    with pytest.raises(ValueError, match=r"needs config=core_v2\.Config"):
        core_v2.init()
    with pytest.raises(ImportError, match="client=.*no Determined master"):
        core_v2.init(config=core_v2.Config(), client=object())
    with pytest.raises(ImportError, match="external_trial_id='t1'.*resume"):
        core_v2.init(config=core_v2.Config(external_experiment_id="e1", external_trial_id="t1"))
    with pytest.raises(ImportError, match="checkpoint_storage of type 's3'"):
        core_v2.init(config=core_v2.Config(checkpoint_storage={"type": "s3", "bucket": "b"}))
    with pytest.raises(ImportError, match="url_reverse_webui_exp_view.*no web UI"):
        core_v2.url_reverse_webui_exp_view()
    assert core_v2.train is None
    shared = core_v2.init_context(
        config=core_v2.Config(
            checkpoint_storage={"type": "shared_fs", "host_path": "/tmp", "storage_path": "x"}
        )
    )
    with shared:
        assert shared.checkpoint.checkpoint_dir == Path("/tmp/x")
    assert os.environ.get("STRATUS_TRIAL_ID") is None
