"""`det experiment plot ID` draws real PNG and SVG files with matplotlib, from the metrics an API serves
(an in-memory one here: three trials of an adaptive search, stopped at different rungs). An integration
test because matplotlib may start a process (the font list) the first time it is imported."""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import httpx

from det import cli
from det._runtime import Runtime

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
RUNGS = {4: 3, 5: 1, 6: 2}  # trial → rungs it reached (30 batches each)


def _answer(request: httpx.Request) -> httpx.Response:
    path = request.url.path
    if path == "/experiments/1":
        config = {"searcher": {"name": "adaptive_asha", "metric": "val_loss"}}
        return httpx.Response(
            200, json={"experiment": {"id": 1, "name": "asha", "config": config}, "trials": []}
        )
    if path == "/experiments/1/trials":
        return httpx.Response(200, json={"trials": [{"id": t, "experiment_id": 1} for t in RUNGS]})
    if match := re.fullmatch(r"/trials/(\d+)/metrics", path):
        tid, group = int(match.group(1)), request.url.params["group"]
        rungs = RUNGS[tid]
        if group == "training":
            rows = [
                {"steps_completed": s, "metrics": {"loss": 1 / (s + tid)}}
                for s in range(10, 30 * rungs + 1, 10)
            ]
        else:
            rows = [
                {"steps_completed": 30 * r, "metrics": {"val_loss": 1 / (r + tid)}}
                for r in range(1, rungs + 1)
            ]
        return httpx.Response(200, json={"metrics": rows})
    return httpx.Response(404, json={"error": "NotFound", "message": path})


def _plot(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rt = Runtime(environ={}, transport=httpx.MockTransport(_answer), out=out, err=err)
    code = cli.main(["experiment", "plot", "1", *argv], runtime=rt)
    return code, out.getvalue(), err.getvalue()


def test_plot_draws_every_trials_curves_into_a_png(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.chdir(tmp_path)
    code, out, err = _plot()
    assert code == 0, err
    assert (tmp_path / "experiment-1.png").read_bytes().startswith(PNG_MAGIC)
    # 9 + 3 + 6 training points and 3 + 1 + 2 validation points
    assert out.strip() == "Wrote experiment-1.png: 3 trials, 24 points"


def test_plot_writes_an_svg_with_a_line_per_trial(tmp_path: Path) -> None:
    image = tmp_path / "curves" / "asha.svg"
    code, _, err = _plot("-o", str(image))
    assert code == 0, err
    assert ET.parse(image).getroot().tag.endswith("svg")
    text = image.read_text()
    assert all(f"trial {t}" in text for t in RUNGS)  # the legends name every trial
    assert "validation val_loss" in text and "training loss" in text
