"""The adaptdl launcher's pure parts: the replicas' environment, NUM_RESTARTS, the exit rule, the hints
check, the discover answer, and what a save sends (no processes, no sockets: the session is a fake)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from stratus.contract import adaptdl
from stratus.contract.errors import HttpCallError, InvalidHintsError
from stratus.launchers._adaptdl_proxy import discover_answer
from stratus.launchers._adaptdl_sync import (
    COPY_MIN_BYTES,
    CheckpointSync,
    Folders,
    checkpoint_files,
    highest_checkpoint,
    local_target,
    num_restarts,
)
from stratus.launchers._info import LaunchInfo
from stratus.launchers._monitor import Outcome
from stratus.launchers.adaptdl import ReplicaLaunch, build_replica_env, final_outcome, replicas_per_node
from stratus.launchers.errors import LaunchConfigError


def launch(tmp_path: Path, **kw: object) -> ReplicaLaunch:
    folders = Folders(tmp_path / "checkpoint", tmp_path / "share", tmp_path / "tb")
    values: dict[str, object] = dict(
        replicas_per_node=2,
        master_addr="10.0.0.1",
        master_port=29400,
        job_id="12/7",
        restarts=3,
        supervisor_url="http://127.0.0.1:5000",
        folders=folders,
        num_nodes=2,
        node_rank=1,
        node_addrs=("10.0.0.1", "10.0.0.2"),
    )
    values.update(kw)
    return ReplicaLaunch(**values)  # type: ignore[arg-type]


def test_replica_env_has_global_ranks_and_every_adaptdl_variable(tmp_path: Path) -> None:
    env = build_replica_env(launch(tmp_path), 1, {"PATH": "/bin", "STRATUS_LAUNCHER_REPORT": "/r.json"})
    assert {k: v for k, v in env.items() if k in adaptdl.REPLICA_VARIABLES} == {
        "ADAPTDL_CHECKPOINT_PATH": str(tmp_path / "checkpoint"),
        "ADAPTDL_SHARE_PATH": str(tmp_path / "share"),
        "ADAPTDL_TENSORBOARD_LOGDIR": str(tmp_path / "tb"),
        "ADAPTDLCTL_TENSORBOARD_LOGDIR": str(tmp_path / "tb"),
        "ADAPTDL_JOB_ID": "12/7",
        "ADAPTDL_NUM_REPLICAS": "4",
        "ADAPTDL_REPLICA_RANK": "3",
        "ADAPTDL_NUM_NODES": "2",
        "ADAPTDL_NUM_RESTARTS": "3",
        "ADAPTDL_MASTER_ADDR": "10.0.0.1",
        "ADAPTDL_MASTER_PORT": "29400",
        "ADAPTDL_SUPERVISOR_URL": "http://127.0.0.1:5000",
        "ADAPTDL_SCHED_VERSION": "0.2.11",
        "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1",
    }
    assert "STRATUS_LAUNCHER_REPORT" not in env and env["PATH"] == "/bin" and env["OMP_NUM_THREADS"] == "1"
    assert set(adaptdl.REPLICA_VARIABLES) <= set(env)


def test_replica_env_refuses_a_rank_outside_the_node(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="outside 0..1"):
        build_replica_env(launch(tmp_path), 2, {})


def test_addresses_by_rank_follow_the_nodes(tmp_path: Path) -> None:
    assert launch(tmp_path).addresses() == ["10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2"]
    one = launch(tmp_path, num_nodes=1, node_rank=0, node_addrs=(), master_addr="127.0.0.1")
    assert one.addresses() == ["127.0.0.1", "127.0.0.1"]


def test_replicas_per_node_defaults_to_the_slots_and_takes_the_flag() -> None:
    info = LaunchInfo(slots=4, num_nodes=2)
    assert replicas_per_node([], info) == 2
    assert replicas_per_node(["--replicas-per-node", "1"], info) == 1
    assert replicas_per_node(["--replicas_per_node=3"], info) == 3
    with pytest.raises(LaunchConfigError, match="not a whole number"):
        replicas_per_node(["--replicas-per-node", "0"], info)
    with pytest.raises(LaunchConfigError, match="only --replicas-per-node"):
        replicas_per_node(["--nproc-per-node", "2"], info)


@pytest.mark.parametrize(
    ("control_plane", "highest", "expected"),
    [(0, None, 0), (5, None, 5), (0, 0, 1), (0, 4, 5), (2, 4, 5), (9, 4, 9)],
)
def test_num_restarts_always_passes_the_highest_checkpoint(
    control_plane: int, highest: int | None, expected: int
) -> None:
    assert num_restarts(control_plane, highest) == expected


def test_highest_checkpoint_reads_checkpoint_n_folders_only(tmp_path: Path) -> None:
    assert highest_checkpoint(tmp_path) is None
    for name in ("checkpoint-2", "checkpoint-10", "_checkpoint", "checkpoint-x"):
        (tmp_path / name).mkdir()
    (tmp_path / "checkpoint-99").write_text("a file, not a folder")
    assert highest_checkpoint(tmp_path) == 10


def test_a_save_holds_the_newest_checkpoint_and_the_share_folder(tmp_path: Path) -> None:
    folders = Folders.prepare(tmp_path)
    (folders.checkpoint / "checkpoint-1").mkdir()
    (folders.checkpoint / "checkpoint-1" / "adaptdl-dataparallel").write_bytes(b"w")
    (folders.share / "data").mkdir()
    (folders.share / "data" / "x.bin").write_bytes(b"x")
    assert sorted(checkpoint_files(folders, 1)) == [
        "checkpoint/checkpoint-1/adaptdl-dataparallel",
        "share/data/x.bin",
    ]
    assert local_target(folders, "share/data/x.bin") == folders.share / "data" / "x.bin"
    for name in ("metadata.json", "share/../../etc/passwd", "/abs/x", "other/x"):
        assert local_target(folders, name) is None


class FakeSession:
    """The control plane's checkpoint routes over an in-memory "S3" (stored name -> bytes), as `CheckpointSync`
    calls them; ``copies`` answers 404 to a `copy_from` (its source checkpoint is gone)."""

    def __init__(self, copies: bool = True) -> None:
        self.copies = copies
        self.objects: dict[str, bytes] = {}
        self.records: dict[str, dict[str, Any]] = {}
        self.asked: list[dict[str, Any]] = []
        self.put: list[str] = []

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        if path.endswith("/downloads"):
            uid = path.split("/")[2]
            return {
                "checkpoint": self.records[uid],
                "urls": {n: f"{uid}/{n}" for n in self.records[uid]["resources"]},
            }
        assert body is not None
        if path.endswith("/uploads"):
            self.asked.append(body)
            copy_from = body.get("copy_from") or {}
            if copy_from and not self.copies:
                raise HttpCallError(f"{method} {path}", 404)
            for name, source in copy_from.items():
                self.objects[f"{body['uuid']}/{name}"] = self.objects[f"{source}/{name}"]
            return {
                "urls": {name: f"{body['uuid']}/{name}" for name in body["files"]},
                "copied": sorted(copy_from),
            }
        self.records[body["uuid"]] = body
        return {"checkpoint": body}

    def put_file(self, url: str, path: Path) -> None:
        self.objects[url] = path.read_bytes()
        self.put.append(url)

    def download(self, url: str, dest: Path) -> None:
        dest.write_bytes(self.objects[url])


DATASET = b"d" * COPY_MIN_BYTES


def _saved_once(tmp_path: Path, session: FakeSession) -> str:
    """A first node saves checkpoint-0 with a dataset in its share folder; the stored checkpoint's uuid."""
    folders = Folders.prepare(tmp_path / "first")
    (folders.checkpoint / "checkpoint-0").mkdir()
    (folders.checkpoint / "checkpoint-0" / "state").write_bytes(b"s0")
    (folders.share / "data.bin").write_bytes(DATASET)
    (folders.share / "notes.txt").write_bytes(b"small")  # under COPY_MIN_BYTES: uploaded even unchanged
    return CheckpointSync(session, "7").save(folders, 0)  # type: ignore[arg-type]


