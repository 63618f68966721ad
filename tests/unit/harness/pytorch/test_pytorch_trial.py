"""PyTorchTrial and its Trainer: chunking, periods, checkpoints, exact resume, the legacy entrypoint.

Off the platform the local twins record what was reported; on it, the in-memory control plane of
tests/unit/harness/fakes.py (SearcherPlane) answers (stratus.contract.http.InMemoryTransport). Trials are
tiny MLPs on synthetic data (CPU)."""

from __future__ import annotations

import io
import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import TensorDataset  # noqa: E402

from stratus import harness  # noqa: E402
from stratus.harness import core  # noqa: E402
from stratus.harness.exec import run_trial  # noqa: E402
from stratus.harness.pytorch import (  # noqa: E402
    Batch,
    DataLoader,
    Epoch,
    LRScheduler,
    PyTorchTrial,
    PyTorchTrialContext,
    Trainer,
    init,
)
from stratus.harness.pytorch._data import EpochBatchSampler  # noqa: E402

HPARAMS = {"lr": 0.05, "global_batch_size": 8}


def synthetic() -> tuple[TensorDataset, TensorDataset]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(96, 4, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.1 * torch.randn(96, generator=g)
    return TensorDataset(x[:64], y[:64]), TensorDataset(x[64:], y[64:])


class Regression(PyTorchTrial):
    """A small MLP with dropout (so resuming must restore the RNG), Adam, StepLR per epoch."""

    def __init__(self, context: PyTorchTrialContext) -> None:
        self.context = context
        self.train_set, self.val_set = synthetic()
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.2), nn.Linear(8, 1))
        self.model = context.wrap_model(model)
        self.opt = context.wrap_optimizer(
            torch.optim.Adam(self.model.parameters(), lr=context.get_hparam("lr"))
        )
        self.sched = context.wrap_lr_scheduler(
            torch.optim.lr_scheduler.StepLR(self.opt, step_size=1, gamma=0.9),
            step_mode=LRScheduler.StepMode.STEP_EVERY_EPOCH,
        )
        self.seen: list[tuple[int, int]] = []

    def build_training_data_loader(self) -> Any:
        return DataLoader(self.train_set, batch_size=self.context.get_per_slot_batch_size(), shuffle=True)

    def build_validation_data_loader(self) -> Any:
        return DataLoader(self.val_set, batch_size=16)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        loss = F.mse_loss(self.model(x).squeeze(-1), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        self.seen.append((epoch_idx, batch_idx))
        return {"loss": loss, "batch_idx": batch_idx}

    def evaluate_batch(self, batch: Any) -> dict[str, Any]:
        x, y = batch
        return {"val_loss": F.mse_loss(self.model(x).squeeze(-1), y)}


class PreemptedAt(Regression):
    """Asks for preemption while training batch `AT` (as SIGTERM or the heartbeat would)."""

    AT = 14

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        if batch_idx == self.AT:
            self.context.core.preempt.latch("test")
        return super().train_batch(batch, epoch_idx, batch_idx)


@pytest.fixture(autouse=True)
def clean_env(no_trial_env: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # local checkpoints land under tmp_path/checkpoints


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    path = tmp_path / "events.jsonl"
    monkeypatch.setenv("STRATUS_LOCAL_EVENTS", str(path))
    return path


def of_type(path: Path, kind: str) -> list[dict[str, Any]]:
    return [e for e in core.read_events(path) if e["type"] == kind]


def run_local(
    config: dict[str, Any], trial_class: type[Regression] = Regression, **fit: Any
) -> tuple[Regression, core.Context]:
    with init(hparams=HPARAMS, exp_conf=config) as context:
        trial = trial_class(context)
        Trainer(trial, context).fit(**fit)
    return trial, context.core


# --- chunks, periods, lengths -------------------------------------------------------------------


def test_chunks_report_validate_and_checkpoint_at_their_periods(events: Path) -> None:
    config = {
        "scheduling_unit": 10,
        "min_validation_period": {"batches": 20},
        "min_checkpoint_period": {"batches": 30},
        "searcher": {"metric": "val_loss"},
    }
    trial, ctx = run_local(config, max_length=Batch(35))
    assert [(e["steps_completed"], e["metrics"]["batch_idx"]) for e in of_type(events, "training")] == [
        (10, 4.5),
        (20, 14.5),
        (30, 24.5),
        (35, 32.0),
    ]
    validations = of_type(events, "validation")
    assert [e["steps_completed"] for e in validations] == [20, 35]
    assert [e["steps_completed"] for e in of_type(events, "checkpoint")] == [30, 35]
    completed = of_type(events, "searcher_completed")
    assert completed == [
        {
            "type": "searcher_completed",
            "steps_completed": 35,
            "length": 35,
            "unit": "batches",
            "metric": validations[-1]["metrics"]["val_loss"],
        }
    ]
    assert trial.seen[:9] == [(0, i) for i in range(8)] + [(1, 8)]  # 8 batches per epoch
    assert trial.sched.get_last_lr() == pytest.approx([0.05 * 0.9**4])  # 4 epochs ended by batch 35
    meta = of_type(events, "checkpoint")[-1]["metadata"]
    assert meta["steps_completed"] == 35 and meta["format"] == "pickle"
    assert (Path(of_type(events, "checkpoint")[-1]["path"]) / "state_dict.pth").is_file()


def test_periods_in_records_and_epochs(events: Path) -> None:
    config = {
        "records_per_epoch": 64,
        "min_validation_period": {"epochs": 1},  # 64 // 8 = 8 batches
        "min_checkpoint_period": {"records": 80},  # 80 // 8 = 10 batches
        "searcher": {"metric": "val_loss"},
    }
    run_local(config, max_length=Epoch(3))  # 24 batches
    assert [e["steps_completed"] for e in of_type(events, "training")] == [8, 10, 16, 20, 24]
    assert [e["steps_completed"] for e in of_type(events, "validation")] == [8, 16, 24]
    assert [e["steps_completed"] for e in of_type(events, "checkpoint")] == [10, 20, 24]
    assert of_type(events, "searcher_completed")[0]["length"] == 24


def test_epochs_without_records_per_epoch_use_the_loader(events: Path) -> None:
    run_local(
        {"min_validation_period": {"epochs": 2}, "searcher": {"metric": "val_loss"}}, max_length=Batch(40)
    )
    assert [e["steps_completed"] for e in of_type(events, "validation")] == [16, 32, 40]
    assert [e["steps_completed"] for e in of_type(events, "training")] == [16, 32, 40]


def test_fit_periods_override_the_config(events: Path) -> None:
    run_local(
        {"min_validation_period": {"batches": 3}, "searcher": {"metric": "val_loss"}},
        max_length=Batch(12),
        validation_period=Batch(6),
        checkpoint_period=Batch(4),
        reporting_period=Batch(5),
    )
    assert [e["steps_completed"] for e in of_type(events, "training")] == [4, 5, 6, 8, 10, 12]
    assert [e["steps_completed"] for e in of_type(events, "validation")] == [6, 12]
    assert [e["steps_completed"] for e in of_type(events, "checkpoint")] == [4, 8, 12]


def test_local_test_mode_length_wins_over_max_length(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, events: Path
) -> None:
    local = tmp_path / "local.json"
    config = {"searcher": {"metric": "val_loss", "max_length": {"batches": 600}}, "scheduling_unit": 1}
    local.write_text(json.dumps({"hparams": HPARAMS, "config": config, "length": 2}))
    monkeypatch.setenv("STRATUS_LOCAL_CONFIG", str(local))
    with init() as context:
        assert context.get_hparams() == HPARAMS and context.get_trial_id() == 0
        Trainer(Regression(context), context).fit(max_length=Batch(50))
    assert [e["type"] for e in core.read_events(events)] == [
        "training",
        "training",
        "validation",
        "searcher_completed",
        "checkpoint",
    ]


def test_test_mode_trains_one_batch(events: Path) -> None:
    run_local({"searcher": {"metric": "val_loss"}}, max_length=Batch(50), test_mode=True)
    assert [(e["type"], e["steps_completed"]) for e in core.read_events(events)] == [
        ("training", 1),
        ("validation", 1),
        ("searcher_completed", 50),  # the operation is reported done, at its own length
        ("checkpoint", 1),
    ]


def test_initial_validation(events: Path) -> None:
    run_local({"perform_initial_validation": True, "searcher": {"metric": "val_loss"}}, max_length=Batch(3))
    assert [e["steps_completed"] for e in of_type(events, "validation")] == [0, 3]


# --- on the platform ----------------------------------------------------------------------------


@pytest.fixture
def on_platform(plane_kit) -> None:
    plane_kit.platform_env(HPARAMS, seed=7)


PLATFORM_CONFIG = {
    "searcher": {"name": "adaptive_asha", "metric": "val_loss", "max_length": {"batches": 30}},
    "scheduling_unit": 5,
    "min_validation_period": {"batches": 10},
}


def run_platform(plane, trial_class: type[Regression] = Regression, **fit: Any) -> Regression:
    with init(**plane.init_options()) as context:
        assert context.get_trial_seed() == 7 and context.get_trial_id() == plane.trial_id
        trial = trial_class(context)
        Trainer(trial, context).fit(**fit)
    return trial


def final_state(plane) -> dict[str, Any]:
    body = plane.checkpoint_reports()[-1]
    key = f"bucket/checkpoints/{plane.experiment_id}/{plane.trial_id}/{body['uuid']}/state_dict.pth"
    state: dict[str, Any] = torch.load(io.BytesIO(plane.s3[key]), weights_only=False)
    return state


def test_operations_drive_training_and_get_the_searcher_metric(on_platform: None, plane_kit) -> None:
    wait = {"action": "wait", "length": None, "unit": "batches"}
    plane = plane_kit.SearcherPlane([10, 25], config=PLATFORM_CONFIG)
    plane.script = [{"action": "train", "length": 10, "unit": "batches"}, wait]
    run_platform(plane)
    validations = dict(plane.metric_posts("validation"))
    assert sorted(validations) == [10, 20, 25]
    assert plane.completed == [
        {"length": 10, "metric": validations[10]["val_loss"]},
        {"length": 25, "metric": validations[25]["val_loss"]},
    ]
    assert [s for s, _ in plane.metric_posts("training")] == [5, 10, 15, 20, 25]
    progress = [report["progress"] for report in plane.reports("progress")]
    assert progress == [0.5, 1.0, 0.6, 0.8, 1.0]  # batches / the operation's (cumulative) length
    checkpoints = [c["steps_completed"] for c in plane.checkpoint_reports()]
    assert checkpoints == [25]  # once, at the end


def test_a_preempted_then_resumed_trial_matches_an_uninterrupted_one(
    monkeypatch: pytest.MonkeyPatch, on_platform: None, plane_kit
) -> None:
    straight = plane_kit.SearcherPlane([30], config=PLATFORM_CONFIG)
    run_platform(straight)

    interrupted = plane_kit.SearcherPlane([30], config=PLATFORM_CONFIG)
    first = run_platform(interrupted, PreemptedAt)
    assert first.seen[-1] == (1, 14)  # stopped at the end of the chunk holding batch 14
    assert interrupted.completed == []
    checkpoint = interrupted.checkpoint_reports()[-1]
    assert checkpoint["steps_completed"] == 15 and checkpoint["metadata"]["steps_completed"] == 15

    monkeypatch.setenv("STRATUS_LATEST_CHECKPOINT", checkpoint["uuid"])
    second = run_platform(interrupted)
    assert second.seen[0] == (1, 15)  # resumed where it stopped, in the same epoch

    assert interrupted.metric_posts("training") == straight.metric_posts("training")
    assert interrupted.metric_posts("validation") == straight.metric_posts("validation")
    assert interrupted.completed == straight.completed
    done, expected = final_state(interrupted), final_state(straight)
    for got, want in zip(
        done["models_state_dict"][0].values(), expected["models_state_dict"][0].values(), strict=True
    ):
        assert torch.equal(got, want)
    assert done["optimizers_state_dict"][0]["state"][0]["exp_avg"].equal(
        expected["optimizers_state_dict"][0]["state"][0]["exp_avg"]
    )
    assert done["lr_schedulers_state_dict"] == expected["lr_schedulers_state_dict"]
    assert done["trainer_state"]["batches_trained"] == 30


def test_another_trials_checkpoint_gives_its_weights_but_not_its_batch_count(
    monkeypatch: pytest.MonkeyPatch, on_platform: None, plane_kit
) -> None:
    plane = plane_kit.SearcherPlane([30], config=PLATFORM_CONFIG)
    run_platform(plane, PreemptedAt)
    body = plane.checkpoint_reports()[-1]
    state = final_state(plane)
    assert state["trainer_state"]["trial_id"] == plane.trial_id
    # As if another trial (a PBT parent) had written it: this trial is warm-started from it.
    state["trainer_state"]["trial_id"] = plane.trial_id + 1
    key = f"bucket/checkpoints/{plane.experiment_id}/{plane.trial_id}/{body['uuid']}/state_dict.pth"
    buffer = io.BytesIO()
    torch.save(state, buffer)
    plane.s3[key] = buffer.getvalue()

    class RecordsItsStart(Regression):
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
            if not self.seen:
                self.start = {k: v.clone() for k, v in self.model.state_dict().items()}
            return super().train_batch(batch, epoch_idx, batch_idx)

    monkeypatch.setenv("STRATUS_LATEST_CHECKPOINT", body["uuid"])
    second = run_platform(plane, RecordsItsStart)
    assert second.seen[0] == (0, 0)  # its own batches count from 0 (Determined's warm start)
    assert final_state(plane)["trainer_state"]["batches_trained"] == 30
    parent = state["models_state_dict"][0]
    assert all(torch.equal(second.start[k], parent[k]) for k in parent)  # from the parent's weights


def test_a_stop_request_checkpoints_and_returns(on_platform: None, plane_kit) -> None:
    class StopsEarly(Regression):
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
            if batch_idx == 7:
                self.context.set_stop_requested(True)
            return super().train_batch(batch, epoch_idx, batch_idx)

    plane = plane_kit.SearcherPlane([30], config=PLATFORM_CONFIG)
    trial = run_platform(plane, StopsEarly)
    assert len(trial.seen) == 10 and plane.completed == []
    assert [c["steps_completed"] for c in plane.checkpoint_reports()] == [10]


def test_invalid_hp_from_the_trial_is_reported_and_exits_zero(on_platform: None, plane_kit) -> None:
    class Invalid(Regression):
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
            raise harness.InvalidHP("lr 0.05 diverges")

    plane = plane_kit.SearcherPlane([30], config=PLATFORM_CONFIG)
    with pytest.raises(SystemExit) as exited:
        run_platform(plane, Invalid)
    assert exited.value.code == 0
    assert plane.invalid_hp == [{"message": "lr 0.05 diverges"}]
    assert plane.checkpoint_reports() == []


def test_a_null_length_needs_max_length(on_platform: None, plane_kit) -> None:
    plane = plane_kit.SearcherPlane([None], config={"searcher": {"metric": "val_loss"}})
    with pytest.raises(harness.TrialDefinitionError, match="max_length"):
        run_platform(plane)
    plane = plane_kit.SearcherPlane([None], config={"searcher": {"metric": "val_loss"}})
    run_platform(plane, max_length=Batch(6))
    assert [c["length"] for c in plane.completed] == [6]


def test_a_missing_searcher_metric_is_named(on_platform: None, plane_kit) -> None:
    plane = plane_kit.SearcherPlane([5], config={"searcher": {"metric": "accuracy"}})
    with pytest.raises(harness.TrialDefinitionError, match="'accuracy'.*val_loss"):
        run_platform(plane)


# --- trial definitions --------------------------------------------------------------------------


def test_evaluate_full_dataset_and_reducers(events: Path) -> None:
    class Full(Regression):
        evaluate_batch = PyTorchTrial.evaluate_batch  # type: ignore[assignment]

        def evaluate_full_dataset(self, data_loader: Any) -> dict[str, Any]:
            return {"val_loss": sum(F.mse_loss(self.model(x).squeeze(-1), y).item() for x, y in data_loader)}

    run_local({"searcher": {"metric": "val_loss"}}, Full, max_length=Batch(4))
    assert len(of_type(events, "validation")) == 1

    class Both(Regression):
        def evaluate_full_dataset(self, data_loader: Any) -> dict[str, Any]:
            return {}

    with pytest.raises(harness.TrialDefinitionError, match="exactly one"):
        run_local({}, Both, max_length=Batch(4))


def test_plain_torch_data_loaders_are_accepted(
    on_platform: None, monkeypatch: pytest.MonkeyPatch, plane_kit
) -> None:
    class Plain(Regression):
        def build_training_data_loader(self) -> Any:
            return torch.utils.data.DataLoader(self.train_set, batch_size=8)

        def build_validation_data_loader(self) -> Any:
            return torch.utils.data.DataLoader(self.val_set, batch_size=32)

    class PlainPreempted(Plain):
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
            if batch_idx == 9:
                self.context.core.preempt.latch("test")
            return super().train_batch(batch, epoch_idx, batch_idx)

    plane = plane_kit.SearcherPlane([20], config=PLATFORM_CONFIG)
    first = run_platform(plane, PlainPreempted)
    assert first.seen[-1] == (1, 9)
    monkeypatch.setenv("STRATUS_LATEST_CHECKPOINT", plane.checkpoint_reports()[-1]["uuid"])
    second = run_platform(plane, Plain)
    assert second.seen[0] == (1, 10) and second.seen[-1] == (2, 19)
    assert [c["length"] for c in plane.completed] == [20]


def test_context_accessors() -> None:
    with init(hparams={"global_batch_size": 6, "n": 1}, exp_conf={"data": {"x": 1}}) as context:
        assert context.get_hparam("n") == 1
        assert context.get_global_batch_size() == 6 and context.get_per_slot_batch_size() == 6
        assert context.get_data_config() == {"x": 1}
        assert context.distributed.get_size() == 1 and context.device.type in ("cpu", "cuda")
        with pytest.raises(harness.TrialDefinitionError, match="'missing'.*global_batch_size, n"):
            context.get_hparam("missing")
        assert context.to_device({"a": [torch.ones(1)]})["a"][0].device.type == context.device.type
    with init(hparams={}) as context, pytest.raises(harness.TrialDefinitionError, match="global_batch_size"):
        context.get_global_batch_size()


def test_to_device_walks_every_container_and_keeps_tensors_already_there() -> None:
    from collections import namedtuple

    from stratus.harness.pytorch._data import to_device

    pair = namedtuple("pair", "x y")
    x, y = torch.ones(2), torch.zeros(2)
    moved = to_device({"batch": [x, (y, "label")], "named": pair(x, 3)}, torch.device("cpu"))
    assert moved["batch"][0] is x and moved["batch"][1][0] is y and moved["batch"][1][1] == "label"
    assert isinstance(moved["batch"], list) and isinstance(moved["batch"][1], tuple)
    assert isinstance(moved["named"], pair) and moved["named"].x is x and moved["named"].y == 3
    doubles = to_device((x,), torch.device("meta"))
    assert doubles[0].device.type == "meta"  # a tensor elsewhere is moved


def test_to_device_queues_host_to_gpu_copies_and_waits_for_the_rest() -> None:
    """A copy from the host to a GPU is not waited for (the host reads the next batch meanwhile); a copy
    to the host is (its values are read next). Pure logic: a stand-in tensor records how it was moved."""
    from stratus.harness.pytorch._data import _moved

    class Recorded:
        def __init__(self, device: str) -> None:
            self.device = torch.device(device)
            self.calls: list[tuple[str, bool]] = []

        def to(self, device: torch.device, non_blocking: bool = False) -> Recorded:
            self.calls.append((str(device), non_blocking))
            return Recorded(str(device))

    on_host, on_gpu = Recorded("cpu"), Recorded("cuda:0")
    _moved([on_host], torch.device("cuda", 0), Recorded)
    _moved((on_gpu,), torch.device("cpu"), Recorded)
    assert on_host.calls == [("cuda:0", True)] and on_gpu.calls == [("cpu", False)]
    already = Recorded("cuda:0")
    assert _moved(already, torch.device("cuda", 0), Recorded) is already and already.calls == []


def test_data_loader_pins_batches_where_cuda_is_available_unless_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    train, _ = synthetic()
    assert DataLoader(train, batch_size=8).get_data_loader().pin_memory is torch.cuda.is_available()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert DataLoader(train, batch_size=8).get_data_loader().pin_memory is True
    assert DataLoader(train, batch_size=8, pin_memory=False).get_data_loader().pin_memory is False
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert DataLoader(train, batch_size=8).get_data_loader().pin_memory is False
    assert DataLoader(train, batch_size=8, pin_memory=True).get_data_loader().pin_memory is True


def test_context_passes_batches_through_where_the_cpu_is_the_only_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from stratus.harness.pytorch import _context

    batch = (torch.ones(2), torch.zeros(2))
    monkeypatch.setattr(_context, "_cpu_only", lambda: True)
    with init(hparams=HPARAMS, exp_conf={}) as context:
        assert context.to_device(batch) is batch  # nothing could be elsewhere: not even walked
        context.device = torch.device("meta")
        assert context.to_device(batch)[0].device.type == "meta"
    monkeypatch.setattr(_context, "_cpu_only", lambda: False)
    with init(hparams=HPARAMS, exp_conf={}) as context:
        assert context.to_device(batch) is not batch and context.to_device(batch)[0] is batch[0]


def test_batch_metrics_keep_no_graph_and_are_read_once_per_report() -> None:
    from stratus.harness.pytorch._metrics import metric_values, training_metrics

    weight = torch.ones(3, requires_grad=True)
    loss = (weight * 2).sum()
    kept = training_metrics({"loss": loss, "count": 4})
    assert isinstance(kept["loss"], torch.Tensor)
    assert not kept["loss"].requires_grad  # detached: the batch's graph is not held until the report
    assert metric_values([kept, training_metrics(loss)]) == [{"loss": 6.0, "count": 4.0}, {"loss": 6.0}]
    with pytest.raises(harness.TrialDefinitionError, match="'acc' is not a scalar.*3 elements"):
        training_metrics({"acc": torch.ones(3)})  # named at the batch that returned it, not at the report
    with pytest.raises(harness.TrialDefinitionError, match="'name' is a str"):
        training_metrics({"name": "x"})


def test_batch_metrics_read_in_one_go_match_value_by_value() -> None:
    from stratus.harness.pytorch._metrics import metric_values, training_metrics
    from stratus.harness.pytorch._trial import scalar

    losses = [
        training_metrics({"loss": torch.tensor(i / 3), "acc": torch.tensor(1 - i / 7)}) for i in range(5)
    ]
    one_by_one = [{name: scalar(name, v) for name, v in m.items()} for m in losses]
    assert metric_values(losses) == one_by_one  # the stacked read gives the same floats
    mixed = [
        training_metrics({"loss": torch.tensor(0.5)}),
        training_metrics({"loss": torch.tensor([1.5])}),  # one element, one dimension: not stackable
        training_metrics({"loss": torch.tensor(2, dtype=torch.int64)}),
        training_metrics({"loss": torch.tensor(float("nan"), dtype=torch.float64)}),
    ]
    values = metric_values(mixed)
    assert (
        values[:3] == [{"loss": 0.5}, {"loss": 1.5}, {"loss": 2.0}] and values[3]["loss"] != values[3]["loss"]
    )


# --- the data loader ----------------------------------------------------------------------------


def sampler(**kwargs: Any) -> EpochBatchSampler:
    base: dict[str, Any] = {
        "size": 20,
        "batch_size": 4,
        "shuffle": True,
        "drop_last": False,
        "sampler": None,
        "batch_sampler": None,
        "seed": 3,
        "repeat": False,
        "skip": 0,
        "num_replicas": 1,
        "rank": 0,
    }
    return EpochBatchSampler(**{**base, **kwargs})


def test_batches_carry_their_seed_only_for_worker_processes() -> None:
    from stratus.harness.pytorch._workers import SeededBatch

    seeded = next(iter(sampler()))
    plain = next(iter(sampler(seeded=False)))
    assert isinstance(seeded, SeededBatch) and type(plain) is list and plain == list(seeded)
    loader = DataLoader(list(range(20)), batch_size=4)
    assert loader.get_data_loader().batch_sampler.seeded is False  # type: ignore[union-attr]
    with_workers = DataLoader(list(range(20)), batch_size=4, num_workers=1)
    assert with_workers.get_data_loader().batch_sampler.seeded is True  # type: ignore[union-attr]
    resumed = list(_take(iter(sampler(seeded=False, repeat=True, skip=3)), 2))
    assert resumed == [list(b) for b in list(_take(iter(sampler(repeat=True)), 5))[3:5]]


def test_batches_depend_only_on_seed_and_position() -> None:
    assert sampler().epoch_batches(0) == sampler().epoch_batches(0)
    assert sampler().epoch_batches(0) != sampler().epoch_batches(1)
    assert sampler(seed=4).epoch_batches(0) != sampler().epoch_batches(0)
    stream = list(_take(iter(sampler(repeat=True)), 17))
    assert list(_take(iter(sampler(repeat=True, skip=6)), 11)) == stream[6:]
    assert sorted(i for b in sampler().epoch_batches(2) for i in b) == list(range(20))
    assert sampler(shuffle=False).epoch_batches(0)[0] == [0, 1, 2, 3]


def test_batches_are_shared_out_between_ranks() -> None:
    every = sampler(size=22).epoch_batches(0)  # 6 batches, the last one of 2
    training = [sampler(size=22, num_replicas=4, rank=r, repeat=True).epoch_batches(0) for r in range(4)]
    assert training == [[every[r]] for r in range(4)]  # 6 trimmed to 4 so the ranks stay in step
    validation = [sampler(size=22, num_replicas=4, rank=r).epoch_batches(0) for r in range(4)]
    assert sorted(b for rank in validation for b in rank) == sorted(every)  # every batch, once
    assert [len(r) for r in validation] == [2, 2, 1, 1]
    assert len(sampler(size=22, drop_last=True)) == 5 and len(sampler(size=22)) == 6


def test_data_loader_keeps_torch_arguments() -> None:
    train, _ = synthetic()
    loader = DataLoader(train, batch_size=8, shuffle=True, drop_last=True)
    assert loader.batch_size == 8 and len(loader) == 8
    x, y = next(iter(loader.get_data_loader(seed=1)))
    assert x.shape == (8, 4) and y.shape == (8,)
    with pytest.raises(ValueError, match="exclusive"):
        DataLoader(train, batch_size=8, batch_sampler=[[0, 1]])
    before = torch.random.get_rng_state()
    list(loader.get_data_loader(seed=1))
    assert torch.equal(before, torch.random.get_rng_state())  # iterating draws nothing from the global RNG


# --- the legacy entrypoint ----------------------------------------------------------------------

MODEL_DEF = """
import torch
from torch import nn
from torch.utils.data import TensorDataset
from stratus.harness.pytorch import DataLoader, PyTorchTrial


class Tiny(PyTorchTrial):
    def __init__(self, context):
        self.context = context
        self.model = context.wrap_model(nn.Linear(2, 1))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=context.get_hparam("lr")))
        self.data = TensorDataset(torch.ones(16, 2), torch.zeros(16, 1))

    def build_training_data_loader(self):
        return DataLoader(self.data, batch_size=self.context.get_per_slot_batch_size())

    def build_validation_data_loader(self):
        return DataLoader(self.data, batch_size=16)

    def train_batch(self, batch, epoch_idx, batch_idx):
        x, y = batch
        loss = ((self.model(x) - y) ** 2).mean()
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return loss

    def evaluate_batch(self, batch, batch_idx):
        x, y = batch
        return {"error": ((self.model(x) - y) ** 2).mean()}


class NotATrial:
    pass
"""


@pytest.fixture
def model_def(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "model_def.py").write_text(textwrap.dedent(MODEL_DEF))
    yield tmp_path
    sys.modules.pop("model_def", None)
    while str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


def test_legacy_entrypoint_runs_the_trial_class(
    model_def: Path, monkeypatch: pytest.MonkeyPatch, events: Path
) -> None:
    local = model_def / "local.json"
    config = {"searcher": {"metric": "error"}, "scheduling_unit": 2}
    local.write_text(
        json.dumps({"hparams": {"lr": 0.1, "global_batch_size": 4}, "config": config, "length": 5})
    )
    monkeypatch.setenv("STRATUS_LOCAL_CONFIG", str(local))
    assert run_trial.main(["model_def:Tiny"]) == 0
    assert [e["steps_completed"] for e in of_type(events, "training")] == [2, 4, 5]
    assert of_type(events, "training")[0]["metrics"].keys() == {"loss"}
    assert [e["length"] for e in of_type(events, "searcher_completed")] == [5]
    assert [e["steps_completed"] for e in of_type(events, "checkpoint")] == [5]


def test_legacy_entrypoint_errors_say_what_to_fix(model_def: Path) -> None:
    for spec, message in [
        ("model_def", "module:Class"),
        ("nowhere:Tiny", "not in"),
        ("model_def:Missing", "has no 'Missing'"),
        ("model_def:NotATrial", "not a PyTorchTrial"),
    ]:
        with pytest.raises(harness.TrialDefinitionError, match=message):
            run_trial.load_trial_class(spec)


def _take(it: Iterator[Any], n: int) -> Iterator[Any]:
    for _ in range(n):
        yield next(it)
