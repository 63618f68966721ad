"""Exact resume (issue 10): a trial preempted and resumed, once or twice, in the middle of an epoch or at
its end, ends with the weights, buffers, optimizer and LR scheduler states, RNG states and every reported
metric of the same trial run uninterrupted, bit for bit (CPU).

The PyTorchTrial (tests/data/exact_resume/model_def.py) has dropout, batch norm, Adam and SGD with
momentum, an LR scheduler per batch and one per epoch, noise from random, numpy and torch in every batch
and in the dataset's reads, and shuffled training data from four kinds of loader in process: torch's
DataLoader (its sampler seeded from torch's RNG each epoch), torch's with its own generator, ours, and
ours with a sampler of the user's; also stopped between two optimizer steps, and with an RNG of its own
kept by a callback. The Core API script (tests/data/exact_resume/core_train.py) and
examples/determined_core save what they need themselves. All run against the in-memory control plane of
tests/unit/harness/fakes.py (SearcherPlane); the loader that resumes a plain torch DataLoader
(PlainLoaderStream) is also tested alone. Real processes: tests/integration/test_exact_resume_process.py.
"""

from __future__ import annotations

import importlib.util
import io
import itertools
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from stratus.harness.pytorch import PyTorchCallback, Trainer, init  # noqa: E402

DATA = Path(__file__).resolve().parents[3] / "data" / "exact_resume"
LENGTH = 40  # batches: 5 epochs of 8
CONFIG = {
    "searcher": {"name": "single", "metric": "val_loss", "max_length": {"batches": LENGTH}},
    "scheduling_unit": 3,  # chunks end at 3, 6, 9, ... and at every validation (every epoch)
    "min_validation_period": {"batches": 8},
}