def test_a_save_after_a_restore_copies_what_did_not_change_and_uploads_the_rest(tmp_path: Path) -> None:
    session = FakeSession()
    first = _saved_once(tmp_path, session)
    folders = Folders.prepare(tmp_path / "second")
    sync = CheckpointSync(session, "7")  # type: ignore[arg-type]
    assert sync.restore(first, folders) == 0
    (folders.checkpoint / "checkpoint-1").mkdir()
    (folders.checkpoint / "checkpoint-1" / "state").write_bytes(b"s1")
    (folders.tensorboard / "events").write_bytes(b"e")

    second = sync.save(folders, 1)

    assert session.asked[-1]["copy_from"] == {"share/data.bin": first}
    assert sorted(p for p in session.put if p.startswith(second)) == [
        f"{second}/checkpoint/checkpoint-1/state",
        f"{second}/metadata.json",
        f"{second}/share/notes.txt",
        f"{second}/tensorboard/events",
    ]
    assert session.objects[f"{second}/share/data.bin"] == DATASET
    assert sorted(session.records[second]["resources"]) == [
        "checkpoint/checkpoint-1/state",
        "metadata.json",
        "share/data.bin",
        "share/notes.txt",
        "tensorboard/events",
    ]
    # Changed since (same size, rewritten a second later): uploaded, and copied no more.
    data = folders.share / "data.bin"
    written = data.stat().st_mtime_ns
    data.write_bytes(DATASET.upper())
    os.utime(data, ns=(written + 10**9, written + 10**9))  # a file clock's tick may be coarser than this test
    sync.save(folders, 1)
    assert "copy_from" not in session.asked[-1] or "share/data.bin" not in session.asked[-1]["copy_from"]


