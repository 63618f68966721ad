"""The in-trial Core API against an in-memory control plane and S3 (stratus.contract.http.InMemoryTransport): no
network."""

from __future__ import annotations

import json
import math
import signal
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stratus import harness
from stratus.contract.errors import NoAnswerError
from stratus.contract.http import InMemoryTransport, Request, Response, RetryPolicy
from stratus.harness import core
from stratus.harness._api import ApiClient
from stratus.harness._info import load_cluster_info, load_rank_info
from stratus.harness.core._checkpoint import safe_join
from stratus.harness.core._train import clean_metrics

pytestmark = pytest.mark.usefixtures("no_trial_env")


@pytest.fixture
def on_platform(plane_kit) -> None:
    hparams = {"learning_rate": 0.01, "hidden_size": 32}
    plane_kit.platform_env(hparams, STRATUS_LATEST_CHECKPOINT="", STRATUS_SLOTS="1")


@pytest.fixture
def plane(plane_kit) -> Any:
    return plane_kit.FakePlane()


@pytest.fixture
def ctx(on_platform: None, plane) -> Iterator[harness.Context]:
    with harness.init(transport=plane.transport()) as context:
        yield context


# --- info ---------------------------------------------------------------------------------------


def test_cluster_info_is_read_from_the_environment(on_platform: None, plane_kit) -> None:
    info = load_cluster_info()
    assert info is not None
    assert info.trial.trial_id == plane_kit.trial and info.trial.experiment_id == plane_kit.experiment
    assert info.trial.hparams == {"learning_rate": 0.01, "hidden_size": 32}
    assert info.trial.trial_seed == 42
    assert info.run_id == "run-1" and info.master_url == plane_kit.api
    assert info.latest_checkpoint is None
    assert plane_kit.token not in repr(info)


def test_off_platform_there_is_no_cluster_info() -> None:
    assert load_cluster_info() is None
    assert harness.get_cluster_info() is None


def test_init_fetches_the_config(ctx: harness.Context, plane_kit) -> None:
    info = harness.get_cluster_info()
    assert info is ctx.info and info is not None
    assert info.config == plane_kit.config
    assert info.latest_checkpoint is None


def test_cluster_info_outlives_its_context(
    monkeypatch: pytest.MonkeyPatch, on_platform: None, plane, plane_kit
) -> None:
    with harness.init(transport=plane.transport()) as context:
        info = context.info
    assert harness.get_cluster_info() is info  # kept: no second GET /info (this one has no transport)
    for name in plane_kit.env_names:
        monkeypatch.delenv(name, raising=False)
    assert harness.get_cluster_info() is None


def test_latest_checkpoint_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, on_platform: None
) -> None:
    monkeypatch.setenv("STRATUS_LATEST_CHECKPOINT", "abc-123")
    info = load_cluster_info()
    assert info is not None and info.latest_checkpoint == "abc-123"


def test_bad_hparams_say_what_is_wrong(monkeypatch: pytest.MonkeyPatch, on_platform: None) -> None:
    monkeypatch.setenv("STRATUS_HPARAMS", "[1, 2]")
    with pytest.raises(harness.HarnessError, match="STRATUS_HPARAMS"):
        load_cluster_info()


