"""`det experiment dashboard | plot ID` against the fake API of tests/unit/det/fakes.py, with the routes
they read added in front of it (the `curves_api` fixture): an ASHA-like experiment of three trials, one
stopped early. Drawing the image is tests/integration/test_plot_command.py's (matplotlib may start a
process to list the fonts the first time it is imported)."""

from __future__ import annotations

import re
import sys

import httpx
import pytest

from det._monitoring import curve, training_metric

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
AWS_API = "https://api.stratus.example"  # a custom domain in front of API Gateway


@pytest.fixture
def curves_api(api):
    api.experiments[1] = api.experiment(
        1, name="asha", config={"searcher": {"name": "adaptive_asha", "metric": "val_loss"}}
    )
    for tid, rungs in ((4, 3), (5, 1), (6, 2)):
        api.trials[tid] = api.trial(tid, 1)
        api.metrics[(tid, "training")] = [
            {"steps_completed": s, "metrics": {"loss": 1 / (s + tid), "lr": 0.1}}
            for s in range(10, 10 * rungs * 3 + 1, 10)
        ]
        api.metrics[(tid, "validation")] = [
            {"steps_completed": 30 * r, "metrics": {"val_loss": 1 / (r + tid), "note": "x"}}
            for r in range(1, rungs + 1)
        ]
    fallback = api.handle

    def handle(request: httpx.Request) -> httpx.Response:
        method, path = request.method, request.url.path
        if re.fullmatch(r"/experiments/1/trials", path):
            api.requests.append((method, path, {}, None))
            return httpx.Response(200, json={"trials": [api.trials[t] for t in (4, 5, 6)]})
        if (method, path) == ("POST", "/experiments/1/dashboard"):
            api.requests.append((method, path, {}, None))
            url = "https://us-east-1.console.aws.amazon.com/cloudwatch/home?region=us-east-1#dashboards/dashboard/lab-experiment-1"
            return httpx.Response(200, json={"name": "lab-experiment-1", "url": url, "trials": 3})
        if (method, path) == ("POST", "/experiments/2/dashboard"):
            return httpx.Response(404, json={"error": "NotFound", "message": "experiment 2 not found"})
        return fallback(request)

    api.transport = httpx.MockTransport(handle)
    return api


def test_dashboard_asks_the_api_and_prints_the_console_url(curves_api):
    # An API in AWS: HTTPS (API Gateway serves nothing else); not the execute-api host, so not signed.
    result = curves_api.run("-m", AWS_API, "experiment", "dashboard", "1")
    assert result.code == 0, result.err
    assert "POST /experiments/1/dashboard" in curves_api.calls("POST")
    assert result.out.splitlines() == [
        "Dashboard lab-experiment-1 charts the 3 trials of experiment 1:",
        "https://us-east-1.console.aws.amazon.com/cloudwatch/home?region=us-east-1#dashboards/dashboard/lab-experiment-1",
    ]
    missing = curves_api.run("-m", AWS_API, "e", "dashboard", "2")
    assert missing.code != 0 and "experiment 2" in missing.err


def test_dashboard_on_the_local_stack_creates_nothing_and_names_what_shows_the_same_locally(curves_api):
    """The local stack's CloudWatch is moto's: a console URL would lead nowhere."""
    result = curves_api.run("experiment", "dashboard", "1")  # the default master: the local stack

    assert result.code == 1 and result.out == ""
    assert "POST /experiments/1/dashboard" not in curves_api.calls("POST")
    assert result.err.startswith(
        "Error: experiment 1's CloudWatch dashboard would live in the local stack's moto"
    )
    assert "`det experiment plot 1`" in result.err and "`det experiment describe 1 --metrics`" in result.err
    assert "console.aws.amazon.com" not in result.err
    # No TLS: not API Gateway, so the local stack wherever it runs.
    plain_http = curves_api.run("-m", "http://10.0.0.5:8080", "e", "dashboard", "1")
    assert plain_http.code == 1 and "det experiment plot 1" in plain_http.err
    unknown = curves_api.run("e", "dashboard", "9")
    assert unknown.code == 1 and unknown.err.startswith("Error: experiment 9 does not exist")


def test_plot_refuses_other_formats_and_says_how_to_get_matplotlib(curves_api, tmp_path, monkeypatch):
    wrong = curves_api.run("experiment", "plot", "1", "-o", str(tmp_path / "x.jpg"))
    assert wrong.code == 2 and "name a .png or .svg file" in wrong.err
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    missing = curves_api.run("experiment", "plot", "1", "-o", str(tmp_path / "x.png"))
    assert missing.code == 2
    assert "pip install 'matplotlib>=3.9'" in missing.err
    # The exact command: into the Python running det (the distribution is not on PyPI).
    assert missing.err.rstrip().endswith(f"{sys.executable} -m pip install 'matplotlib>=3.9'")
    assert curves_api.calls("GET") == []  # it fails before asking the API anything
    assert not (tmp_path / "x.png").exists()


def test_the_curves_are_the_reports_values_by_steps():
    reports = [
        {"steps_completed": 20, "metrics": {"loss": 0.5}},
        {"steps_completed": 10, "metrics": {"loss": 0.9, "acc": 0.1}},
        {"steps_completed": 30, "metrics": {"acc": 0.3, "loss": float("nan")}},
    ]
    assert curve(reports, "loss") == ([10, 20], [0.9, 0.5])
    assert training_metric(reports) == "loss"
    assert training_metric([{"metrics": {"b": 1, "a": "text", "c": 2}}]) == "b"
    assert training_metric([]) is None