@pytest.fixture(autouse=True)
def clean_env(no_trial_env: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def model_def() -> ModuleType:
    spec = importlib.util.spec_from_file_location("exact_resume_model_def", DATA / "model_def.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def train(
    plane_kit,
    model_def: ModuleType,
    loader: str,
    preempt_at: list[int],
    config: dict[str, Any] = CONFIG,
    trial_class: Any = None,
) -> tuple[Any, list[list[int]]]:
    """Run the trial against a new SearcherPlane until its searcher is done, resuming each time from the
    latest checkpoint through STRATUS_LATEST_CHECKPOINT; the plane and the batches of each run."""
    plane = plane_kit.SearcherPlane([LENGTH], config=config)
    plane_kit.platform_env({"global_batch_size": 8, "loader": loader, "preempt_at": preempt_at}, seed=7)
    runs: list[list[int]] = []
    while not plane.completed:
        assert len(runs) <= len(preempt_at), f"the trial did not finish after {len(runs)} runs"
        reports = plane.checkpoint_reports()
        if reports:
            plane_kit.monkeypatch.setenv("STRATUS_LATEST_CHECKPOINT", reports[-1]["uuid"])
        with init(**plane.init_options()) as context:
            trial = (trial_class or model_def.ResumeTrial)(context)
            Trainer(trial, context).fit()
        runs.append(trial.trained)
    return plane, runs


def final_state(plane) -> dict[str, Any]:
    body = plane.checkpoint_reports()[-1]
    key = f"bucket/checkpoints/{plane.experiment_id}/{plane.trial_id}/{body['uuid']}/state_dict.pth"
    state: dict[str, Any] = torch.load(io.BytesIO(plane.s3[key]), weights_only=False)
    return state


def assert_identical(got: Any, want: Any, where: str) -> None:
    """`got` equals `want` exactly, tensors and arrays bit for bit, walking dicts, lists and tuples."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.dtype == want.dtype, where
        assert torch.equal(got, want), f"{where} differs"
    elif isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray) and np.array_equal(got, want), f"{where} differs"
    elif isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), f"{where}: keys {list(got)} != {list(want)}"
        for key in want:
            assert_identical(got[key], want[key], f"{where}[{key!r}]")
    elif isinstance(want, list | tuple):
        assert type(got) is type(want) and len(got) == len(want), f"{where}: {got!r} != {want!r}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_identical(g, w, f"{where}[{i}]")
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def assert_same_training(interrupted, straight) -> None:
    for group in ("training", "validation"):
        assert interrupted.metric_posts(group) == straight.metric_posts(group), f"{group} metrics differ"
    assert interrupted.completed == straight.completed
    done, expected = final_state(interrupted), final_state(straight)
    assert done["trainer_state"]["batches_trained"] == LENGTH
    for part in ("models_state_dict", "optimizers_state_dict", "lr_schedulers_state_dict", "rng_state"):
        assert_identical(done[part], expected[part], part)


LOADERS = ["torch", "torch_generator", "harness", "harness_sampler"]


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize(
    ("preempt_at", "stops"),
    [
        pytest.param([10], [12], id="mid-epoch"),  # stops after batch 12 of 40: 4 into epoch 1
        pytest.param([22], [24], id="epoch-end"),  # stops after batch 24: the end of epoch 2
        pytest.param([4, 28], [6, 30], id="twice"),
    ],
)
def test_a_preempted_and_resumed_trial_is_bitwise_the_uninterrupted_one(
    plane_kit, model_def: ModuleType, loader: str, preempt_at: list[int], stops: list[int]
) -> None:
    straight, straight_runs = train(plane_kit, model_def, loader, [])
    assert straight_runs == [list(range(LENGTH))]

    interrupted, runs = train(plane_kit, model_def, loader, preempt_at)
    bounds = [0, *stops, LENGTH]
    assert runs == [list(range(a, b)) for a, b in zip(bounds, bounds[1:], strict=False)]
    assert [c["steps_completed"] for c in interrupted.checkpoint_reports()] == [*stops, LENGTH]
    assert_same_training(interrupted, straight)


@pytest.mark.filterwarnings(
    "ignore:Detected call of `lr_scheduler.step\\(\\)` before"
)  # per batch, by design
def test_a_trial_preempted_between_two_optimizer_steps_keeps_its_accumulated_gradients(
    plane_kit, model_def: ModuleType
) -> None:
    """With `aggregation_frequency: 2` the optimizers step after every second batch; a trial stopped
    after batch 3 (an odd count) resumes with the gradients of its third batch still to be applied."""
    config = {**CONFIG, "optimizations": {"aggregation_frequency": 2}}
    straight, _ = train(plane_kit, model_def, "harness", [], config)
    interrupted, runs = train(plane_kit, model_def, "harness", [2], config)
    assert [len(r) for r in runs] == [3, LENGTH - 3]
    assert_same_training(interrupted, straight)


def test_an_rng_the_trial_keeps_itself_resumes_through_a_callbacks_state(
    plane_kit, model_def: ModuleType
) -> None:
    """The trainer does not see a numpy Generator of the trial's own; kept in a callback's state_dict(),
    as the trainer's docstring advises, it resumes exactly too."""

    class OwnGenerator(model_def.ResumeTrial):  # type: ignore[misc, name-defined]
        def __init__(self, context: Any) -> None:
            super().__init__(context)
            self.rng = np.random.default_rng(context.get_trial_seed())

        def build_callbacks(self) -> dict[str, PyTorchCallback]:
            trial = self

            class KeepsTheGenerator(PyTorchCallback):
                def state_dict(self) -> dict[str, Any]:
                    return {"bit_generator": trial.rng.bit_generator.state}

                def load_state_dict(self, state: dict[str, Any]) -> None:
                    trial.rng.bit_generator.state = state["bit_generator"]

            return {"own_generator": KeepsTheGenerator()}

        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
            metrics = super().train_batch(batch, epoch_idx, batch_idx)
            return {**metrics, "own_draw": float(self.rng.standard_normal())}

    straight, _ = train(plane_kit, model_def, "torch", [], trial_class=OwnGenerator)
    interrupted, _ = train(plane_kit, model_def, "torch", [10], trial_class=OwnGenerator)
    assert "own_draw" in straight.metric_posts("training")[0][1]
    assert_same_training(interrupted, straight)


def test_the_comparison_notices_a_resume_that_loses_the_rng_states(plane_kit, model_def: ModuleType) -> None:
    """The check above is not vacuous: the same resume from a checkpoint stripped of its RNG states
    reports other metrics."""
    straight, _ = train(plane_kit, model_def, "harness", [])
    plane = plane_kit.SearcherPlane([LENGTH], config=CONFIG)
    plane_kit.platform_env({"global_batch_size": 8, "loader": "harness", "preempt_at": [10]}, seed=7)
    with init(**plane.init_options()) as context:
        Trainer(model_def.ResumeTrial(context), context).fit()
    body = plane.checkpoint_reports()[-1]
    state = final_state(plane)
    del state["rng_state"]
    buffer = io.BytesIO()
    torch.save(state, buffer)
    plane.s3[f"bucket/checkpoints/{plane.experiment_id}/{plane.trial_id}/{body['uuid']}/state_dict.pth"] = (
        buffer.getvalue()
    )
    plane_kit.monkeypatch.setenv("STRATUS_LATEST_CHECKPOINT", body["uuid"])
    with init(**plane.init_options()) as context:
        Trainer(model_def.ResumeTrial(context), context).fit()
    assert plane.completed and plane.metric_posts("training")[:4] == straight.metric_posts("training")[:4]
    assert plane.metric_posts("training")[4:] != straight.metric_posts("training")[4:]


class CountedReads(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """0..n-1, counting reads and drawing from torch's RNG on each (as a random transform would)."""

    def __init__(self, n: int) -> None:
        self.n, self.reads = n, 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        self.reads += 1
        return torch.tensor(float(i)) + torch.rand(()) / 1000


class CountedStream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """n records with no length: their order (and noise) is drawn from torch's RNG at each epoch's start."""

    def __init__(self, n: int) -> None:
        self.n, self.reads = n, 0

    def __iter__(self) -> Iterator[Any]:
        for i in torch.randperm(self.n).tolist():
            self.reads += 1
            yield torch.tensor(float(i)) + torch.rand(()) / 1000


def trained(stream: Any, batches: int) -> list[Any]:
    """`batches` batches of `stream`, each followed by a draw from torch's RNG (as dropout would)."""
    return [(next(stream), torch.rand(())) for _ in range(batches)]


def assert_same_batches(got: list[Any], want: list[Any]) -> None:
    assert len(got) == len(want)
    for (batch, draw), (want_batch, want_draw) in zip(got, want, strict=True):
        assert torch.equal(batch, want_batch) and torch.equal(draw, want_draw)


@pytest.mark.parametrize(
    ("dataset", "shuffle", "skip", "read_again"),
    [
        pytest.param(CountedReads, True, 11, 3, id="mid-epoch"),
        pytest.param(CountedReads, True, 12, 0, id="epoch-end"),
        pytest.param(CountedReads, True, 13, 1, id="next-epoch"),
        pytest.param(CountedStream, False, 11, 3, id="iterable-mid-epoch"),
        pytest.param(CountedStream, False, 12, 4, id="iterable-epoch-end"),  # no length: read again
    ],
)
def test_a_plain_loader_is_read_again_from_its_epochs_start_only(
    dataset: Any, shuffle: bool, skip: int, read_again: int
) -> None:
    """A torch loader of 4 batches an epoch, resumed at batch `skip`: the batches and the RNG draws that
    follow are the uninterrupted stream's, and only this epoch's trained batches are read again (none at
    an epoch's end when the loader has a length)."""
    from stratus.harness.pytorch._plain_loader import PlainLoaderStream
    from stratus.harness.pytorch._rng import rng_state, set_rng_state

    torch.manual_seed(3)
    data = dataset(16)
    loader = torch.utils.data.DataLoader(data, batch_size=4, shuffle=shuffle)
    straight = PlainLoaderStream(loader, 0)
    trained(straight, skip)
    position, at_checkpoint = straight.position(), rng_state()
    expected = trained(straight, 9)

    set_rng_state(at_checkpoint)
    data.reads = 0
    assert_same_batches(trained(PlainLoaderStream(loader, skip, position), 9), expected)
    assert data.reads == 4 * (read_again + 9)


def test_our_loaders_batches_carry_seeds_of_their_number_for_the_workers() -> None:
    """A worker reads batch n of `stratus.harness.pytorch.DataLoader` under RNGs seeded from (seed, rank, n) (the
    worker processes themselves run in tests/integration/test_exact_resume_process.py)."""
    from stratus.harness.pytorch import DataLoader
    from stratus.harness.pytorch._workers import SeededPerBatch

    loader = DataLoader(CountedReads(16), batch_size=4, shuffle=True, num_workers=2)

    def seeds(skip: int, rank: int = 0) -> list[tuple[list[int], int]]:
        sampler = loader._batch_sampler(seed=7, repeat=True, skip=skip, num_replicas=2, rank=rank)
        return [(list(b), b.seed) for b in itertools.islice(iter(sampler), 6)]  # type: ignore[attr-defined]

    assert seeds(3) == seeds(0)[3:] + seeds(6)[:3]  # from batch 3 on: the same batches and seeds
    assert len({s for _, s in seeds(0) + seeds(0, rank=1)}) == 12  # a seed per batch and rank
    assert isinstance(loader.get_data_loader(seed=7).dataset, SeededPerBatch)
    data = CountedReads(16)
    torch.manual_seed(0)
    in_process = SeededPerBatch(data).__getitems__(seeds(0)[0][0])
    torch.manual_seed(0)
    assert all(
        torch.equal(a, data[i]) for a, i in zip(in_process, seeds(0)[0][0], strict=True)
    )  # not reseeded


def test_a_checkpoint_without_the_loaders_position_reads_from_the_first_epoch() -> None:
    """A checkpoint written before positions were noted: the stream reads every batch since the first
    (exact for a loader whose order does not depend on the RNGs)."""
    from stratus.harness.pytorch._plain_loader import PlainLoaderStream

    data = CountedReads(16)
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    data.reads = 0
    resumed = PlainLoaderStream(loader, 10, None)
    assert next(resumed).round().tolist() == [8.0, 9.0, 10.0, 11.0]  # batch 10: the third of epoch 2
    assert data.reads == 4 * 11


# ---- a Core API script (Determined's `det.core`), written as a careful user would -------------------------

CORE_CONFIG = {"searcher": {"name": "single", "metric": "val_loss", "max_length": {"batches": LENGTH}}}


@pytest.fixture
def core_train(compat: None) -> ModuleType:
    spec = importlib.util.spec_from_file_location("exact_resume_core_train", DATA / "core_train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def train_core(plane_kit, core_train: ModuleType, preempt_at: list[int]) -> tuple[Any, list[list[int]]]:
    """Like `train`, for the Core API script (preempted by SIGTERM at each batch of `preempt_at`)."""
    from stratus import harness

    plane = plane_kit.SearcherPlane([LENGTH], config=CORE_CONFIG)
    plane_kit.platform_env({}, seed=11)
    runs: list[list[int]] = []
    while not plane.completed:
        assert len(runs) <= len(preempt_at), f"the script did not finish after {len(runs)} runs"
        reports = plane.checkpoint_reports()
        if reports:
            plane_kit.monkeypatch.setenv("STRATUS_LATEST_CHECKPOINT", reports[-1]["uuid"])
        with harness.core.init(**plane.init_options()) as core_context:
            runs.append(core_train.main(core_context, frozenset(preempt_at)))
    return plane, runs


def core_final_state(plane) -> dict[str, Any]:
    body = plane.checkpoint_reports()[-1]
    key = f"bucket/checkpoints/{plane.experiment_id}/{plane.trial_id}/{body['uuid']}/state.pt"
    state: dict[str, Any] = torch.load(io.BytesIO(plane.s3[key]), weights_only=False)
    return state


@pytest.mark.parametrize(
    ("preempt_at", "stops"),
    [
        pytest.param([10], [12], id="mid-epoch"),
        pytest.param([22], [24], id="epoch-end"),
        pytest.param([4, 28], [6, 30], id="twice"),
    ],
)
def test_a_core_api_script_that_saves_its_rng_states_resumes_bitwise(
    plane_kit, core_train: ModuleType, preempt_at: list[int], stops: list[int]
) -> None:
    straight, straight_runs = train_core(plane_kit, core_train, [])
    assert straight_runs == [list(range(LENGTH))]

    interrupted, runs = train_core(plane_kit, core_train, preempt_at)
    bounds = [0, *stops, LENGTH]
    assert runs == [list(range(a, b)) for a, b in zip(bounds, bounds[1:], strict=False)]
    for group in ("training", "validation"):
        assert interrupted.metric_posts(group) == straight.metric_posts(group), f"{group} metrics differ"
    assert interrupted.completed == straight.completed
    assert_identical(core_final_state(interrupted), core_final_state(straight), "state.pt")


def test_the_core_api_example_resumes_bitwise(compat: None, plane_kit) -> None:
    """examples/determined_core/train.py preempted by the heartbeat's answer at its first report (batch
    25) and resumed ends as the uninterrupted run: same reports, same weights, optimizer and RNG states."""
    from stratus import harness

    spec = importlib.util.spec_from_file_location(
        "exact_resume_example_core", DATA.parents[2] / "examples" / "determined_core" / "train.py"
    )
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    hparams = {"learning_rate": 0.01, "hidden_size": 32, "batch_size": 16}
    config = {"searcher": {"name": "single", "metric": "validation_accuracy"}}

    plane_kit.platform_env(hparams)
    straight = plane_kit.SearcherPlane([100], config=config)
    with harness.core.init(**straight.init_options()) as core_context:
        example.main(core_context)

    plane_kit.platform_env(hparams)
    interrupted = plane_kit.SearcherPlane([100], config=config)
    interrupted.preempt = True
    with harness.core.init(**interrupted.init_options(heartbeat_interval_s=0.01)) as core_context:
        assert interrupted.wait_heartbeats(2)  # the first answer has latched preemption
        example.main(core_context)
    assert [c["steps_completed"] for c in interrupted.checkpoint_reports()] == [25]
    interrupted.preempt = False
    plane_kit.monkeypatch.setenv("STRATUS_LATEST_CHECKPOINT", interrupted.checkpoint_reports()[0]["uuid"])
    with harness.core.init(**interrupted.init_options()) as core_context:
        example.main(core_context)

    for group in ("training", "validation"):
        assert interrupted.metric_posts(group) == straight.metric_posts(group), f"{group} metrics differ"
    assert interrupted.completed == straight.completed
    assert_identical(core_final_state(interrupted), core_final_state(straight), "state.pt")
