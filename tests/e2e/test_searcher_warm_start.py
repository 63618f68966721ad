"""Issue 28, Determined's warm start end to end (`searcher.source_checkpoint_uuid`, `source_trial_id`):
the PyTorchTrial example trains a while and checkpoints; an experiment warm-started from that checkpoint
validates first (`perform_initial_validation`, before its first batch) exactly as the source's model did
at that checkpoint, and a cold one does not; the warm trial counts its own batches from 0. A source that
does not exist is refused at create, naming it, and the source of an experiment that has not ended cannot
be deleted."""

from __future__ import annotations

import json
import uuid as uuids
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

CONTEXT = "examples/determined_trial"
SOURCE_BATCHES = 40  # ~0.8 validation accuracy on digits, far from an untrained model's ~0.1


def _config(name: str, batches: int, *searcher_lines: str, initial_validation: bool = False) -> str:
    """The example's model with a fixed length in batches, validated (and checkpointed) at its end."""
    lines = [
        f"name: {name}",
        "entrypoint: model_def:DigitsTrial",
        "hyperparameters: {global_batch_size: 32, learning_rate: 0.003, hidden_size: 64, dropout: 0.1}",
        "records_per_epoch: 1438",
        "searcher:",
        "  name: single",
        "  metric: validation_accuracy",
        "  smaller_is_better: false",
        f"  max_length: {{batches: {batches}}}",
        *(f"  {line}" for line in searcher_lines),
        f"perform_initial_validation: {'true' if initial_validation else 'false'}",
        "max_restarts: 0",
    ]
    return "\n".join(lines) + "\n"


def _create(det: Any, folder: Path, name: str, config: str, *flags: str) -> Any:
    path = folder / f"{name}.yaml"
    path.write_text(config)
    return det("experiment", "create", str(path), CONTEXT, *flags, timeout=400)


def _completed_trial(det: Any, result: Any) -> dict:
    assert result.code == 0, result.out + result.err
    described = det.describe_experiment(det.created_experiment_id(result.out))
    assert described["experiment"]["state"] == "COMPLETED", described["experiment"]
    (trial,) = described["trials"]
    return trial


def _validations(det: Any, trial_id: int) -> list[tuple[int, dict]]:
    shown = det.read("trial", "describe", str(trial_id), "--metrics", "--json")
    assert shown.code == 0, shown.err
    return [(m["steps_completed"], m["metrics"]) for m in json.loads(shown.out)["metrics"]["validation"]]


def _experiment_ids(det: Any) -> list[int]:
    listed = det.read("experiment", "list", "--all", "--json")
    assert listed.code == 0, listed.err
    return [e["id"] for e in json.loads(listed.out)["experiments"]]


@pytest.fixture(scope="module")
def source(det_runner: Any, local_stack: Any, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The source experiment's one trial (COMPLETED), trained `SOURCE_BATCHES` batches, with its latest
    checkpoint there and its validation there."""
    det = det_runner(local_stack.api_url)
    folder = tmp_path_factory.mktemp("warm-source")
    trial = _completed_trial(det, _create(det, folder, "source", _config("source", SOURCE_BATCHES), "-f"))
    checkpoint = trial["latest_checkpoint"]
    assert checkpoint["steps_completed"] == SOURCE_BATCHES
    (final,) = [m for steps, m in _validations(det, trial["id"]) if steps == SOURCE_BATCHES]
    return {"trial": trial["id"], "uuid": checkpoint["uuid"], "validation": final}


@pytest.mark.parametrize("field", ["source_checkpoint_uuid", "source_trial_id"])
def test_a_warm_started_experiments_first_validation_is_the_source_models(
    det: Any, tmp_path: Path, source: dict, field: str
) -> None:
    value = source["uuid"] if field == "source_checkpoint_uuid" else source["trial"]
    warm = _config("warm", 10, f"{field}: {value}", initial_validation=True)
    trial = _completed_trial(det, _create(det, tmp_path, "warm", warm, "-f"))
    assert trial["warm_start_trial_id"] is None  # PBT's parent; this trial's source is the experiment's
    validations = _validations(det, trial["id"])
    assert [steps for steps, _ in validations] == [0, 10]  # its own batches, counted from 0
    first = validations[0][1]
    assert first["validation_accuracy"] == source["validation"]["validation_accuracy"]
    assert first["validation_loss"] == source["validation"]["validation_loss"]


def test_a_cold_experiments_first_validation_is_not(det: Any, tmp_path: Path, source: dict) -> None:
    trial = _completed_trial(
        det, _create(det, tmp_path, "cold", _config("cold", 10, initial_validation=True), "-f")
    )
    (steps, first), _ = _validations(det, trial["id"])
    assert steps == 0
    assert first["validation_accuracy"] != source["validation"]["validation_accuracy"]
    assert first["validation_accuracy"] < 0.5 < source["validation"]["validation_accuracy"]


def test_a_missing_source_is_refused_by_name(det: Any, tmp_path: Path, source: dict) -> None:
    missing = str(uuids.uuid4())
    listed = _experiment_ids(det)
    result = _create(det, tmp_path, "missing", _config("missing", 10, f"source_checkpoint_uuid: {missing}"))
    assert result.code != 0
    assert f"searcher.source_checkpoint_uuid {missing}: no such checkpoint" in result.err
    assert _experiment_ids(det) == listed  # nothing created
    result = _create(det, tmp_path, "no-trial", _config("no-trial", 10, "source_trial_id: 99999"))
    assert result.code != 0 and "searcher.source_trial_id 99999: no such trial" in result.err


def test_the_source_of_an_experiment_that_has_not_ended_is_not_deleted(
    det: Any, tmp_path: Path, source: dict
) -> None:
    uuid = source["uuid"]
    paused = _create(
        det, tmp_path, "paused", _config("paused", 10, f"source_checkpoint_uuid: {uuid}"), "--paused"
    )
    assert paused.code == 0, paused.out + paused.err
    experiment_id = det.created_experiment_id(paused.out)
    refused = det("checkpoint", "delete", uuid, "--yes")
    assert refused.code != 0
    assert f"checkpoint {uuid} cannot be deleted: experiment {experiment_id} (PAUSED) starts its trials" in (
        refused.err
    )
    described = det.read("checkpoint", "describe", uuid, "--json")
    assert described.code == 0 and json.loads(described.out)["checkpoint"]["state"] == "COMPLETED", (
        described.out
    )
    assert det("experiment", "kill", str(experiment_id)).code == 0
