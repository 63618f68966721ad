"""The searcher dialogue, InvalidHP and the local test mode, against an in-memory control plane
(stratus.contract.http.InMemoryTransport, tests/unit/harness/fakes.py): no network, no sleeps."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stratus import harness
from stratus.harness import core
from stratus.harness._info import load_local_cluster_info, load_local_config
from stratus.harness.core._searcher import WAIT_BACKOFF_S
from stratus.harness.core._searcher_local import DEFAULT_LOCAL_LENGTH, local_max_length

pytestmark = pytest.mark.usefixtures("no_trial_env")


@pytest.fixture
def on_platform(plane_kit) -> None:
    plane_kit.platform_env({"learning_rate": 0.01})


def platform_init(plane, waits=None) -> harness.Context:  # waits: a plane_kit.Waits
    return harness.init(**plane.init_options(waits=waits))


# --- the dialogue on the platform ---------------------------------------------------------------


def test_operations_follow_train_until_stop(on_platform: None, plane_kit) -> None:
    plane = plane_kit.SearcherPlane([100, 300])
    seen = []
    with platform_init(plane) as ctx:
        assert ctx.preempt.should_preempt() is False
        for op in ctx.searcher.operations():
            seen.append((op.length, op.unit))
            op.report_completed(0.5 + len(seen) / 10)
        assert ctx.preempt.should_preempt() is True  # the stop latches preemption
    assert seen == [(100, "batches"), (300, "batches")]
    assert plane.searcher_calls() == [
        ("GET", f"/v1/trials/{plane_kit.trial}/searcher", None),
        ("POST", f"/v1/trials/{plane_kit.trial}/searcher/completed", {"length": 100, "metric": 0.6}),
        ("GET", f"/v1/trials/{plane_kit.trial}/searcher", None),
        ("POST", f"/v1/trials/{plane_kit.trial}/searcher/completed", {"length": 300, "metric": 0.7}),
        ("GET", f"/v1/trials/{plane_kit.trial}/searcher", None),
    ]


def test_wait_polls_with_a_bounded_backoff(on_platform: None, plane_kit) -> None:
    wait = {"action": "wait", "length": None, "unit": "batches"}
    plane = plane_kit.SearcherPlane([50], script=[wait] * 5)
    waits = plane_kit.Waits()
    with platform_init(plane, waits) as ctx:
        ops = list(_complete_all(ctx, metric=1.0))
    assert [op.length for op in ops] == [50]
    assert waits.delays == [*WAIT_BACKOFF_S, 1.0, 1.0]  # 0.25, 0.5, then once a second
    assert max(waits.delays) == 1.0
    assert len(plane.calls("GET", "/searcher")) == 7  # 5 waits, the train, the stop


def test_a_train_of_an_already_completed_length_is_a_wait(on_platform: None, plane_kit) -> None:
    plane = plane_kit.SearcherPlane()
    plane.script = [
        {"action": "train", "length": 100, "unit": "batches"},
        {"action": "train", "length": 100, "unit": "batches"},  # the completion is not digested yet
        {"action": "train", "length": 400, "unit": "batches"},
        {"action": "stop", "length": None, "unit": "batches"},
    ]
    waits = plane_kit.Waits()
    with platform_init(plane, waits) as ctx:
        assert [op.length for op in _complete_all(ctx, metric=0.1)] == [100, 400]
    assert waits.delays == [0.25]


def test_preemption_while_waiting_ends_the_operations(on_platform: None, plane_kit) -> None:
    plane = plane_kit.SearcherPlane(script=[{"action": "wait", "length": None, "unit": "batches"}] * 10)
    waits = plane_kit.Waits(interrupt_after=2)
    with platform_init(plane, waits) as ctx:
        assert list(ctx.searcher.operations()) == []
    assert len(waits.delays) == 2


def test_the_default_wait_wakes_up_on_preemption(on_platform: None, plane_kit) -> None:
    plane = plane_kit.SearcherPlane(script=[{"action": "wait", "length": None, "unit": "batches"}] * 10)
    with harness.init(transport=plane.transport(), heartbeat_interval_s=60.0) as ctx:
        ctx.preempt.latch("test")  # the wait returns at once instead of sleeping
        assert list(ctx.searcher.operations()) == []
    assert len(plane.calls("GET", "/searcher")) == 1


def test_every_operation_must_be_completed_once(on_platform: None, plane_kit) -> None:
    plane = plane_kit.SearcherPlane([10, 20])
    with platform_init(plane) as ctx:
        operations = ctx.searcher.operations()
        op = next(operations)
        with pytest.raises(harness.SearcherError, match="was not completed"):
            next(operations)
        op2 = ctx.searcher.next_operation()
        assert op2 is not None and op2.length == 10
        op2.report_completed(0.5)
        with pytest.raises(harness.SearcherError, match="once"):
            op2.report_completed(0.5)
    assert op.completed is False


def test_progress_is_a_fraction_of_the_operation(on_platform: None, plane_kit) -> None:
    plane = plane_kit.SearcherPlane([200])
    with platform_init(plane) as ctx:
        for op in ctx.searcher.operations():
            op.report_progress(50)
            op.report_progress(400)
            op.report_completed(1)
    progress = [report["progress"] for report in plane.reports("progress")]
    # In order; a value still waiting when the next one comes is replaced by it (the sender coalesces).
    assert progress in ([0.25, 1.0], [1.0])
    assert plane.completed == [{"length": 200, "metric": 1.0}]


def test_a_null_length_lets_the_script_decide(on_platform: None, plane_kit) -> None:
    plane = plane_kit.SearcherPlane([None])  # answered `train` with no length, again and again
    with platform_init(plane) as ctx:
        operations = ctx.searcher.operations()
        op = next(operations)
        assert op.length is None
        op.report_progress(70)  # no fraction without a length: nothing sent
        op.report_completed(0.9)
        assert list(operations) == []  # completing it says the script is done
    with platform_init(plane) as ctx:
        op = ctx.searcher.next_operation()
        assert op is not None
        op.report_completed(0.8, length=150)
    assert plane.completed == [{"length": 70, "metric": 0.9}, {"length": 150, "metric": 0.8}]
    assert plane.reports("progress") == []


def test_metrics_are_sent_as_json_numbers(on_platform: None, plane_kit) -> None:
    torch = pytest.importorskip("torch")
    plane = plane_kit.SearcherPlane([1, 2, 3])
    with platform_init(plane) as ctx:
        for op, metric in zip(ctx.searcher.operations(), [torch.tensor(0.25), math.nan, 3], strict=True):
            op.report_completed(metric)
    assert [c["metric"] for c in plane.completed] == [0.25, "NaN", 3.0]
    with platform_init(plane_kit.SearcherPlane([1])) as ctx:
        for op in ctx.searcher.operations():
            with pytest.raises(harness.SearcherError, match="number"):
                op.report_completed("high")
            break


def test_an_unknown_answer_is_an_error(on_platform: None, plane_kit) -> None:
    plane = plane_kit.SearcherPlane(script=[{"action": "jump"}])
    with platform_init(plane) as ctx, pytest.raises(harness.SearcherError, match="jump"):
        list(ctx.searcher.operations())
    plane = plane_kit.SearcherPlane(script=[{"action": "train", "length": -3}])
    with platform_init(plane) as ctx, pytest.raises(harness.SearcherError, match="-3"):
        list(ctx.searcher.operations())


def test_other_ranks_ask_but_never_report(
    monkeypatch: pytest.MonkeyPatch, on_platform: None, plane_kit
) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    # The chief (not here) reports the completion; this rank only sees the searcher move on.
    plane = plane_kit.SearcherPlane(
        script=[{"action": "train", "length": 10}, {"action": "train", "length": 10}]
    )
    with platform_init(plane, plane_kit.Waits(interrupt_after=5)) as ctx:
        ops = list(_complete_all(ctx, metric=0.3))
        ctx.searcher.report_invalid_hp("nope")
    assert [op.length for op in ops] == [10]
    assert plane.completed == [] and plane.invalid_hp == []
    assert plane.reports("progress") == []


def test_chief_only_mode_refuses_other_ranks() -> None:
    searcher = core.LocalSearcherContext(core.DistributedContext(rank=1, size=2))
    with pytest.raises(harness.SearcherError, match="ChiefOnly"):
        next(searcher.operations(searcher_mode=core.SearcherMode.ChiefOnly))


def test_configured_units_follow_max_length() -> None:
    dist = core.DistributedContext()
    for max_length, unit in [
        ({"epochs": 3}, core.Unit.EPOCHS),
        ({"batches": 3}, core.Unit.BATCHES),
        (3, None),
    ]:
        searcher = core.LocalSearcherContext(dist, config={"searcher": {"max_length": max_length}})
        assert searcher.get_configured_units() == unit
    searcher.acknowledge_out_of_ops()


# --- InvalidHP ----------------------------------------------------------------------------------


def test_invalid_hp_is_reported_and_exits_zero(on_platform: None, plane_kit) -> None:
    plane = plane_kit.SearcherPlane([10])
    with pytest.raises(SystemExit) as exited, platform_init(plane):
        raise harness.InvalidHP("hidden_size 3 is too small")
    assert exited.value.code == 0
    assert plane.invalid_hp == [{"message": "hidden_size 3 is too small"}]
    assert plane.searcher_calls() == [
        (
            "POST",
            f"/v1/trials/{plane_kit.trial}/searcher/invalid_hp",
            {"message": "hidden_size 3 is too small"},
        )
    ]


def test_report_early_exit_invalid_hp_is_sent_once(on_platform: None, plane_kit) -> None:
    plane = plane_kit.SearcherPlane()
    with pytest.raises(SystemExit), platform_init(plane) as ctx:
        ctx.train.report_early_exit(core.EarlyExitReason.INVALID_HP)
        ctx.train.report_early_exit(core.EarlyExitReason.USER_REQUESTED_STOP)  # only logged
        raise harness.InvalidHP("again")
    assert len(plane.invalid_hp) == 1


def test_other_exceptions_pass_through(on_platform: None, plane_kit) -> None:
    plane = plane_kit.SearcherPlane()
    with pytest.raises(ValueError, match="boom"), platform_init(plane):
        raise ValueError("boom")
    assert plane.invalid_hp == []


# --- local twins and the local test mode --------------------------------------------------------


def test_off_platform_one_operation_of_the_default_length(capsys: pytest.CaptureFixture[str]) -> None:
    with harness.init() as ctx:
        assert ctx.info is None and harness.get_cluster_info() is None
        ops = list(_complete_all(ctx, metric=0.75))
        assert ctx.preempt.should_preempt() is False
        assert isinstance(ctx.searcher, core.LocalSearcherContext)
        assert ctx.searcher.completed == [{"length": DEFAULT_LOCAL_LENGTH, "unit": "batches", "metric": 0.75}]
    assert [(op.length, op.unit) for op in ops] == [(100, "batches")]
    assert "[searcher] operation completed: length=100 batches metric=0.75" in capsys.readouterr().out


def _write_local_config(tmp_path: Path, **content: Any) -> Path:
    path = tmp_path / "local.json"
    path.write_text(json.dumps(content))
    return path


def test_local_test_mode_contract(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = {"searcher": {"name": "single", "metric": "accuracy", "max_length": {"batches": 600}}}
    local = _write_local_config(tmp_path, hparams={"lr": 0.1, "group": {"width": 8}}, config=config, length=3)
    events = tmp_path / "out" / "events.jsonl"
    monkeypatch.setenv("STRATUS_LOCAL_CONFIG", str(local))
    monkeypatch.setenv("STRATUS_LOCAL_EVENTS", str(events))
    monkeypatch.chdir(tmp_path)

    info = harness.get_cluster_info()  # before init: read from the file
    assert info is not None and info.is_local
    assert (info.trial.trial_id, info.trial.experiment_id, info.run_id) == (0, 0, "local")
    assert info.trial.hparams == {"lr": 0.1, "group": {"width": 8}}
    assert info.config == config and info.latest_checkpoint is None

    with harness.init() as ctx:
        assert harness.get_cluster_info() is ctx.info and ctx.info == info
        for op in ctx.searcher.operations():
            assert (op.length, op.unit) == (3, "batches")
            ctx.train.report_training_metrics(steps_completed=3, metrics={"loss": 0.5})
            ctx.train.report_validation_metrics(steps_completed=3, metrics={"accuracy": 0.9})
            op.report_completed(0.9)
        with ctx.checkpoint.store_path({"steps_completed": 3}) as (path, storage_id):
            (path / "w.bin").write_bytes(b"x")

    assert core.read_events(events) == [
        {"type": "training", "steps_completed": 3, "metrics": {"loss": 0.5}},
        {"type": "validation", "steps_completed": 3, "metrics": {"accuracy": 0.9}},
        {"type": "searcher_completed", "steps_completed": 3, "length": 3, "unit": "batches", "metric": 0.9},
        {
            "type": "checkpoint",
            "steps_completed": 3,
            "uuid": storage_id,
            "path": str(path),
            "metadata": {"steps_completed": 3},
        },
    ]
    assert path == tmp_path / "checkpoints" / storage_id


def test_local_length_defaults_to_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = {"searcher": {"max_length": {"records": 640}}, "records_per_epoch": 320}
    monkeypatch.setenv(
        "STRATUS_LOCAL_CONFIG",
        str(_write_local_config(tmp_path, hparams={"global_batch_size": 32}, config=config)),
    )
    with harness.init() as ctx:
        assert [(op.length, op.unit) for op in _complete_all(ctx, metric=1)] == [(20, "batches")]
    hp = {"global_batch_size": 32}
    assert local_max_length({"searcher": {"max_length": 7}}, hp) == (7, "batches")
    assert local_max_length({"searcher": {"max_length": {"epochs": 2}}, "records_per_epoch": 320}, hp) == (
        20,
        "batches",
    )
    assert local_max_length({"searcher": {"max_length": {"epochs": 2}}}, hp) == (2, "epochs")
    assert local_max_length({"searcher": {"max_length": {"records": 64}}}, {}) == (64, "records")
    assert local_max_length({"searcher": {}}, hp) is None


def test_local_config_without_any_length_keeps_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATUS_LOCAL_CONFIG", str(_write_local_config(tmp_path, hparams={}, config={})))
    with harness.init() as ctx:
        assert isinstance(ctx.searcher, core.LocalSearcherContext) and not ctx.searcher.configured
        ctx.searcher.use_length(12)
        assert [op.length for op in _complete_all(ctx, metric=1)] == [12]


def test_local_config_extras_and_errors(tmp_path: Path) -> None:
    good = _write_local_config(
        tmp_path,
        hparams={},
        config={"reproducibility": {"experiment_seed": 77}},
        length=5,
        latest_checkpoint="abc",
    )
    local = load_local_config({"STRATUS_LOCAL_CONFIG": str(good)})
    assert local is not None and (local.trial_seed, local.latest_checkpoint, local.length) == (77, "abc", 5)
    info = load_local_cluster_info({"STRATUS_LOCAL_CONFIG": str(good)})
    assert info is not None and info.trial.trial_seed == 77 and info.latest_checkpoint == "abc"
    # on the platform the file is ignored
    assert load_local_config({"STRATUS_LOCAL_CONFIG": str(good), "STRATUS_TRIAL_ID": "7"}) is None
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{nope")
    cases = {
        str(tmp_path / "missing.json"): "cannot be read",
        str(bad_json): "not valid JSON",
        str(_write_local_config(tmp_path, hparams=[1], config={})): "hparams",
        str(_write_local_config(tmp_path, hparams={}, config={}, length=0)): "length",
    }
    for path, message in cases.items():
        with pytest.raises(harness.HarnessError, match=message):
            load_local_config({"STRATUS_LOCAL_CONFIG": path})


def test_local_events_refuse_unknown_types(tmp_path: Path) -> None:
    events = core.LocalEvents(tmp_path / "e.jsonl")
    with pytest.raises(ValueError, match="unknown local event type"):
        events.emit("debug", 1)
    core.LocalEvents(None).emit("training", 1)  # no file: nothing happens
    assert core.read_events(tmp_path / "e.jsonl") == []


def _complete_all(ctx: harness.Context, *, metric: Any) -> Iterator[core.SearcherOperation]:
    for op in ctx.searcher.operations():
        yield op
        op.report_completed(metric)
