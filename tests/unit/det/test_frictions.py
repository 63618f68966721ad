"""What a Determined user met in the first hour, each as Determined does it: the master URL pasted with
`/api` or a slash, Ctrl-C or SIGTERM in the middle of `create`, config problems printed once, an unknown
checkpoint said before `--yes` is asked for, `--rank` of a rank that does not exist, counts in agreement,
and the aliases Determined's CLI has (`det e unpause`, `det j u`)."""

from __future__ import annotations

import hashlib
import os
import signal
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from det._signals import Terminated

CONFIG = "name: mnist\nentrypoint: python3 train.py\nsearcher: {name: single, metric: loss, max_length: {batches: 1}}\n"


@pytest.fixture
def config_file(project_config) -> Path:
    return project_config("const.yaml", CONFIG)


# --- the master URL ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "master",
    ["http://127.0.0.1:8080/api", "http://127.0.0.1:8080/api/", "127.0.0.1:8080/", " localhost:8080// "],
)
def test_the_local_stacks_url_with_api_or_a_slash_is_normalised(api, master: str) -> None:
    api.experiments[1] = api.experiment(1)

    by_flag = api.run("-m", master, "e", "list")
    by_env = api.run("e", "list", environ={"DET_MASTER": master})

    assert (by_flag.code, by_env.code) == (0, 0), by_flag.err + by_env.err
    assert api.calls() == ["GET /experiments", "GET /experiments"]  # at the root, never /api/experiments


@pytest.mark.parametrize(
    ("master", "message"),
    [
        (
            "http://127.0.0.1:8080/v1",
            "Error: -m http://127.0.0.1:8080/v1 has the path /v1, and the local stack serves its API at its "
            "root; use http://127.0.0.1:8080",
        ),
        (
            "https://abc123.execute-api.eu-west-1.amazonaws.com/",
            "Error: -m https://abc123.execute-api.eu-west-1.amazonaws.com/ is an API Gateway URL without its "
            "stage; use https://abc123.execute-api.eu-west-1.amazonaws.com/api (the ApiUrl that `det deploy "
            "aws up` prints)",
        ),
        (
            "https://abc123.execute-api.eu-west-1.amazonaws.com/api/experiments",
            "Error: -m https://abc123.execute-api.eu-west-1.amazonaws.com/api/experiments is an API Gateway URL "
            "with more than its stage; use https://abc123.execute-api.eu-west-1.amazonaws.com/api (the ApiUrl "
            "that `det deploy aws up` prints)",
        ),
    ],
)
def test_a_master_url_that_cannot_be_right_is_refused_naming_it_and_the_fix(
    api, master: str, message: str
) -> None:
    result = api.run("-m", master, "e", "list")

    assert (result.code, result.err) == (2, message + "\n")
    assert api.calls() == []


def test_missing_authentication_token_says_the_url_is_wrong(api) -> None:
    api.transport = httpx.MockTransport(
        lambda request: httpx.Response(403, json={"message": "Missing Authentication Token"})
    )

    result = api.run("-m", "https://stratus.example.org/prod/api", "e", "list")

    assert result.code == 1
    assert result.err == (
        "Error: https://stratus.example.org/prod/api has no route GET /experiments (it answered 'Missing "
        "Authentication Token'), so it is not the Stratus API's URL; set DET_MASTER (or -m) to the URL that "
        "`det deploy local up` printed (http://127.0.0.1:PORT, nothing after the port) or the ApiUrl of "
        "`det deploy aws up` (https://ID.execute-api.REGION.amazonaws.com/api)\n"
    )


# --- Ctrl-C and SIGTERM in `det experiment create` ------------------------------------------------


@dataclass
class Archive:
    """A packed context that records whether it was discarded (its temporary file removed)."""

    data: bytes = b"x" * 300_000
    num_files: int = 1
    file_bytes: int = 1234
    reused: bool = False
    discarded: list[bool] = field(default_factory=list)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def size(self) -> int:
        return len(self.data)

    def pieces(self) -> Iterator[bytes]:
        yield self.data

    def discard(self) -> None:
        self.discarded.append(True)


def test_ctrl_c_while_packing_says_nothing_was_created(api, config_file: Path) -> None:
    def pack(root: Path, includes: Sequence[Path], cache: object = None) -> Archive:
        raise KeyboardInterrupt

    ctx = config_file.parent / "ctx"
    result = api.run("e", "create", str(config_file), str(ctx), pack=pack)

    assert result.code == 130
    assert result.err == (
        f"Interrupted: packing the context {ctx} (Ctrl-C); nothing was created, and no temporary file is "
        "left: run the command again\n"
    )
    assert api.calls() == ["POST /experiments"]  # the config check; no upload, no experiment


def test_ctrl_c_while_uploading_says_what_was_interrupted_and_removes_the_archive(
    api, config_file: Path
) -> None:
    archive = Archive()
    answer = api.handle

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.host == "s3.fake":
            raise KeyboardInterrupt  # the user's Ctrl-C, while the archive streams to S3
        return answer(request)

    api.transport = httpx.MockTransport(handle)
    ctx = config_file.parent / "ctx"
    result = api.run("e", "create", str(config_file), str(ctx), pack=lambda *a: archive)

    assert result.code == 130
    assert result.err.splitlines() == [
        "Preparing files to send to master... 1.2KB and 1 file",  # one file: no "1 files"
        f"Interrupted: uploading the context {ctx} (Ctrl-C); nothing was created, and no temporary file is "
        "left: run the command again",
    ]
    assert archive.discarded == [True]
    assert api.experiments == {}


