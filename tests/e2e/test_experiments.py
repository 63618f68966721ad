"""End to end on the embedded local stack: the real CLI, API, queues, state machine, agent and PyTorch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def test_digits_runs_to_completed_with_a_checkpoint(det, local_stack):
    result = det("experiment", "create", "examples/digits/const.yaml", "examples/digits", "-f")
    assert result.code == 0, result.out + result.err
    experiment_id = det.created_experiment_id(result.out)
    assert f"Experiment {experiment_id} COMPLETED" in result.out + result.err
    assert "validation_accuracy" in result.out  # the trial's own log lines were followed

    described = det.describe_experiment(experiment_id)
    assert described["experiment"]["state"] == "COMPLETED"
    (trial,) = described["trials"]
    assert trial["state"] == "COMPLETED"
    assert trial["latest_validation"]["validation_accuracy"] > 0.9
    checkpoint = trial["latest_checkpoint"]
    assert checkpoint["steps_completed"] == trial["total_batches"] > 0
    key = checkpoint["uri"].split("/", 3)[3] + "metadata.json"
    metadata = json.loads(local_stack.s3().get_object(Bucket=local_stack.bucket, Key=key)["Body"].read())
    assert metadata["steps_completed"] == checkpoint["steps_completed"]

    logs = det("trial", "logs", str(trial["id"]))
    assert "batch 600: validation_accuracy" in logs.out
    # No credential reaches the logs: not the run token, not a presigned URL's signature.
    assert "X-Amz-Signature" not in logs.out and "STRATUS_RUN_TOKEN" not in logs.out

    listed = det("experiment", "list")
    assert listed.code == 0
    assert any(
        line.split("|")[0].strip() == str(experiment_id) and "COMPLETED" in line
        for line in listed.out.splitlines()
    )


def test_a_failing_entrypoint_ends_in_error_with_its_log(det, tmp_path: Path):
    (tmp_path / "fail.yaml").write_text(
        "name: failing\n"
        "entrypoint: echo 'about to fail on purpose'; exit 3\n"
        "searcher: {name: single, metric: loss, max_length: 1}\n"
        "max_restarts: 0\n"
    )
    result = det("experiment", "create", str(tmp_path / "fail.yaml"), str(tmp_path), "-f")
    assert result.code != 0
    experiment_id = det.created_experiment_id(result.out)
    described = det.describe_experiment(experiment_id)
    assert described["experiment"]["state"] == "ERROR"
    (trial,) = described["trials"]
    assert trial["state"] == "ERROR"
    assert trial["exit"]["code"] == 3
    logs = det("trial", "logs", str(trial["id"]))
    assert logs.code == 0
    assert "about to fail on purpose" in logs.out


def test_an_invalid_config_is_refused_and_nothing_is_created(det, local_stack, tmp_path: Path):
    (tmp_path / "bad.yaml").write_text(
        "entrypoint: python3 train.py\n"
        "searcher: {name: random, metric: loss, max_trials: 0, max_length: 10}\n"
        "resources: {slot_per_trial: 2}\n"
    )
    (tmp_path / "train.py").write_text("print('never shipped: unique 9f1c2e')\n")
    before = det("experiment", "list", "--json")
    result = det("experiment", "create", str(tmp_path / "bad.yaml"), str(tmp_path))
    assert result.code != 0
    assert "searcher.max_trials" in result.err
    assert "slots_per_trial" in result.err  # the typo's suggestion
    after = det("experiment", "list", "--json")
    assert json.loads(after.out) == json.loads(before.out)
    keys = local_stack.s3().list_objects_v2(Bucket=local_stack.bucket, Prefix="contexts/").get("Contents", [])
    for obj in keys:
        body = local_stack.s3().get_object(Bucket=local_stack.bucket, Key=obj["Key"])["Body"].read()
        assert b"unique 9f1c2e" not in body  # compressed, so also check we never uploaded it:
    assert "Uploaded context" not in result.err + result.out


def test_unknown_ids_get_one_clear_line(det):
    result = det("trial", "describe", "987654")
    assert result.code != 0
    assert "987654" in result.err and len(result.err.strip().splitlines()) == 1


def test_the_api_publishes_its_openapi_document(local_stack, repo_root):
    import httpx

    document = httpx.get(f"{local_stack.api_url}/openapi.json").json()
    assert document["openapi"].startswith("3.")
    assert "post" in document["paths"]["/experiments"]
    assert (repo_root / "docs" / "contracts.md").exists()


CRASH_ONCE = """
import json
import os

from stratus import harness

with harness.init() as core:
    info = harness.get_cluster_info()
    start = 0
    if info.latest_checkpoint:
        with core.checkpoint.restore_path(info.latest_checkpoint) as path:
            start = json.loads((path / "state.json").read_text())["step"]
        print(f"resumed at step {start}", flush=True)
    for step in range(start + 1, 11):
        core.train.report_training_metrics(steps_completed=step, metrics={"loss": 1.0 / step})
        if step % 5 == 0:
            with core.checkpoint.store_path({"steps_completed": step}) as (path, uuid):
                (path / "state.json").write_text(json.dumps({"step": step}))
        if step == 5 and info.run_id.endswith(".1"):
            print("crashing on purpose after step 5", flush=True)
            os._exit(17)
