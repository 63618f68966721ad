"""The `det` commands against an in-memory fake of the API's user-facing routes (httpx.MockTransport).

No network, no sleeping: `Runtime.sleep` is where the fake moves the world forward (a trial starts,
logs arrive, the trial ends), so following loops run to their end at once.
"""

from __future__ import annotations

import io
from pathlib import Path

import httpx
import pytest

from det import cli
from det._runtime import Runtime

CONFIG = """\
name: mnist
entrypoint: python3 train.py
searcher:
  name: single
  metric: validation_loss
  max_length:
    batches: 100
"""


@pytest.fixture
def config_file(project_config) -> Path:
    return project_config("const.yaml", CONFIG)


# --- experiment create -------------------------------------------------------------------------


def test_create_validates_then_uploads_then_submits(api, config_file: Path, fake_pack) -> None:
    ctx = config_file.parent / "ctx"
    result = api.run("experiment", "create", str(config_file), str(ctx))

    assert result.code == 0, result.err
    assert result.out == "Created experiment 1\n"
    assert api.calls() == [
        "POST /experiments",
        "POST /contexts",
        f"PUT /bucket/contexts/{fake_pack(ctx, []).sha256}.tar.zst",
        "POST /experiments",
    ]
    validate, submit = api.bodies("POST", "/experiments")
    packed = fake_pack(ctx, [])
    assert validate == {
        "config": submit["config"],
        "context_sha256": None,
        "validate_only": True,
        "activate": True,
    }
    assert submit["context_sha256"] == packed.sha256
    assert submit["validate_only"] is False and submit["activate"] is True
    assert submit["config"]["searcher"]["max_length"] == {"batches": 100}
    assert api.bodies("POST", "/contexts") == [{"sha256": packed.sha256, "size": len(packed.data)}]
    assert api.contexts[packed.sha256] == packed.data
    assert api.put_headers["content-length"] == str(len(packed.data))  # S3 refuses chunked PUTs
    assert "transfer-encoding" not in api.put_headers
    assert "Preparing files to send to master... 1.2KB and 3 files" in result.err
    assert "Warning: slots: one is plenty" in result.err


def test_create_uploads_nothing_when_the_api_refuses_the_config(api, config_file: Path, fake_pack) -> None:
    api.refuse_config = {
        "error": "InvalidConfig",
        "message": "the experiment config has 2 problems; fix them and submit again",
        "problems": [
            {"path": "searcher.max_trials", "message": "must be ≥ 1"},
            {"path": "resources.slots_per_trial", "message": "must be an integer"},
        ],
    }
    result = api.run("e", "create", str(config_file), str(config_file.parent / "ctx"))

    assert result.code == 1
    assert result.out == ""
    assert result.err == (
        "Error: the experiment config has 2 problems; fix them and submit again\n"
        "  searcher.max_trials: must be ≥ 1\n"
        "  resources.slots_per_trial: must be an integer\n"
    )
    assert api.calls() == ["POST /experiments"]
    assert api.packed == []


def test_create_skips_the_upload_when_the_context_exists(api, config_file: Path, fake_pack) -> None:
    ctx = config_file.parent / "ctx"
    sha = fake_pack(ctx, []).sha256
    api.contexts[sha] = b"already there"

    result = api.run("e", "create", str(config_file), str(ctx))

    assert result.code == 0
    assert api.calls("PUT") == []
    assert f"context already uploaded (sha256 {sha[:12]}…), skipping upload" in result.err
    assert api.bodies("POST", "/experiments")[-1]["context_sha256"] == sha


def test_create_applies_overrides_includes_and_paused(api, config_file: Path, fake_pack) -> None:
    ctx = config_file.parent / "ctx"
    result = api.run(
        "e",
        "create",
        str(config_file),
        str(ctx),
        "--config",
        "resources.slots_per_trial=2",
        "--config",
        "searcher.max_length.batches=300",
        "--config",
        "description=a b",
        "-i",
        "../data",
        "--paused",
        "--project",
        "p",
        "--workspace",
        "w",
    )

    assert result.code == 0, result.err
    submit = api.bodies("POST", "/experiments")[-1]
    assert submit["activate"] is False
    assert submit["config"]["resources"] == {"slots_per_trial": 2}
    assert submit["config"]["searcher"]["max_length"] == {"batches": 300}
    assert submit["config"]["description"] == "a b"
    assert submit["context_sha256"] == fake_pack(ctx, [Path("../data")]).sha256