def test_sigterm_while_packing_unwinds_and_exits_143(api, config_file: Path) -> None:
    """A real SIGTERM to this process: `det.cli.main` turns it into `Terminated` while a command runs, so
    what was being done unwinds (the packer removes its file) instead of dying past every `finally`."""
    before = signal.getsignal(signal.SIGTERM)
    unwound: list[str] = []

    def pack(root: Path, includes: Sequence[Path], cache: object = None) -> Archive:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            raise AssertionError("SIGTERM did not reach the command")
        finally:
            unwound.append("the partial archive was removed")

    ctx = config_file.parent / "ctx"
    result = api.run("e", "create", str(config_file), str(ctx), pack=pack)

    assert result.code == 143 and unwound
    assert result.err.startswith(f"Interrupted: packing the context {ctx} (SIGTERM); nothing was created")
    assert signal.getsignal(signal.SIGTERM) is before  # the handler lives only while a command runs


def test_sigterm_outside_a_named_step_exits_quietly_with_its_code(api) -> None:
    api.experiments[1] = api.experiment(1)

    def terminate() -> None:
        raise Terminated(signal.SIGTERM)

    api.events = [terminate]
    result = api.run("e", "wait", "1", "--polling-interval", "0.5")

    assert (result.code, result.err) == (143, "Experiment 1 is ACTIVE\n")  # nothing after what it said


# --- smaller frictions --------------------------------------------------------------------------------


def test_config_problems_are_printed_once(api, config_file: Path) -> None:
    api.refuse_config = {  # the API's answer (chalicelib.config.errors.ConfigInvalidError)
        "error": "ConfigInvalid",
        "message": "config has 2 problems: searcher.max_trials: must be ≥ 1; resources.slots_per_trial: "
        "must be an integer",
        "problems": [
            {"path": "searcher.max_trials", "message": "must be ≥ 1"},
            {"path": "resources.slots_per_trial", "message": "must be an integer"},
        ],
    }

    result = api.run("e", "create", str(config_file), str(config_file.parent / "ctx"))

    assert result.code == 1
    assert result.err == (
        "Error: config has 2 problems:\n"
        "  searcher.max_trials: must be ≥ 1\n"
        "  resources.slots_per_trial: must be an integer\n"
    )


def test_an_unknown_checkpoint_is_said_before_yes_is_asked_for(api) -> None:
    result = api.run("checkpoint", "rm", "x")  # no --yes, no terminal to ask on

    assert result.code == 1
    assert result.err == (
        "Error: checkpoint x does not exist; `det experiment list-checkpoints ID` shows the uuids\n"
    )
    assert api.calls() == ["GET /checkpoints/x"]


def test_an_unknown_experiment_is_said_before_yes_is_asked_for(api) -> None:
    result = api.run("experiment", "delete", "9")

    assert (result.code, result.err) == (
        1,
        "Error: experiment 9 does not exist; `det experiment list --all` shows the ids\n",
    )


def _rank_filtering(api) -> None:
    """The API's rank filter (the fake serves every line whatever the rank asked)."""
    answer = api.handle

    def handle(request: httpx.Request) -> httpx.Response:
        rank = request.url.params.get("rank")
        if rank is None or not request.url.path.endswith("/logs"):
            return answer(request)
        tid = int(request.url.path.split("/")[2])
        lines = api.logs.get(tid, [])
        page = [line for line in lines if line["rank"] == int(rank)]
        body = {
            "logs": page,
            "next_token": str(len(lines)),
            "trial_state": "COMPLETED",
            "lines_read": len(lines),
        }
        if request.url.params.get("next_token") == str(len(lines)):
            body |= {"logs": [], "lines_read": 0}
        return httpx.Response(200, json=body)

    api.transport = httpx.MockTransport(handle)


def test_rank_of_a_one_process_trial_says_it_has_no_ranks(api) -> None:
    api.trials[7] = api.trial(7, 1, state="COMPLETED")
    api.log(7, "epoch 1", "epoch 2")  # a one-process trial: its lines carry no rank
    _rank_filtering(api)

    result = api.run("trial", "logs", "7", "--rank", "3")

    assert (result.code, result.out) == (2, "")
    assert result.err == (
        "Error: trial 7 has no rank 3: its lines carry no rank (one process, no launcher spreading it over "
        "ranks); leave --rank out\n"
    )


def test_rank_that_a_distributed_trial_does_not_have_names_those_it_has(api) -> None:
    api.trials[7] = api.trial(7, 1, state="COMPLETED")
    api.logs[7] = [
        {"timestamp": 1714564800000 + i, "message": f"[rank={r}] step", "rank": r}
        for i, r in enumerate((0, 1, 0))
    ]
    _rank_filtering(api)

    missing = api.run("trial", "logs", "7", "--rank", "3")
    present = api.run("trial", "logs", "7", "--rank", "1")

    assert (missing.code, missing.err) == (
        2,
        "Error: trial 7 has no rank 3: its lines come from ranks 0, 1; pass one of them\n",
    )
    assert (present.code, present.out) == (0, "[rank=1] step\n")


def test_determined_aliases_unpause_and_job_u(api) -> None:
    api.experiments[3] = api.experiment(3, state="PAUSED")

    unpaused = api.run("e", "unpause", "3")
    updated = api.run("j", "u", "3", "-p", "10")

    assert (unpaused.code, unpaused.out) == (0, "Activated experiment 3\n")
    assert updated.code == 0, updated.err
    assert api.bodies("PATCH", "/jobs/3") == [{"priority": 10}]