def test_where_the_old_checkpoint_is_gone_every_file_is_uploaded(tmp_path: Path) -> None:
    session = FakeSession()
    first = _saved_once(tmp_path, session)
    folders = Folders.prepare(tmp_path / "second")
    sync = CheckpointSync(session, "7")  # type: ignore[arg-type]
    sync.restore(first, folders)
    session.copies = False

    second = sync.save(folders, 0)

    assert [("copy_from" in asked) for asked in session.asked[-2:]] == [True, False]
    assert session.objects[f"{second}/share/data.bin"] == DATASET  # uploaded after all
    assert "share/data.bin" in session.asked[-1]["files"]


CLEAN = {0: 143, 1: 143}


@pytest.mark.parametrize(
    ("codes", "stopped", "saved", "expected"),
    [
        ({0: 0, 1: 0}, False, False, 0),  # completed
        ({0: 0, 1: 0}, True, False, 0),  # finished before it noticed the stop
        (CLEAN, True, True, 0),  # the preempt path's clean exit
        ({0: 143, 1: 0}, True, True, 0),
        (CLEAN, True, False, 143),  # stopped, but nothing saved
        (CLEAN, False, True, 143),  # 143 without our SIGTERM
        ({0: 143, 1: 137}, True, True, 143),  # one replica had to be killed
        ({0: 1, 1: 143}, True, True, 1),
    ],
)
def test_exit_codes_map_to_completion_preemption_or_failure(
    codes: dict[int, int], stopped: bool, saved: bool, expected: int
) -> None:
    first = next((c for c in codes.values() if c), 0)
    outcome = Outcome(first, 0 if first else None, f"rank 0 exited with code {first}", codes)
    assert final_outcome(outcome, stopped=stopped, saved=saved).exit_code == expected