def test_create_without_context_sends_no_sha(api, config_file: Path) -> None:
    result = api.run("e", "create", str(config_file))

    assert result.code == 0
    assert api.calls() == ["POST /experiments", "POST /experiments"]
    assert api.bodies("POST", "/experiments")[-1]["context_sha256"] is None


def test_create_reports_a_missing_config_file_without_calling_the_api(api, tmp_path: Path) -> None:
    result = api.run("e", "create", str(tmp_path / "nope.yaml"), str(tmp_path))

    assert result.code == 2
    assert (
        result.err
        == f"Error: config file {tmp_path / 'nope.yaml'} does not exist; pass the path of an experiment config (.yaml)\n"
    )
    assert api.requests == []


def test_create_reports_a_yaml_error_with_line_and_column(api, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nsearcher: [1, 2\n")

    result = api.run("e", "create", str(path), str(tmp_path))

    assert result.code == 2
    assert result.err.startswith(f"Error: {path}, line 3, column 1: ")
    assert result.err.count("\n") == 1
    assert api.requests == []


def _script_first_trial(api, final_state: str) -> None:
    """The trial appears on the 2nd poll, logs arrive in bursts, then it ends in `final_state`."""

    def start() -> None:
        api.trials[7] = api.trial(7, 1)
        api.log(7, "starting", "epoch 1")

    def more() -> None:
        api.log(7, "epoch 2")
        api.trials[7]["total_batches"] = 100
        api.experiments[1]["progress"] = 0.5

    def end() -> None:
        api.log(7, "done")
        api.trials[7]["state"] = final_state
        api.experiments[1]["state"] = final_state
        api.experiments[1]["progress"] = 1.0

    api.events = [lambda: None, start, more, lambda: None, end]


def test_create_follow_streams_the_first_trial_to_the_end(api, config_file: Path) -> None:
    _script_first_trial(api, "COMPLETED")

    result = api.run("e", "create", str(config_file), str(config_file.parent / "ctx"), "-f")

    assert result.code == 0, result.err
    assert result.out == (
        "Created experiment 1\n"
        "Waiting for first trial to begin...\n"
        "Following first trial with ID 7\n"
        "starting\n"
        "epoch 1\n"
        "epoch 2\n"
        "done\n"
        "Trial log stream ended. To reopen log stream, run: det trial logs -f 7\n"
        "Experiment 1 COMPLETED\n"
    )
    tokens = [p.get("next_token") for m, path, p, _ in api.requests if path == "/trials/7/logs"]
    assert tokens[0] is None and all(t is not None for t in tokens[1:])  # follows the cursor


@pytest.mark.parametrize("final_state", ["ERROR", "CANCELED"])
def test_create_follow_exits_1_unless_completed(api, config_file: Path, final_state: str) -> None:
    _script_first_trial(api, final_state)

    result = api.run("e", "create", str(config_file), str(config_file.parent / "ctx"), "--follow-first-trial")

    assert result.code == 1
    assert result.out.endswith(f"Experiment 1 {final_state}\n")
    assert "done\n" in result.out


def test_create_follow_draws_a_status_line_on_a_terminal(api, config_file: Path, fake_pack) -> None:
    _script_first_trial(api, "COMPLETED")

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out, err = io.StringIO(), Tty()
    rt = Runtime(transport=api.transport, sleep=api.sleep, pack=fake_pack, out=out, err=err)
    code = cli.main(["e", "create", str(config_file), str(config_file.parent / "ctx"), "-f"], runtime=rt)

    assert code == 0
    assert "experiment 1 ACTIVE · trial 7 RUNNING · 100 batches · 50.0%" in err.getvalue()
    assert "\x1b" not in out.getvalue()  # the status line never lands in stdout


def test_ctrl_c_exits_130_quietly(api, config_file: Path) -> None:
    def interrupt() -> None:
        raise KeyboardInterrupt

    api.events = [interrupt]

    result = api.run("e", "create", str(config_file), str(config_file.parent / "ctx"), "-f")

    assert result.code == 130
    assert result.err.strip().splitlines()[-1].startswith("Warning")  # nothing after the last note


def test_experiment_activate(api) -> None:
    api.experiments[3] = api.experiment(3, state="PAUSED")

    result = api.run("e", "activate", "3")

    assert (result.code, result.out) == (0, "Activated experiment 3\n")
    assert api.experiments[3]["state"] == "ACTIVE"


def test_experiment_cancel_and_kill(api) -> None:
    api.experiments[3] = api.experiment(3)

    canceled = api.run("e", "cancel", "3")
    killed = api.run("experiment", "kill", "3")

    assert (canceled.code, canceled.out) == (0, "Canceled experiment 3 (STOPPING_CANCELED)\n")
    assert (killed.code, killed.out) == (0, "Killed experiment 3 (STOPPING_KILLED)\n")
    assert api.calls("POST") == ["POST /experiments/3/cancel", "POST /experiments/3/kill"]


def test_trial_kill(api) -> None:
    api.trials[5] = api.trial(5, 3)

    result = api.run("t", "kill", "5")

    assert (result.code, result.out) == (0, "Killed trial 5 (STOPPING_KILLED)\n")


def test_experiment_pause_says_how_to_resume_and_an_ended_one_is_refused(api) -> None:
    api.experiments[3] = api.experiment(3)
    api.experiments[4] = api.experiment(4, state="COMPLETED")

    paused = api.run("e", "pause", "3")
    ended = api.run("experiment", "pause", "4")

    assert paused.code == 0 and paused.out.startswith("Paused experiment 3 (PAUSED)")
    assert "det experiment activate 3" in paused.out
    assert ended.code != 0 and "experiment 4 is COMPLETED" in ended.err


def test_cancel_of_an_unknown_experiment_names_it(api) -> None:
    result = api.run("e", "cancel", "9")

    assert result.code != 0
    assert "experiment 9" in result.err


# --- errors and the master URL -----------------------------------------------------------------


def test_connection_refused_says_how_to_start_the_stack(api, config_file: Path) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    api.transport = httpx.MockTransport(refuse)

    result = api.run("-m", "http://127.0.0.1:9", "e", "list")

    assert result.code == 1
    assert result.err == (
        "Error: cannot reach the Stratus API at http://127.0.0.1:9; "
        "start it with `det deploy local up` or set DET_MASTER\n"
    )


def test_master_flag_overrides_det_master(api) -> None:
    hosts = []

    def record(request: httpx.Request) -> httpx.Response:
        hosts.append(f"{request.url.host}:{request.url.port}")
        return api.handle(request)

    api.transport = httpx.MockTransport(record)
    api.run("e", "list", environ={"DET_MASTER": "http://from-env:1"})
    api.run("-m", "other:2", "e", "list", environ={"DET_MASTER": "http://from-env:1"})
    api.run("e", "list")
    assert hosts == ["from-env:1", "other:2", "127.0.0.1:8080"]


def test_an_error_without_a_json_body_is_one_line(api) -> None:
    api.transport = httpx.MockTransport(lambda request: httpx.Response(502, text="<html>Bad Gateway</html>"))

    result = api.run("e", "describe", "1")

    assert result.code == 1
    assert result.err == (
        "Error: the Stratus API at http://127.0.0.1:8080 answered GET /experiments/1 with HTTP 502 "
        "Bad Gateway; retry, or look at the API's logs\n"
    )


def test_a_refused_upload_is_one_line(api, config_file: Path) -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.host == "s3.fake":
            return httpx.Response(
                403, text="<Error><Code>SignatureDoesNotMatch</Code><Message>nope</Message></Error>"
            )
        return api.handle(request)

    api.transport = httpx.MockTransport(handle)

    result = api.run("e", "create", str(config_file), str(config_file.parent / "ctx"))

    assert result.code == 1
    assert result.err.splitlines()[-1] == (
        "Error: uploading the context to https://s3.fake failed with HTTP 403 (SignatureDoesNotMatch: nope); "
        "retry, or check the storage configuration of the stack"
    )
    assert api.calls("POST") == ["POST /experiments", "POST /contexts"]  # never submitted


def test_usage_errors_exit_2(api) -> None:
    assert api.run("e", "describe").code == 2
    assert api.run("t", "logs", "x").code == 2
    assert api.run("t", "logs", "1", "--head", "1", "--tail", "1").code == 2
    assert api.run().code == 2
    assert api.run("e", "create", "c.yaml", "--config", "novalue").code == 2
