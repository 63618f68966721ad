"""The read-side and end-of-life verbs on the local stack, through the real CLI: a tiny Core API experiment
runs to completion (`det experiment wait` exits 0), `list-trials` and `list-checkpoints --best 1` show it,
`det checkpoint download` fetches the best checkpoint's file through presigned URLs and it loads, and
`det experiment delete --yes` removes it (its objects too), after which `describe` is a 404."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.e2e

# Two validations and two checkpoints; the later one has the smaller loss, so it is the best.
TRAIN = """
import json
import determined as det

with det.core.init() as core:
    for step in (5, 10):
        core.train.report_validation_metrics(steps_completed=step, metrics={"loss": 1.0 / step})
        with core.checkpoint.store_path({"steps_completed": step}) as (path, uuid):
            (path / "state.json").write_text(json.dumps({"step": step}))
"""
CONFIG = """
name: lifecycle-verbs
entrypoint: python3 train.py
searcher: {name: single, metric: loss, smaller_is_better: true, max_length: 10}
checkpoint_storage: {save_trial_latest: 2, save_trial_best: 1, save_experiment_best: 0}
max_restarts: 0
"""


def test_list_download_wait_and_delete_an_experiment(det, local_stack, tmp_path: Path, table_rows):
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "train.py").write_text(TRAIN)
    (tmp_path / "config.yaml").write_text(CONFIG)
    created = det("experiment", "create", str(tmp_path / "config.yaml"), str(context))
    assert created.code == 0, created.out + created.err
    experiment_id = det.created_experiment_id(created.out)

    waited = det("experiment", "wait", str(experiment_id), "--polling-interval", "1")
    assert waited.code == 0, waited.out + waited.err
    assert f"Experiment {experiment_id} terminated with state COMPLETED" in waited.out

    trials = det("experiment", "list-trials", str(experiment_id))
    assert trials.code == 0, trials.err
    (header, row) = table_rows(trials.out)[:2]
    assert header == ["Trial ID", "State", "H-Params", "Started", "Ended", "# of Batches"]
    assert (row[1], row[5]) == ("COMPLETED", "10")

    listed = det("experiment", "list-checkpoints", str(experiment_id), "--json")
    assert len(json.loads(listed.out)["checkpoints"]) == 2
    best = det("experiment", "list-checkpoints", str(experiment_id), "--best", "1")
    assert best.code == 0, best.err
    rows = table_rows(best.out)
    assert rows[0][:5] == ["Trial ID", "# of Batches", "State", "Validation Metric", "UUID"]
    assert (rows[1][1], rows[1][2], rows[1][3]) == ("10", "COMPLETED", "0.1")
    uuid = rows[1][4]

    downloaded = det("checkpoint", "download", uuid, "-o", str(tmp_path / "best"))
    assert downloaded.code == 0, downloaded.err
    assert json.loads((tmp_path / "best" / "state.json").read_text()) == {"step": 10}
    assert json.loads((tmp_path / "best" / "metadata.json").read_text())["steps_completed"] == 10

    # Determined's other read verbs on the same experiment: its config, its first trial's logs, and the
    # best checkpoint of the experiment and the latest of the trial downloaded by uuid folder.
    config = det("experiment", "config", str(experiment_id))
    assert config.code == 0 and yaml.safe_load(config.out)["checkpoint_storage"]["save_trial_latest"] == 2
    logs = det("experiment", "logs", str(experiment_id))
    trial_id = int(table_rows(trials.out)[1][0])
    assert logs.code == 0 and f"det trial logs -f {trial_id}" in logs.err, logs.err
    top = det("experiment", "download", str(experiment_id), "--top-n", "1", "-o", str(tmp_path / "top"), "-q")
    assert top.code == 0 and top.out.strip() == str(tmp_path / "top" / uuid), top.out + top.err
    assert json.loads((tmp_path / "top" / uuid / "state.json").read_text()) == {"step": 10}
    latest = det("trial", "download", str(trial_id), "--latest", "-o", str(tmp_path / "latest"), "-q")
    assert latest.code == 0, latest.err
    assert json.loads((tmp_path / "latest" / "state.json").read_text()) == {"step": 10}

    # The other checkpoint (not the best) deleted by uuid: its files go, its record says DELETED.
    (other,) = [c["uuid"] for c in json.loads(listed.out)["checkpoints"] if c["uuid"] != uuid]
    removed = det("checkpoint", "delete", other, "--yes")
    assert (removed.code, removed.out.strip()) == (0, f"Deleted checkpoints {other}"), removed.err
    assert json.loads(det("checkpoint", "describe", other, "--json").out)["checkpoint"]["state"] == "DELETED"
    refused = det("checkpoint", "download", other, "-o", str(tmp_path / "gone"))
    assert refused.code != 0 and f"checkpoint {other} is DELETED" in refused.err

    deleted = det("experiment", "delete", str(experiment_id), "--yes")
    assert (deleted.code, deleted.out.strip()) == (0, f"Successfully deleted experiment {experiment_id}")
    gone = det("experiment", "describe", str(experiment_id))
    assert gone.code != 0 and f"experiment {experiment_id} does not exist" in gone.err
    prefix = f"checkpoints/{experiment_id}/"
    left = local_stack.s3().list_objects_v2(Bucket=local_stack.bucket, Prefix=prefix).get("Contents", [])
    assert left == []
