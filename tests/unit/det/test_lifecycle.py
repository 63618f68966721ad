"""`det experiment list-trials | list-checkpoints | delete | wait` and `det checkpoint list | describe |
download` against the fake API of tests/unit/det/fakes.py, with this module's routes and a fake S3 added
in front of it (the `lifecycle_api` fixture)."""

from __future__ import annotations

import io
import json
import re
from typing import Any

import httpx
import pytest

UUID = "00000000-0000-4000-8000-000000000001"


def _checkpoint(uuid: str = UUID, **fields: Any) -> dict[str, Any]:
    return {
        "uuid": uuid,
        "trial_id": 4,
        "experiment_id": 1,
        "steps_completed": 100,
        "state": "COMPLETED",
        "uri": f"s3://bucket/checkpoints/1/4/{uuid}/",
        "resources": {"model.pt": 2048, "metadata.json": 20},
        "metadata": {"steps_completed": 100},
        "report_time": "2024-05-01T12:00:00+00:00",
        "validation_metrics": {"loss": 0.25},
        "searcher_metric_value": 0.25,
    } | fields


class TtyInput(io.StringIO):
    """What a user types on a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def lifecycle_api(api):
    """The fake API, answering the lifecycle routes too; `api.s3` holds the files a download reads,
    `api.deleted` the experiments deleted, `api.states` the states `GET /experiments/1` goes through."""
    api.s3 = {"model.pt": b"w" * 2048, "metadata.json": b'{"steps_completed": 100}'}
    api.deleted = []
    api.file_names = list(api.s3)
    api.states = []
    fallback = api.handle

    def handle(request: httpx.Request) -> httpx.Response:
        method, path = request.method, request.url.path
        if request.url.host == "s3.download":
            api.requests.append((method, path, {}, None))
            return httpx.Response(200, content=api.s3[path.rsplit("/", 1)[-1]])
        if (method, path) == ("GET", "/experiments/1") and api.states:
            api.requests.append((method, path, {}, None))
            state = api.states.pop(0) if len(api.states) > 1 else api.states[0]
            return httpx.Response(200, json={"experiment": api.experiment(1, state=state), "trials": []})
        if re.fullmatch(r"/experiments/\d+/trials", path):
            api.requests.append((method, path, dict(request.url.params), None))
            return httpx.Response(200, json={"trials": [api.trial(4, 1, total_batches=100), api.trial(5, 1)]})
        if re.fullmatch(r"/experiments/\d+/checkpoints", path):
            api.requests.append((method, path, dict(request.url.params), None))
            listed = [_checkpoint(), _checkpoint(UUID[:-1] + "2", trial_id=5, searcher_metric_value=0.5)]
            best = int(request.url.params.get("best", 0)) or len(listed)
            return httpx.Response(
                200, json={"searcher_metric": "loss", "smaller_is_better": True, "checkpoints": listed[:best]}
            )
        if method == "DELETE" and (m := re.fullmatch(r"/experiments/(\d+)", path)):
            api.requests.append((method, path, {}, None))
            eid = int(m.group(1))
            if api.experiments[eid]["state"] == "ACTIVE":
                return httpx.Response(
                    409, json={"error": "Conflict", "message": f"experiment {eid} is ACTIVE; cancel it first"}
                )
            api.deleted.append(eid)
            return httpx.Response(200, json={"experiment_id": eid, "deleted": eid != 3, "trials_left": 7})
        if path == f"/checkpoints/{UUID}/files":
            api.requests.append((method, path, {}, None))
            urls = {name: f"https://s3.download/bucket/{name}?X-Amz-Signature=s" for name in api.file_names}
            return httpx.Response(200, json={"checkpoint": _checkpoint(), "urls": urls})
        if path == f"/checkpoints/{UUID}":
            return httpx.Response(200, json={"checkpoint": _checkpoint()})
        return fallback(request)

    api.transport = httpx.MockTransport(handle)
    return api


def test_list_trials_shows_determineds_columns(lifecycle_api, table_rows) -> None:
    result = lifecycle_api.run("experiment", "lt", "1")

    assert result.code == 0, result.err
    rows = table_rows(result.out)
    assert rows[0] == ["Trial ID", "State", "H-Params", "Started", "Ended", "# of Batches"]
    assert [rows[1][0], rows[1][1], rows[1][5]] == ["4", "RUNNING", "100"]
    as_json = lifecycle_api.run("experiment", "list-trials", "1", "--json")
    assert [t["id"] for t in json.loads(as_json.out)["trials"]] == [4, 5]
    as_csv = lifecycle_api.run("e", "list-trials", "1", "--csv")
    assert as_csv.out.splitlines()[0] == "Trial ID,State,H-Params,Started,Ended,# of Batches"


def test_list_checkpoints_best_asks_the_api_to_rank_them(lifecycle_api, table_rows) -> None:
    result = lifecycle_api.run("experiment", "list-checkpoints", "1", "--best", "1")
    same = lifecycle_api.run("checkpoint", "list", "1", "--best", "1")

    assert result.code == 0, result.err
    assert result.out == same.out
    assert lifecycle_api.requests[0][2] == {"best": "1"}
    rows = table_rows(result.out)
    assert rows[0] == ["Trial ID", "# of Batches", "State", "Validation Metric", "UUID", "Resources", "Size"]
    assert rows[1][:5] == ["4", "100", "COMPLETED", "0.25", UUID]
    assert rows[1][6] == "2.0KB" and rows[1][5] == "metadata.json" and rows[2][5] == "model.pt"
    refused = lifecycle_api.run("experiment", "lc", "1", "--best", "0")
    assert refused.code == 2 and "--best 0 must be 1 or more" in refused.err


def test_download_writes_every_file_under_checkpoints_uuid(lifecycle_api, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)

    result = lifecycle_api.run("checkpoint", "download", UUID)

    assert result.code == 0, result.err
    folder = tmp_path / "checkpoints" / UUID
    assert (folder / "model.pt").read_bytes() == b"w" * 2048
    assert json.loads((folder / "metadata.json").read_text()) == {"steps_completed": 100}
    assert f"Local checkpoint path:\ncheckpoints/{UUID}" in result.out
    assert f"Downloading checkpoint {UUID}: 2 files" in result.err and "[2/2]" in result.err
    assert not list(folder.glob("*.part"))


def test_download_quiet_prints_only_the_path(lifecycle_api, tmp_path) -> None:
    result = lifecycle_api.run("checkpoint", "download", UUID, "-o", str(tmp_path / "here"), "--quiet")

    assert (result.code, result.out, result.err) == (0, f"{tmp_path / 'here'}\n", "")
    assert (tmp_path / "here" / "model.pt").is_file()


@pytest.mark.parametrize("name", ["../evil.py", "/etc/passwd", "a/../../b", "a\\..\\b", "./x"])
def test_download_refuses_a_file_name_that_leaves_the_folder(lifecycle_api, tmp_path, name) -> None:
    lifecycle_api.file_names = ["model.pt", name]

    result = lifecycle_api.run("checkpoint", "download", UUID, "-o", str(tmp_path / "out"))

    assert result.code == 1
    assert f"named {name!r}" in result.err and "nothing was downloaded" in result.err
    assert not (tmp_path / "out").exists() and not (tmp_path / "evil.py").exists()
    assert not any(call.startswith("GET /bucket/") for call in lifecycle_api.calls())


def test_describe_a_checkpoint(lifecycle_api, table_rows) -> None:
    result = lifecycle_api.run("checkpoint", "describe", UUID)

    assert result.code == 0, result.err
    assert table_rows(result.out)[1][:4] == ["1", "4", "100", "COMPLETED"]


def test_delete_with_yes_deletes_and_says_so(lifecycle_api) -> None:
    lifecycle_api.experiments[2] = lifecycle_api.experiment(2, state="COMPLETED")
    lifecycle_api.experiments[3] = lifecycle_api.experiment(3, state="CANCELED")

    done = lifecycle_api.run("experiment", "delete", "2", "--yes")
    background = lifecycle_api.run("experiment", "delete", "3", "--yes")

    assert (done.code, done.out) == (0, "Successfully deleted experiment 2\n")
    assert background.code == 0 and "7 trials are left to remove in the background" in background.out
    assert lifecycle_api.deleted == [2, 3]


def test_delete_of_a_running_experiment_shows_the_apis_refusal(lifecycle_api) -> None:
    lifecycle_api.experiments[1] = lifecycle_api.experiment(1, state="ACTIVE")

    result = lifecycle_api.run("experiment", "delete", "1", "--yes")

    assert result.code == 1 and "experiment 1 is ACTIVE; cancel it first" in result.err


def test_delete_without_yes_and_without_a_terminal_is_refused(lifecycle_api) -> None:
    lifecycle_api.experiments[2] = lifecycle_api.experiment(2, state="COMPLETED")

    result = lifecycle_api.run("experiment", "delete", "2", inp=io.StringIO("y\n"))

    assert result.code == 2 and "pass --yes" in result.err
    assert lifecycle_api.deleted == []


def test_delete_asks_on_a_terminal_and_no_keeps_it(lifecycle_api) -> None:
    lifecycle_api.experiments[2] = lifecycle_api.experiment(2, state="COMPLETED")

    kept = lifecycle_api.run("experiment", "delete", "2", inp=TtyInput("n\n"))
    gone = lifecycle_api.run("experiment", "delete", "2", inp=TtyInput("yes\n"))

    assert "Do you still wish to proceed? [y/N]" in kept.err
    assert (kept.code, kept.out) == (0, "Aborting experiment deletion.\n")
    assert gone.out == "Successfully deleted experiment 2\n"
    assert lifecycle_api.deleted == [2]


@pytest.mark.parametrize(("end", "code"), [("COMPLETED", 0), ("CANCELED", 1), ("ERROR", 1)])
def test_wait_prints_each_state_and_exits_by_the_end(lifecycle_api, end, code) -> None:
    lifecycle_api.states = ["QUEUED", "ACTIVE", "ACTIVE", "ACTIVE", end]

    result = lifecycle_api.run("experiment", "wait", "1", "--polling-interval", "0.5")

    assert result.code == code
    assert result.err.splitlines() == [f"Experiment 1 is {s}" for s in ("QUEUED", "ACTIVE", end)]
    assert result.out == f"Experiment 1 terminated with state {end}\n"
    assert lifecycle_api.sleeps == 4  # one wait between two looks, none after the end


def test_wait_refuses_a_polling_interval_of_zero(lifecycle_api) -> None:
    result = lifecycle_api.run("experiment", "wait", "1", "--polling-interval", "0")

    assert result.code == 2 and "--polling-interval 0 must be more than 0" in result.err


def test_wait_on_an_unknown_experiment_names_it(lifecycle_api) -> None:
    result = lifecycle_api.run("experiment", "wait", "8")

    assert result.code == 1 and "experiment 8 does not exist" in result.err
