"""The report sender (`stratus.harness.core._reports`): reporting returns while the API has not answered, reports
arrive in order and batched, a refused report is raised by the next flush, and the flush points
(checkpoint, `should_preempt()`, the searcher, exit) deliver everything before they return. Against the
in-memory control plane of tests/unit/harness/fakes.py: no network, no sleeping."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from stratus import harness
from stratus.contract.errors import InvalidEnvironmentError
from stratus.contract.http import InMemoryTransport, Request, Response, RetryPolicy
from stratus.harness._api import ApiClient
from stratus.harness.core._reports import MAX_BATCH, ReportError, ReportSender

pytestmark = pytest.mark.usefixtures("no_trial_env")

WAIT_S = 10.0


@pytest.fixture
def on_platform(plane_kit) -> None:
    plane_kit.platform_env({"learning_rate": 0.01}, STRATUS_LATEST_CHECKPOINT="", STRATUS_SLOTS="1")


class Gate:
    """Holds every `POST .../reports` until `release()`: the API is slow to answer."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()
        self.in_flight = 0

    def hold(self) -> None:
        self.in_flight += 1
        self.entered.set()
        self.released.wait(WAIT_S)
        self.in_flight -= 1

    def release(self) -> None:
        self.released.set()


def _slow_plane(plane_kit, gate: Gate) -> Any:
    class SlowPlane(plane_kit.FakePlane):
        def _route(self, method: str, route: str, body: Any) -> Response:
            if route.endswith("/reports"):
                gate.hold()
            return super()._route(method, route, body)

    return SlowPlane()


def _training(steps: int) -> dict[str, Any]:
    return {"kind": "metrics", "group": "training", "steps_completed": steps, "metrics": {"loss": 1 / steps}}


def test_reporting_returns_while_the_api_has_not_answered(on_platform: None, plane_kit) -> None:
    gate = Gate()
    plane = _slow_plane(plane_kit, gate)
    with harness.init(transport=plane.transport()) as ctx:
        ctx.train.report_training_metrics(steps_completed=1, metrics={"loss": 1.0})
        assert gate.entered.wait(WAIT_S)  # the sender is in the API, which holds it
        for steps in (2, 3):
            ctx.train.report_training_metrics(steps_completed=steps, metrics={"loss": 1 / steps})
        ctx.train.report_progress(0.1)
        ctx.train.report_progress(0.3)
        assert gate.in_flight == 1  # both returned while the first report had no answer yet
        gate.release()
    posts = plane.calls("POST", "/reports")
    assert [
        [r.get("steps_completed", r.get("progress")) for r in body["reports"]] for _, _, body in posts
    ] == [
        [1],
        [2, 3, 0.3],  # what waited went together; the newer progress replaced the older one
    ]