def test_ranks_default_to_a_single_process(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_rank_info() == load_rank_info({})
    d = core.DistributedContext.from_env()
    assert (d.rank, d.size, d.local_rank, d.local_size, d.cross_rank, d.cross_size) == (0, 1, 0, 1, 0, 1)
    assert d.is_chief
    for name, value in {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}.items():
        monkeypatch.setenv(name, value)
    d = core.DistributedContext.from_env()
    assert (d.rank, d.size, d.local_rank, d.local_size, d.cross_rank, d.cross_size) == (5, 8, 1, 4, 1, 2)
    assert not d.is_chief


# --- metrics ------------------------------------------------------------------------------------


def test_metrics_and_progress_reach_the_api(on_platform: None, plane, plane_kit) -> None:
    with harness.init(transport=plane.transport()) as ctx:
        ctx.train.report_training_metrics(steps_completed=50, metrics={"loss": 0.5})
        ctx.train.report_validation_metrics(steps_completed=200, metrics={"validation_accuracy": 0.9})
        ctx.train.report_progress(0.25)
    # Batched by the report sender, in the order made, and delivered by the time the context closes.
    assert {call[1] for call in plane.api_calls()} == {
        f"/v1/trials/{plane_kit.trial}/info",
        f"/v1/trials/{plane_kit.trial}/reports",
    }
    assert plane.reports() == [
        {"kind": "metrics", "group": "training", "steps_completed": 50, "metrics": {"loss": 0.5}},
        {
            "kind": "metrics",
            "group": "validation",
            "steps_completed": 200,
            "metrics": {"validation_accuracy": 0.9},
        },
        {"kind": "progress", "progress": 0.25},
    ]


def test_custom_metric_groups_reach_the_api_under_their_names(on_platform: None, plane) -> None:
    odd = {"zinf%er en/ce/me.t r%i]\\c_0": 1.5, "m0": 2}
    with harness.init(transport=plane.transport()) as ctx:
        ctx.train.report_metrics(group="inf%er en/ce", steps_completed=3, metrics=odd)
        ctx.train.report_metrics(group="validation", steps_completed=4, metrics={"loss": 0.25})
        for group, message in {"a.b": "'a.b' contains '.'.*'a_b'", "": "is empty", 3: "3 is a int"}.items():
            with pytest.raises(ValueError, match=message):
                ctx.train.report_metrics(group=group, steps_completed=5, metrics={})  # type: ignore[arg-type]
    assert plane.reports() == [
        {"kind": "metrics", "group": "inf%er en/ce", "steps_completed": 3, "metrics": odd},
        {"kind": "metrics", "group": "validation", "steps_completed": 4, "metrics": {"loss": 0.25}},
    ]


def test_local_custom_groups_are_kept_and_logged(tmp_path: Path) -> None:
    train = core.LocalTrainContext(core.DistributedContext(), events=core.LocalEvents(tmp_path / "e.jsonl"))
    train.report_metrics("group_b", 2, {"m0": 1.0})
    train.report_metrics("training", 1, {"loss": 0.5})
    assert train.metrics_by_group == {
        "training": [{"steps_completed": 1, "metrics": {"loss": 0.5}}],
        "validation": [],
        "group_b": [{"steps_completed": 2, "metrics": {"m0": 1.0}}],
    }
    assert train.training_metrics == train.metrics_by_group["training"]
    assert core.read_events(tmp_path / "e.jsonl") == [
        {"type": "metrics", "group": "group_b", "steps_completed": 2, "metrics": {"m0": 1.0}},
        {"type": "training", "steps_completed": 1, "metrics": {"loss": 0.5}},
    ]


def test_metric_values_become_json() -> None:
    torch = pytest.importorskip("torch")
    cleaned = clean_metrics({"loss": torch.tensor(0.5), "nan": math.nan, "inf": -math.inf, "n": 3})
    assert cleaned == {"loss": 0.5, "nan": "NaN", "inf": "-Infinity", "n": 3}
    with pytest.raises(ValueError, match="not a scalar"):
        clean_metrics({"loss": torch.ones(2)})
    with pytest.raises(ValueError, match="steps_completed"):
        core.LocalTrainContext(core.DistributedContext()).report_training_metrics(-1, {"loss": 1.0})
    with pytest.raises(ValueError, match="progress"):
        core.LocalTrainContext(core.DistributedContext()).report_progress(1.5)


# --- checkpoints --------------------------------------------------------------------------------


def _write_files(path: Path) -> None:
    (path / "model.pt").write_bytes(b"weights" * 100)
    (path / "sub").mkdir()
    (path / "sub" / "opt.bin").write_bytes(b"\x00\x01\x02")


def test_store_path_uploads_metadata_last_then_reports(ctx: harness.Context, plane, plane_kit) -> None:
    with ctx.checkpoint.store_path({"steps_completed": 200, "note": "x"}) as (path, storage_id):
        _write_files(path)
    assert not path.exists()  # the staging folder is gone
    calls = [c for c in plane.calls() if not c[1].endswith("/heartbeat")]
    kinds = [
        (m, p.rsplit("/", 1)[-1] if m == "PUT" else p)
        for m, p, _ in calls
        if p != f"/v1/trials/{plane_kit.trial}/info"
    ]
    uploads = f"/v1/trials/{plane_kit.trial}/checkpoints/uploads"
    report = f"/v1/trials/{plane_kit.trial}/checkpoints"
    assert kinds[0] == ("POST", uploads)
    assert sorted(kinds[1:3]) == [("PUT", "model.pt"), ("PUT", "opt.bin")]
    assert kinds[3:] == [("PUT", "metadata.json"), ("POST", report)]
    upload_body = plane.calls("POST", "/uploads")[0][2]
    assert upload_body == {"uuid": storage_id, "files": ["model.pt", "sub/opt.bin", "metadata.json"]}
    body = plane.calls("POST", report)[-1][2]
    metadata_json = plane.s3[
        f"bucket/checkpoints/{plane_kit.experiment}/{plane_kit.trial}/{storage_id}/metadata.json"
    ]
    assert body == {
        "uuid": storage_id,
        "steps_completed": 200,
        "resources": {"model.pt": 700, "sub/opt.bin": 3, "metadata.json": len(metadata_json)},
        "metadata": {"steps_completed": 200, "note": "x"},
    }
    assert json.loads(metadata_json) == {"steps_completed": 200, "note": "x"}
    assert (
        plane.s3[f"bucket/checkpoints/{plane_kit.experiment}/{plane_kit.trial}/{storage_id}/sub/opt.bin"]
        == b"\x00\x01\x02"
    )
    uuid.UUID(storage_id)


def test_a_failing_block_reports_nothing(ctx: harness.Context, plane) -> None:
    with (
        pytest.raises(RuntimeError, match="disk full"),
        ctx.checkpoint.store_path({"steps_completed": 1}) as (path, _),
    ):
        _write_files(path)
        raise RuntimeError("disk full")
    assert not path.exists()
    assert plane.calls(path_part="/checkpoints") == [] and plane.s3 == {}


def test_missing_steps_completed_raises_before_anything(ctx: harness.Context, plane) -> None:
    for metadata in (None, {}, {"steps_completed": "10"}, {"steps_completed": True}):
        with (
            pytest.raises(harness.CheckpointError, match="steps_completed"),
            ctx.checkpoint.store_path(metadata),
        ):
            pytest.fail("the block must not run")
    assert plane.calls(path_part="/checkpoints") == []


def test_a_user_metadata_json_is_refused(ctx: harness.Context, plane) -> None:
    with (
        pytest.raises(harness.CheckpointError, match=r"metadata\.json"),
        ctx.checkpoint.store_path({"steps_completed": 1}) as (path, _),
    ):
        (path / "metadata.json").write_text("{}")
    assert plane.calls(path_part="/checkpoints") == []


def test_restore_round_trips_files_and_metadata(ctx: harness.Context) -> None:
    with ctx.checkpoint.store_path({"steps_completed": 400}) as (path, storage_id):
        _write_files(path)
    with ctx.checkpoint.restore_path(storage_id) as restored:
        assert (restored / "model.pt").read_bytes() == b"weights" * 100
        assert (restored / "sub" / "opt.bin").read_bytes() == b"\x00\x01\x02"
        assert json.loads((restored / "metadata.json").read_text())["steps_completed"] == 400
    assert not restored.exists()
    assert ctx.checkpoint.get_metadata(storage_id) == {"steps_completed": 400}


def test_restoring_an_unknown_checkpoint_names_it(ctx: harness.Context) -> None:
    with (
        pytest.raises(harness.CheckpointError, match="no checkpoint nope"),
        ctx.checkpoint.restore_path("nope"),
    ):
        pytest.fail("the block must not run")


def test_download_names_cannot_escape(tmp_path: Path) -> None:
    assert safe_join(tmp_path, "a/b.pt") == tmp_path / "a" / "b.pt"
    for bad in ("../x", "/etc/passwd", "a/../../x", ""):
        with pytest.raises(harness.CheckpointError):
            safe_join(tmp_path, bad)


# --- preemption ---------------------------------------------------------------------------------


def test_heartbeats_run_and_do_not_preempt_by_themselves(on_platform: None, plane) -> None:
    with harness.init(transport=plane.transport(), heartbeat_interval_s=0.01) as context:
        assert plane.wait_heartbeats(3)
        assert context.preempt.should_preempt() is False
    assert plane.calls("POST", "/heartbeat")[0][2] == {}


def test_preemption_latches_from_the_heartbeat_answer(on_platform: None, plane) -> None:
    plane.preempt = True
    with harness.init(transport=plane.transport(), heartbeat_interval_s=0.01) as context:
        assert plane.wait_heartbeats(2)  # the first answer has been handled
        plane.preempt = False
        assert context.preempt.should_preempt() is True
        assert plane.wait_heartbeats(4)
        assert context.preempt.should_preempt() is True  # latched


def test_the_agents_stop_file_latches_preemption_between_heartbeats(
    on_platform: None, plane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "preempt.requested"
    monkeypatch.setenv("STRATUS_PREEMPT_FILE", str(marker))
    with harness.init(transport=plane.transport(), heartbeat_interval_s=3600) as context:
        assert context.preempt.should_preempt() is False
        marker.touch()  # the agent passes on the control plane's stop request
        assert context.preempt.wait(30) is True  # the watcher saw it, long before the next heartbeat
        assert context.preempt.should_preempt() is True
    assert len(plane.calls("POST", "/heartbeat")) == 1  # the first beat only


def test_close_stops_the_heartbeat_thread(on_platform: None, plane) -> None:
    context = harness.init(transport=plane.transport(), heartbeat_interval_s=0.01)
    assert plane.wait_heartbeats(1)
    context.close()
    assert not any(t.name == "stratus-heartbeat" for t in threading.enumerate())
    context.close()  # idempotent


@pytest.mark.parametrize("platform", [True, False])
def test_sigterm_latches_preemption_and_close_restores_the_handler(
    request: pytest.FixtureRequest, plane, platform: bool
) -> None:
    if platform:
        request.getfixturevalue("on_platform")
    before = signal.getsignal(signal.SIGTERM)
    context = harness.init(transport=plane.transport())
    try:
        assert context.preempt.should_preempt() is False
        assert signal.getsignal(signal.SIGTERM) != before
        signal.raise_signal(signal.SIGTERM)
        assert context.preempt.should_preempt() is True
    finally:
        context.close()
    assert signal.getsignal(signal.SIGTERM) == before


def test_sigterm_still_runs_a_handler_installed_before(plane_kit) -> None:
    seen = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.set())
    try:
        with harness.init() as context:
            signal.raise_signal(signal.SIGTERM)
            assert seen.wait(plane_kit.wait_s)
            assert context.preempt.should_preempt() is True
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_init_outside_the_main_thread_installs_no_handler(plane_kit) -> None:
    before = signal.getsignal(signal.SIGTERM)
    results: list[bool] = []

    def worker() -> None:
        with harness.init() as context:
            results.append(context.preempt.should_preempt())

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(plane_kit.wait_s)
    assert results == [False] and signal.getsignal(signal.SIGTERM) == before


# --- local twins --------------------------------------------------------------------------------


def test_local_twins_work_without_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    with harness.init() as context:
        assert context.info is None
        assert isinstance(context.train, core.LocalTrainContext)
        context.train.report_training_metrics(steps_completed=10, metrics={"loss": 1.25})
        context.train.report_validation_metrics(steps_completed=10, metrics={"validation_accuracy": 0.5})
        context.train.report_progress(0.5)
        assert context.train.training_metrics == [{"steps_completed": 10, "metrics": {"loss": 1.25}}]
        assert context.train.validation_metrics[0]["metrics"] == {"validation_accuracy": 0.5}
        with context.checkpoint.store_path({"steps_completed": 10}) as (path, storage_id):
            (path / "w.bin").write_bytes(b"abc")
        assert path == tmp_path / "checkpoints" / storage_id
        assert json.loads((path / "metadata.json").read_text()) == {"steps_completed": 10}
        with context.checkpoint.restore_path(storage_id) as restored:
            assert (restored / "w.bin").read_bytes() == b"abc"
        assert context.checkpoint.get_metadata(storage_id) == {"steps_completed": 10}
        with (
            pytest.raises(RuntimeError),
            context.checkpoint.store_path({"steps_completed": 11}) as (failed, _),
        ):
            raise RuntimeError("boom")
        assert not failed.exists()
        with pytest.raises(harness.CheckpointError), context.checkpoint.store_path({}):
            pass
        with (
            pytest.raises(harness.CheckpointError, match="no checkpoint"),
            context.checkpoint.restore_path(str(uuid.uuid4())),
        ):
            pass
        assert context.preempt.should_preempt() is False
    assert "[training] steps_completed=10 loss=1.25" in capsys.readouterr().out


def test_local_checkpoint_dir_is_configurable(tmp_path: Path) -> None:
    with (
        harness.init(checkpoint_dir=tmp_path / "ckpts") as context,
        context.checkpoint.store_path({"steps_completed": 1}) as (path, storage_id),
    ):
        (path / "x").write_text("x")
    assert (tmp_path / "ckpts" / storage_id / "metadata.json").is_file()


# --- ranks --------------------------------------------------------------------------------------


def test_non_chief_ranks_report_nothing(
    monkeypatch: pytest.MonkeyPatch, on_platform: None, plane, plane_kit
) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with harness.init(transport=plane.transport(), heartbeat_interval_s=0.01) as context:
        assert not context.distributed.is_chief
        context.train.report_training_metrics(steps_completed=1, metrics={"loss": 1.0})
        context.train.report_validation_metrics(steps_completed=1, metrics={"validation_accuracy": 1.0})
        context.train.report_progress(1.0)
        with context.checkpoint.store_path({"steps_completed": 1}) as (path, storage_id):
            (path / "x").write_text("x")
        assert storage_id == ""
        assert context.preempt.should_preempt() is False
        with (
            pytest.raises(harness.CheckpointError, match="shard=True"),
            context.checkpoint.store_path({"steps_completed": 1}, shard=True),
        ):
            pass
    assert not path.exists()
    assert plane.calls() == [
        ("GET", f"/v1/trials/{plane_kit.trial}/info", None)
    ]  # no metrics, uploads, heartbeats
    assert plane.s3 == {}


def test_non_chief_ranks_can_restore(monkeypatch: pytest.MonkeyPatch, on_platform: None, plane) -> None:
    with (
        harness.init(transport=plane.transport()) as chief,
        chief.checkpoint.store_path({"steps_completed": 3}) as (path, storage_id),
    ):
        (path / "x").write_text("x")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with harness.init(transport=plane.transport()) as worker, worker.checkpoint.restore_path(storage_id) as p:
        assert (p / "x").read_text() == "x"


# --- the API client ------------------------------------------------------------------------------------


@pytest.fixture
def client_for(plane_kit) -> Callable[[Any, list[float]], ApiClient]:
    """An ApiClient of the fake plane's run over `handler`; the waits between retries go to `sleeps`."""

    def client_for(handler: Any, sleeps: list[float]) -> ApiClient:
        retry = RetryPolicy(first_delay_s=0.1, growth=2.0, max_attempts=3)
        transport = InMemoryTransport(handler)
        return ApiClient(plane_kit.api, plane_kit.token, transport=transport, retry=retry, wait=sleeps.append)

    return client_for


def test_client_retries_5xx_and_connection_errors_then_succeeds(client_for) -> None:
    answers: list[Any] = [
        NoAnswerError("POST /trials/7/heartbeat", "refused"),
        Response(502, text="Bad Gateway"),
    ]

    def handler(request: Request) -> Response:
        if answers:
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer
        return Response(200, json={"preempt": False})

    sleeps: list[float] = []
    assert client_for(handler, sleeps).post("/trials/7/heartbeat", {}) == {"preempt": False}
    assert sleeps == [0.1, 0.2]


def test_client_gives_up_after_its_backoff(plane_kit, client_for) -> None:
    def handler(request: Request) -> Response:
        raise NoAnswerError(request.what, "refused")

    sleeps: list[float] = []
    with pytest.raises(harness.ApiCallError, match="STRATUS_MASTER"):
        client_for(handler, sleeps).get("/trials/7/info")
    assert sleeps == [0.1, 0.2]

    def always_500(request: Request) -> Response:
        return plane_kit.error(503, "Unavailable", "try later.")

    with pytest.raises(harness.ApiCallError) as raised:
        client_for(always_500, []).get("/trials/7/info")
    assert raised.value.status == 503


def test_client_raises_4xx_at_once_with_the_servers_message(plane_kit, client_for) -> None:
    def handler(request: Request) -> Response:
        assert request.headers["authorization"] == f"Bearer {plane_kit.token}"
        assert request.path == "/v1/trials/7/metrics"
        return plane_kit.error(409, "Conflict", "trial 7 is COMPLETED; it takes no more metrics.")

    sleeps: list[float] = []
    with pytest.raises(harness.ApiCallError, match="trial 7 is COMPLETED") as raised:
        client_for(handler, sleeps).post("/trials/7/metrics", {"group": "training"})
    assert (raised.value.status, raised.value.code) == (409, "Conflict")
    assert sleeps == []