def test_replicas_our_stop_reached_before_adaptdl_started_are_a_preemption_with_nothing_to_keep() -> None:
    """A replica still importing torch when the rescale's SIGTERM came died of the signal (AdaptDL had not
    set its handler): nothing of this start was trained, so the run is preempted, not failed (it went to
    ERROR under load). One that AdaptDL's handler ended (143, no signal) without a checkpoint still fails."""
    died = Outcome(143, 0, "rank 0 killed by signal SIGTERM", CLEAN, signals={0: 15, 1: 15})
    assert final_outcome(died, stopped=True, saved=False).exit_code == 0
    assert "before AdaptDL trained or saved anything" in final_outcome(died, stopped=True, saved=False).reason
    caught = Outcome(143, 0, "rank 0 exited with code 143", CLEAN, signals={1: 15})
    assert final_outcome(caught, stopped=True, saved=False).exit_code == 143
    assert final_outcome(died, stopped=False, saved=False).exit_code == 143  # not our stop


def test_143_without_our_stop_says_so() -> None:
    outcome = final_outcome(Outcome(143, 0, "rank 0 exited with code 143", CLEAN), stopped=False, saved=True)
    assert "without a stop from the launcher" in outcome.reason


@pytest.fixture
def rank0_hints(adaptdl_hints: dict[str, object]) -> dict[str, object]:
    """The hints as AdaptDL's rank 0 sends them: without the launcher's speedup table."""
    return {key: value for key, value in adaptdl_hints.items() if key != "speedup"}


def test_hints_as_adaptdl_sends_them_pass_and_gain_nothing(rank0_hints: dict[str, object]) -> None:
    assert adaptdl.validate_hints(rank0_hints) == rank0_hints
    assert adaptdl.validate_hints({**rank0_hints, "speedup": {"1": 1, 2: 1.7}})["speedup"] == {
        "1": 1.0,
        "2": 1.7,
    }
    empty = adaptdl.validate_hints({"initBatchSize": 32, "gradParams": {}})
    assert (
        empty["gradParams"] is None and empty["perfParams"] is None and set(empty) == set(adaptdl.SCHED_HINTS)
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"extra": 1}, "unknown keys"),
        ({"initBatchSize": 0}, "initBatchSize=0"),
        ({"maxBatchSize": True}, "maxBatchSize=True"),
        ({"localBszBounds": [128, 16]}, "min > max"),
        ({"localBszBounds": [16]}, "localBszBounds"),
        ({"gradientAccumulation": "yes"}, "gradientAccumulation"),
        ({"perfParams": {"alpha_c": 1.0}}, "perfParams"),
        ({"gradParams": {"norm": float("nan"), "var": 1.0}}, "gradParams"),
        ({"speedup": {"0": 1.0}}, "speedup entry"),
        ({"speedup": {}}, "speedup"),
    ],
)
def test_bad_hints_are_refused_naming_the_field(
    change: dict[str, object],
    message: str,
    rank0_hints: dict[str, object],
) -> None:
    with pytest.raises(InvalidHintsError, match=message):
        adaptdl.validate_hints({**rank0_hints, **change})
    with pytest.raises(InvalidHintsError, match="JSON object"):
        adaptdl.validate_hints([rank0_hints])


def test_checkpoint_metadata_round_trips_and_others_are_not_adaptdl() -> None:
    assert adaptdl.restarts_of(adaptdl.checkpoint_metadata(4)) == 4
    assert adaptdl.checkpoint_metadata(4)["steps_completed"] == 4
    assert adaptdl.restarts_of({"steps_completed": 4}) is None
    assert adaptdl.restarts_of({"adaptdl": {"format": 1, "restarts": -1}}) is None


def test_discover_answers_addresses_for_this_job_and_group_only() -> None:
    addrs = ["10.0.0.1", "10.0.0.2"]
    assert discover_answer("/discover/12/7/3", "12/7", 3, addrs) == (200, addrs)
    assert discover_answer("/discover/12%2F7/3", "12/7", 3, addrs) == (200, addrs)
    status, body = discover_answer("/discover/12/7/2", "12/7", 3, addrs)
    assert status == 404 and "group '2'" in body["message"]
    assert discover_answer("/discover/12/8/3", "12/7", 3, addrs)[0] == 404