def test_a_checkpoint_is_registered_after_the_metrics_before_it_and_before_store_path_returns(
    on_platform: None, plane_kit, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATUS_REPORT_INTERVAL", "60")  # nothing is sent by the clock: only by flushes
    plane = plane_kit.FakePlane()
    with harness.init(transport=plane.transport()) as ctx:
        for steps in (5, 10):
            ctx.train.report_training_metrics(steps_completed=steps, metrics={"loss": 0.5})
        with ctx.checkpoint.store_path({"steps_completed": 10}) as (path, storage_id):
            (path / "model.pt").write_bytes(b"weights")
        order = [(c[1].rsplit("/", 1)[-1], c[2]) for c in plane.calls("POST") if "/v1/" in c[1]]
        assert plane.checkpoint_reports()[0]["uuid"] == storage_id  # registered by now
    reports = [body["reports"] for name, body in order if name == "reports"]
    assert [r["steps_completed"] for batch in reports for r in batch] == [5, 10]
    names = [name for name, _ in order]
    assert names.index("checkpoints") > max(i for i, name in enumerate(names) if name == "reports")


def test_should_preempt_delivers_every_report_before_it_says_stop(
    on_platform: None, plane_kit, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATUS_REPORT_INTERVAL", "60")
    plane = plane_kit.FakePlane()
    with harness.init(transport=plane.transport()) as ctx:
        for steps in (1, 2, 3):
            ctx.train.report_training_metrics(steps_completed=steps, metrics={"loss": 0.5})
        assert ctx.preempt.should_preempt() is False
        ctx.preempt.latch("a test asks")
        assert ctx.preempt.should_preempt() is True
        assert [steps for steps, _ in plane.metric_posts("training")] == [1, 2, 3]


def test_the_searcher_is_asked_only_after_the_reports_are_delivered(on_platform: None, plane_kit) -> None:
    plane = plane_kit.SearcherPlane([10])
    with harness.init(**plane.init_options()) as ctx:
        for op in ctx.searcher.operations():
            ctx.train.report_validation_metrics(steps_completed=10, metrics={"accuracy": 0.5})
            op.report_completed(0.5)
    names = [c[1].rsplit("/", 1)[-1] for c in plane.api_calls()]
    assert names[names.index("reports") :].count("searcher") == 1  # the last question, after the report
    assert names.index("reports") < names.index("completed")


def test_a_refused_report_is_raised_by_the_next_flush_and_never_lost_silently(
    on_platform: None, plane_kit, caplog: pytest.LogCaptureFixture
) -> None:
    class RefusingPlane(plane_kit.FakePlane):
        def _route(self, method: str, route: str, body: Any) -> Response:
            if route.endswith("/reports"):
                return plane_kit.error(403, "Forbidden", "the run has ended.")
            return super()._route(method, route, body)

    plane = RefusingPlane()
    with (
        pytest.raises(
            ReportError, match=r"training metrics at 5 batches: .*403 \(Forbidden: the run has ended"
        ),
        harness.init(transport=plane.transport()) as ctx,
    ):
        ctx.train.report_training_metrics(steps_completed=5, metrics={"loss": 0.5})  # returns at once
    assert "could not be delivered" in caplog.text  # said when it failed, not only at the flush


def test_the_trials_own_error_is_not_hidden_by_a_failed_flush(on_platform: None, plane_kit) -> None:
    class RefusingPlane(plane_kit.FakePlane):
        def _route(self, method: str, route: str, body: Any) -> Response:
            if route.endswith("/reports"):
                return plane_kit.error(400, "BadRequest", "no.")
            return super()._route(method, route, body)

    with pytest.raises(ZeroDivisionError), harness.init(transport=RefusingPlane().transport()) as ctx:
        ctx.train.report_training_metrics(steps_completed=5, metrics={"loss": 0.5})
        _ = 1 / 0


# ---- the sender on its own --------------------------------------------------------------------


def _sender(handler: Any, **options: Any) -> ReportSender:
    retry = RetryPolicy(first_delay_s=0.1, growth=2.0, max_attempts=2)
    api = ApiClient(
        "https://api.test", "token", transport=InMemoryTransport(handler), retry=retry, wait=lambda s: None
    )
    return ReportSender(api, 7, wait=lambda s: None, **options)


def test_unanswered_and_5xx_sends_are_retried_until_delivered() -> None:
    answers = [Response(503, json={"error": "Unavailable", "message": "busy"})] * 5 + [Response(200, json={})]
    seen: list[dict[str, Any]] = []

    def handler(request: Request) -> Response:
        seen.append(request.json())
        return answers.pop(0)

    sender = _sender(handler)
    sender.report(_training(1), "training metrics at 1 batches")
    sender.close()
    assert len(seen) == 6 and all(body == {"reports": [_training(1)]} for body in seen)
    assert sender.sent == 1


def test_sends_that_find_no_answer_for_too_long_are_raised() -> None:
    clock = iter(range(0, 10_000, 100))
    sender = _sender(
        lambda request: Response(502, json={"error": "BadGateway", "message": "down"}),
        give_up_after_s=250,
        clock=lambda: float(next(clock)),
    )
    sender.report(_training(3), "training metrics at 3 batches")
    with pytest.raises(ReportError, match="training metrics at 3 batches: .*502"):
        sender.flush()
    sender.close()


def test_many_reports_go_in_few_requests_of_at_most_max_batch() -> None:
    bodies: list[dict[str, Any]] = []
    release = threading.Event()

    def handler(request: Request) -> Response:
        release.wait(WAIT_S)
        bodies.append(request.json())
        return Response(200, json={})

    sender = _sender(handler, interval_s=60.0)
    count = 2 * MAX_BATCH + 10
    for steps in range(1, count + 1):
        sender.report(_training(steps), f"training metrics at {steps} batches")
    release.set()
    sender.close()
    sizes = [len(body["reports"]) for body in bodies]
    assert sum(sizes) == count and max(sizes) <= MAX_BATCH and len(sizes) <= 4
    sent = [r["steps_completed"] for body in bodies for r in body["reports"]]
    assert sent == list(range(1, count + 1))


def test_reporting_after_close_is_an_error() -> None:
    sender = _sender(lambda request: Response(200, json={}))
    sender.close()
    with pytest.raises(ReportError, match="after the harness was closed"):
        sender.report(_training(1), "training metrics at 1 batches")


def test_a_report_interval_that_is_no_number_is_named(on_platform: None, plane_kit, monkeypatch) -> None:
    monkeypatch.setenv("STRATUS_REPORT_INTERVAL", "soon")
    with pytest.raises(
        InvalidEnvironmentError, match="STRATUS_REPORT_INTERVAL='soon' is not a number of seconds"
    ):
        harness.init(transport=plane_kit.FakePlane().transport())


def test_a_trial_whose_agent_watches_for_stops_heartbeats_once_a_minute(
    on_platform: None, plane_kit, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    from stratus.harness.core._preempt import AGENT_WATCHED_HEARTBEAT_S, HEARTBEAT_INTERVAL_S

    with harness.init(transport=plane_kit.FakePlane().transport()) as ctx:
        assert ctx.preempt._interval == HEARTBEAT_INTERVAL_S  # nothing else would tell it to stop
    monkeypatch.setenv("STRATUS_PREEMPT_FILE", str(tmp_path / "preempt.requested"))
    with harness.init(transport=plane_kit.FakePlane().transport()) as ctx:
        assert ctx.preempt._interval == AGENT_WATCHED_HEARTBEAT_S