"""


def test_a_crashed_trial_restarts_from_its_latest_checkpoint(det, tmp_path: Path):
    result, trial = det.follow_experiment(
        tmp_path,
        "name: crash-once\n"
        "entrypoint: python3 crash_once.py\n"
        "searcher: {name: single, metric: loss, max_length: 10}\n"
        "max_restarts: 1\n",
        {"crash_once.py": CRASH_ONCE},
    )
    assert result.code == 0, result.out + result.err
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 1
    logs = det("trial", "logs", str(trial["id"])).out
    assert logs.index("crashing on purpose after step 5") < logs.index("resumed at step 5")
    shown = det("trial", "describe", str(trial["id"]), "--metrics", "--json")
    assert shown.code == 0
    training = json.loads(shown.out)["metrics"]["training"]
    assert [m["steps_completed"] for m in training] == list(range(1, 11))  # no step lost, none twice


def test_digits_with_adaptive_asha_completes_and_resumes_promoted_trials(det, digits_adaptive):
    result, experiment_id = digits_adaptive  # `det experiment create ... -f` exited 0 (the fixture checks)
    assert f"Experiment {experiment_id} COMPLETED" in result.out + result.err
    described = det.describe_experiment(experiment_id)
    assert described["experiment"]["state"] == "COMPLETED"
    trials = described["trials"]
    assert len(trials) == 6 and all(t["state"] == "COMPLETED" for t in trials)
    lengths = sorted(t["total_batches"] for t in trials)
    assert (
        lengths[-1] == 400 and lengths[0] < 400
    )  # one trial went the whole way, others were stopped at a rung
    full = [t for t in trials if t["total_batches"] == 400]
    assert all(not t["early_stopped"] for t in full)
    assert any(t["early_stopped"] for t in trials)
    assert max(t["best_validation"] for t in trials) > 0.9


def _runs_to_completion(det, *args: str, timeout: float = 300) -> dict:
    result = det("experiment", "create", *args, "-f", timeout=timeout)
    assert result.code == 0, result.out + result.err
    described = det.describe_experiment(det.created_experiment_id(result.out))
    assert described["experiment"]["state"] == "COMPLETED"
    return described


def test_a_determined_core_api_script_runs_unchanged(det):
    described = _runs_to_completion(det, "examples/determined_core/const.yaml", "examples/determined_core")
    (trial,) = described["trials"]
    assert trial["state"] == "COMPLETED" and trial["latest_checkpoint"] is not None
    assert trial["best_validation"] > 0.9


def test_a_determined_pytorchtrial_runs_unchanged(det):
    described = _runs_to_completion(det, "examples/determined_trial/const.yaml", "examples/determined_trial")
    (trial,) = described["trials"]
    assert trial["state"] == "COMPLETED" and trial["latest_checkpoint"] is not None
    assert trial["total_batches"] >= 10 * 1438 // 32  # ten epochs of 1438 records in batches of 32
    assert trial["best_validation"] > 0.9


def test_an_nni_experiment_and_its_trial_code_run_unchanged(det):
    # No CONTEXT argument: NNI's codeDir is the context, as in `nnictl create --config config.yml`.
    result = det("experiment", "create", "examples/nni_digits/config.yml", "-f", timeout=300)
    assert result.code == 0, result.out + result.err
    assert "trainingServicePlatform: ignored" in result.err  # a warning per field with no equivalent
    assert "maxExecDuration: the experiment's time limit, 3600 s" in result.err  # kept, and said so
    described = det.describe_experiment(det.created_experiment_id(result.out))
    assert described["experiment"]["state"] == "COMPLETED"
    assert described["experiment"]["searcher_type"] == "tpe"
    trials = described["trials"]
    assert len(trials) == 4 and all(t["state"] == "COMPLETED" for t in trials)
    assert max(t["best_validation"] for t in trials) > 0.8
    shown = det("trial", "describe", str(trials[0]["id"]))
    assert "NNI Status" in shown.out and "SUCCEEDED" in shown.out


def test_test_mode_runs_one_batch_and_checks_every_step(det):
    result = det(
        "experiment", "create", "--test-mode", "examples/digits/const.yaml", "examples/digits", timeout=240
    )
    assert result.code == 0, result.out + result.err
    assert "passed" in result.out
    for step in ("scheduling", "training", "validation", "checkpointing"):
        assert f"[✓] {step}" in result.err


def test_local_test_mode_needs_no_control_plane(det, tmp_path: Path):
    env_master = "http://127.0.0.1:9"  # nothing listens there: the local test must not call the API
    result = det(
        "-m",
        env_master,
        "experiment",
        "create",
        "--local",
        "--test-mode",
        "examples/determined_trial/const.yaml",
        "examples/determined_trial",
        timeout=240,
    )
    assert result.code == 0, result.out + result.err
    assert "Local test passed" in result.out
