"""`det experiment config | logs | download` and `det trial download` against the fake API of
tests/unit/det/fakes.py, with the routes these commands read and a fake S3 added in front of it (the
`downloads_api` fixture).

The seeded experiment 1 ranks its checkpoints by `loss` (smaller is better). Its trials are listed 5
first, though 4 is its first trial:

    uuid     trial steps state      loss accuracy
    ckpt-4a  4     100   COMPLETED  0.5  0.88
    ckpt-5a  5     100   COMPLETED  0.2  0.82
    ckpt-4b  4     200   COMPLETED  0.3  0.85
    ckpt-5b  5     200   COMPLETED  0.4  0.90
    ckpt-4c  4     300   DELETED    0.1  0.99   (its files are gone: never downloaded)
    ckpt-4d  4     250   COMPLETED  -    -      (no validation at its steps)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from det.cli import build_parser

CONFIG = {
    "name": "mnist-ünïcode",
    "entrypoint": "model_def:Trial",
    "searcher": {"name": "random", "metric": "loss", "smaller_is_better": True, "max_trials": 2},
    "hyperparameters": {"lr": {"type": "log", "minval": -4, "maxval": -1, "base": 10}},
    "resources": {"slots_per_trial": 1},
    "bind_mounts": [{"host_path": "/data", "container_path": "/data"}],
}
# uuid: (trial, steps, state, minute of report, validation at its steps)
CHECKPOINTS: dict[str, tuple[int, int, str, int, dict[str, float] | None]] = {
    "ckpt-4a": (4, 100, "COMPLETED", 1, {"loss": 0.5, "accuracy": 0.88}),
    "ckpt-5a": (5, 100, "COMPLETED", 2, {"loss": 0.2, "accuracy": 0.82}),
    "ckpt-4b": (4, 200, "COMPLETED", 3, {"loss": 0.3, "accuracy": 0.85}),
    "ckpt-5b": (5, 200, "COMPLETED", 4, {"loss": 0.4, "accuracy": 0.90}),
    "ckpt-4c": (4, 300, "DELETED", 5, {"loss": 0.1, "accuracy": 0.99}),
    "ckpt-4d": (4, 250, "COMPLETED", 6, None),
}
FILES = ("metadata.json", "state/model.pt")
HINT = "Trial log stream ended. To reopen log stream, run: det trial logs -f {}\n"


def _content(uuid: str, name: str) -> bytes:
    """What S3 holds for a file of a checkpoint: its own path, so a test sees where each file came from."""
    return f"{uuid}/{name}".encode()


@pytest.fixture
def downloads_api(api):
    """The fake API with experiment 1 (trials 5 and 4, the checkpoints above), experiment 2 (no trial
    yet), and the routes `GET /experiments/{id}/trials`, `GET /experiments/{id}/checkpoints` (`?best=N`
    ranked as the API does), `GET /checkpoints/{uuid}/files` and an S3 that serves `_content`."""
    api.experiments[1] = api.experiment(1, config=CONFIG)
    api.experiments[2] = api.experiment(2, config={"name": "empty"})
    api.trials[5] = api.trial(5, 1)
    api.trials[4] = api.trial(4, 1)
    for uuid, (tid, steps, state, minute, validation) in CHECKPOINTS.items():
        api.checkpoints.setdefault(tid, []).append(
            {
                "uuid": uuid,
                "trial_id": tid,
                "experiment_id": 1,
                "steps_completed": steps,
                "state": state,
                "uri": f"s3://bucket/checkpoints/1/{tid}/{uuid}/",
                "resources": {name: len(_content(uuid, name)) for name in FILES},
                "metadata": {"steps_completed": steps},
                "report_time": f"2024-05-01T12:{minute:02d}:00+00:00",
            }
        )
        if validation is not None:
            api.metrics.setdefault((tid, "validation"), []).append(
                {"group": "validation", "steps_completed": steps, "metrics": validation}
            )
    fallback = api.handle

    def handle(request: httpx.Request) -> httpx.Response:
        method, path, params = request.method, request.url.path, dict(request.url.params)
        if request.url.host == "s3.download":
            api.requests.append((method, path, params, None))
            _, uuid, name = path.strip("/").split("/", 2)
            return httpx.Response(200, content=_content(uuid, name))
        if method == "GET" and (m := re.fullmatch(r"/experiments/(\d+)/(trials|checkpoints)", path)):
            api.requests.append((method, path, params, None))
            eid = int(m.group(1))
            if eid not in api.experiments:
                return httpx.Response(404, json={"error": "NotFound", "message": f"no experiment {eid}"})
            if m.group(2) == "trials":
                return httpx.Response(
                    200, json={"trials": [t for t in api.trials.values() if t["experiment_id"] == eid]}
                )
            return httpx.Response(200, json=_experiment_checkpoints(api, eid, params.get("best")))
        if method == "GET" and (m := re.fullmatch(r"/checkpoints/([^/]+)/files", path)):
            api.requests.append((method, path, params, None))
            found = [c for cs in api.checkpoints.values() for c in cs if c["uuid"] == m.group(1)]
            if not found:
                return httpx.Response(404, json={"error": "NotFound", "message": "no such checkpoint"})
            if found[0]["state"] != "COMPLETED":
                return httpx.Response(409, json={"error": "Conflict", "message": "its files were removed"})
            urls = {n: f"https://s3.download/bucket/{m.group(1)}/{n}?X-Amz-Signature=s" for n in FILES}
            return httpx.Response(200, json={"checkpoint": found[0], "urls": urls})
        return fallback(request)

    api.transport = httpx.MockTransport(handle)
    return api


def _experiment_checkpoints(api: Any, eid: int, best: str | None) -> dict[str, Any]:
    """`GET /experiments/{eid}/checkpoints` as docs/contracts.md §1 describes it."""
    searcher = api.experiments[eid]["config"].get("searcher") or {}
    metric, smaller = searcher.get("metric", "loss"), searcher.get("smaller_is_better", True)
    listed = []
    for tid, checkpoints in api.checkpoints.items():
        if api.trials[tid]["experiment_id"] != eid:
            continue
        validations = {v["steps_completed"]: v["metrics"] for v in api.metrics.get((tid, "validation"), [])}
        for c in checkpoints:
            validation = validations.get(c["steps_completed"])
            value = (validation or {}).get(metric)
            listed.append(c | {"validation_metrics": validation, "searcher_metric_value": value})
    listed.sort(key=lambda c: c["report_time"])
    if best is not None:
        ranked = [c for c in listed if c["state"] == "COMPLETED" and c["searcher_metric_value"] is not None]
        ranked.sort(key=lambda c: c["searcher_metric_value"] * (1 if smaller else -1))
        listed = ranked[: int(best)]
    return {"searcher_metric": metric, "smaller_is_better": smaller, "checkpoints": listed}


def _downloaded(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _files_of(uuid: str) -> dict[str, bytes]:
    return {name: _content(uuid, name) for name in FILES}


# ---- det experiment config ---------------------------------------------------------------------------


def test_config_prints_the_experiments_config_as_block_yaml(downloads_api) -> None:
    result = downloads_api.run("experiment", "config", "1")

    assert result.code == 0, result.err
    assert yaml.safe_load(result.out) == CONFIG
    lines = result.out.splitlines()
    assert lines[0] == "name: mnist-ünïcode"  # the stored order, readable
    assert "searcher:" in lines and "  metric: loss" in lines  # block style, not {metric: loss, ...}
    assert not any("{" in line for line in lines)
    assert result.err == ""


def test_config_of_an_unknown_experiment_names_it(downloads_api) -> None:
    result = downloads_api.run("e", "config", "9")

    assert result.code == 1 and result.out == ""
    assert result.err.startswith("Error: experiment 9 does not exist;")


# ---- det experiment logs -----------------------------------------------------------------------------


def test_logs_are_the_first_trials_with_the_hint_on_stderr(downloads_api) -> None:
    downloads_api.log(4, "INFO: four starts", "WARNING: four is slow", "four ends")
    downloads_api.log(5, "five")

    result = downloads_api.run("experiment", "logs", "1")

    assert result.code == 0, result.err
    assert result.out == "INFO: four starts\nWARNING: four is slow\nfour ends\n"
    assert result.err == HINT.format(4)
    assert "GET /trials/5/logs" not in downloads_api.calls()


def test_logs_apply_det_trial_logs_filters(downloads_api) -> None:
    downloads_api.log(4, "INFO: one", "WARNING: two", "ERROR: three", "four")

    assert downloads_api.run("e", "logs", "1", "--tail", "2").out == "ERROR: three\nfour\n"
    assert downloads_api.run("e", "logs", "1", "--head", "1", "--timestamps").out == (
        "[2024-05-01T12:00:00.000Z] INFO: one\n"
    )
    assert downloads_api.run("e", "logs", "1", "--level", "warning").out == "WARNING: two\nERROR: three\n"
    before = len(downloads_api.requests)
    downloads_api.run("e", "logs", "1", "--rank", "1")
    reads = [r for r in downloads_api.requests[before:] if r[1].endswith("/logs")]
    assert reads and all(r[1] == "/trials/4/logs" and r[2]["rank"] == "1" for r in reads)
    assert downloads_api.sleeps == 0
    refused = downloads_api.run("e", "logs", "1", "--head", "-1")
    assert refused.code == 2 and "--head -1 is negative" in refused.err


def test_logs_take_the_same_filters_as_det_trial_logs() -> None:
    parser = build_parser()
    flags = ["-f", "--tail", "3", "--timestamps", "--rank-id", "2", "--level", "warning"]
    of_trial = parser.parse_args(["trial", "logs", "4", *flags])
    of_experiment = parser.parse_args(["experiment", "logs", "1", *flags])

    filters = ("follow", "head", "tail", "timestamps", "rank_id", "level")
    assert [getattr(of_experiment, f) for f in filters] == [True, None, 3, True, 2, "WARNING"]
    assert [getattr(of_trial, f) for f in filters] == [getattr(of_experiment, f) for f in filters]


def test_logs_follow_the_first_trial_until_it_ends(downloads_api) -> None:
    downloads_api.log(4, "early")

    def finish() -> None:
        downloads_api.log(4, "late")
        downloads_api.trials[4]["state"] = "COMPLETED"

    downloads_api.events.append(finish)

    result = downloads_api.run("e", "logs", "1", "-f")

    assert result.code == 0, result.err
    assert result.out == "early\nlate\n"
    assert result.err == HINT.format(4)


def test_logs_of_an_experiment_without_a_trial_or_unknown(downloads_api) -> None:
    empty = downloads_api.run("e", "logs", "2")
    unknown = downloads_api.run("e", "logs", "9")

    assert empty.code == 1 and empty.out == ""
    assert empty.err.startswith("Error: experiment 2 has no trial yet;")
    assert "Trial log stream ended" not in empty.err
    assert unknown.code == 1 and unknown.err.startswith("Error: experiment 9 does not exist;")


# ---- det experiment download -------------------------------------------------------------------------


def test_download_takes_the_best_by_the_searcher_metric(downloads_api, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)

    result = downloads_api.run("experiment", "download", "1")

    assert result.code == 0, result.err
    assert ("GET", "/experiments/1/checkpoints", {"best": "1"}) in [r[:3] for r in downloads_api.requests]
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["ckpt-5a"]
    assert _downloaded(tmp_path / "checkpoints" / "ckpt-5a") == _files_of("ckpt-5a")
    assert result.out.startswith("Local checkpoint path:\ncheckpoints/ckpt-5a\n")
    assert "| ckpt-5a" in result.out and result.out.endswith("\n\n")
    assert "Downloading checkpoint ckpt-5a: 2 files" in result.err


def test_download_top_n_quiet_prints_the_paths_best_first(downloads_api, tmp_path) -> None:
    out = tmp_path / "best"

    result = downloads_api.run("e", "download", "1", "--top-n", "3", "-o", str(out), "-q")

    assert result.code == 0, result.err
    assert result.out.splitlines() == [str(out / u) for u in ("ckpt-5a", "ckpt-4b", "ckpt-5b")]
    assert result.err == ""
    for uuid in ("ckpt-5a", "ckpt-4b", "ckpt-5b"):
        assert _downloaded(out / uuid) == _files_of(uuid)
    assert sorted(p.name for p in out.iterdir()) == ["ckpt-4b", "ckpt-5a", "ckpt-5b"]


def test_download_sort_by_another_metric_ranks_completed_ones(downloads_api, tmp_path) -> None:
    out = tmp_path / "acc"
    argv = ("e", "download", "1", "--top-n", "3", "-o", str(out), "-q", "--sort-by", "accuracy")

    larger = downloads_api.run(*argv, "--smaller-is-better", "false")
    smaller = downloads_api.run(*argv, "--smaller-is-better", "true", "--top-n", "1")

    assert larger.code == 0, larger.err
    # ckpt-4c has the best accuracy but is DELETED; ckpt-4d has no validation.
    assert larger.out.splitlines() == [str(out / u) for u in ("ckpt-5b", "ckpt-4a", "ckpt-4b")]
    assert smaller.out.splitlines() == [str(out / "ckpt-5a")]
    assert all("best" not in r[2] for r in downloads_api.requests if r[1].endswith("/checkpoints"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ("e", "download", "1", "--sort-by", "a", "--smaller-is-better", "hm"),
            "'hm' is neither true nor false",
        ),
        (("t", "download", "4"), "one of the arguments --best --latest --uuid is required"),
        (("t", "download", "4", "--best", "--latest"), "argument --latest: not allowed with argument --best"),
        (("t", "download", "4", "--uuid"), "argument --uuid: expected one argument"),
    ],
)
def test_usage_errors_argparse_reports(downloads_api, capsys, argv, message) -> None:
    result = downloads_api.run(*argv)

    assert result.code == 2 and message in capsys.readouterr().err  # argparse writes to sys.stderr
    assert downloads_api.requests == []


def test_download_refusals(downloads_api, tmp_path) -> None:
    out = str(tmp_path / "x")
    half = downloads_api.run("e", "download", "1", "-o", out, "--sort-by", "accuracy")
    zero = downloads_api.run("e", "download", "1", "-o", out, "--top-n", "0")
    unknown = downloads_api.run("e", "download", "9", "-o", out)
    nothing = downloads_api.run("e", "download", "2", "-o", out)
    no_metric = downloads_api.run(
        "e", "download", "1", "-o", out, "--sort-by", "f1", "--smaller-is-better", "false"
    )

    assert half.code == 2 and "--sort-by and --smaller-is-better go together" in half.err
    assert zero.code == 2 and "--top-n 0 must be 1 or more" in zero.err
    assert unknown.code == 1 and unknown.err.startswith("Error: experiment 9 does not exist;")
    assert nothing.code == 1
    assert nothing.err.startswith(
        "Error: experiment 2 has no COMPLETED checkpoint with a validation of 'loss'"
    )
    assert no_metric.code == 1 and "validation of 'f1'" in no_metric.err
    assert not (tmp_path / "x").exists()


# ---- det trial download ------------------------------------------------------------------------------


def test_trial_download_latest_skips_deleted_checkpoints(downloads_api, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    downloads_api.checkpoints[4][0]["report_time"] = "2024-05-01T12:59:00+00:00"  # latest by steps, not time

    result = downloads_api.run("trial", "download", "4", "--latest")

    assert result.code == 0, result.err
    assert _downloaded(tmp_path / "checkpoints" / "ckpt-4d") == _files_of("ckpt-4d")
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["ckpt-4d"]
    assert result.out.startswith("Local checkpoint path:\ncheckpoints/ckpt-4d\n")


def test_trial_download_best_by_searcher_metric_or_sort_by(downloads_api, tmp_path) -> None:
    best = downloads_api.run("t", "download", "4", "--best", "-o", str(tmp_path / "best"), "-q")
    by_acc = downloads_api.run(
        "t", "download", "4", "--best", "-o", str(tmp_path / "acc"), "-q",
        "--sort-by", "accuracy", "--smaller-is-better", "false",
    )  # fmt: skip

    assert (best.code, best.out) == (0, f"{tmp_path / 'best'}\n"), best.err
    assert _downloaded(tmp_path / "best") == _files_of("ckpt-4b")  # ckpt-4c is better but DELETED
    assert (by_acc.code, by_acc.out) == (0, f"{tmp_path / 'acc'}\n"), by_acc.err
    assert _downloaded(tmp_path / "acc") == _files_of("ckpt-4a")  # ckpt-5b is better but trial 5's


def test_trial_download_by_uuid(downloads_api, tmp_path) -> None:
    result = downloads_api.run("t", "download", "5", "--uuid", "ckpt-5a", "-o", str(tmp_path / "u"))

    assert result.code == 0, result.err
    assert _downloaded(tmp_path / "u") == _files_of("ckpt-5a")
    assert result.out.startswith(f"Local checkpoint path:\n{tmp_path / 'u'}\n")
    assert "GET /trials/5" not in downloads_api.calls()  # as Determined: the uuid alone says which


def test_trial_download_refusals(downloads_api, tmp_path) -> None:
    out = str(tmp_path / "x")
    downloads_api.trials[6] = downloads_api.trial(6, 1)
    deleted = [c for c in downloads_api.checkpoints[4] if c["state"] == "DELETED"]
    downloads_api.checkpoints[6] = [c | {"trial_id": 6, "uuid": "ckpt-6a"} for c in deleted]

    sort_alone = downloads_api.run(
        "t", "download", "4", "--latest", "--sort-by", "accuracy", "--smaller-is-better", "false", "-o", out
    )
    unknown = downloads_api.run("t", "download", "9", "--latest", "-o", out)
    no_completed = downloads_api.run("t", "download", "6", "--latest", "-o", out)
    no_best = downloads_api.run("t", "download", "6", "--best", "-o", out)
    unknown_uuid = downloads_api.run("t", "download", "4", "--uuid", "nope", "-o", out)

    assert sort_alone.code == 2 and "only go with --best" in sort_alone.err
    assert unknown.code == 1 and unknown.err.startswith("Error: trial 9 does not exist;")
    assert no_completed.code == 1 and no_completed.err.startswith(
        "Error: trial 6 has no COMPLETED checkpoint"
    )
    assert no_best.code == 1 and "validation of 'loss'" in no_best.err and "--latest" in no_best.err
    assert unknown_uuid.code == 1 and unknown_uuid.err.startswith("Error: checkpoint nope does not exist;")
    assert not (tmp_path / "x").exists()
