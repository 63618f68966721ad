"""`det experiment set ...` and `det experiment label ...` as a user runs them: the real CLI over real HTTP
to the Chalice app on a moto stack (`PATCH /experiments/{id}`), read back with `det experiment describe`."""

from __future__ import annotations

import io
import json
import os

import pytest

from det import cli
from det._runtime import Runtime

pytestmark = [
    pytest.mark.aws,
    pytest.mark.filterwarnings("ignore:IAMAuthorizer is not a supported in local mode"),
]


def _det(api, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    runtime = Runtime(environ={**os.environ, "DET_MASTER": api.url}, out=out, err=err)
    return cli.main(list(args), runtime=runtime), out.getvalue(), err.getvalue()


def _described(api, experiment_id: int) -> dict:
    code, out, err = _det(api, "experiment", "describe", "--json", str(experiment_id))
    assert code == 0, err
    return json.loads(out)["experiment"]


def test_name_description_and_labels_as_determined_prints_them(api):
    eid = api.experiment_id
    assert (
        _det(api, "e", "set", "name", str(eid), "renamed")[1]
        == f"Set name of experiment {eid} to 'renamed'\n"
    )
    said = _det(api, "e", "set", "description", str(eid), "a baseline")[1]
    assert said == f"Set description of experiment {eid} to 'a baseline'\n"
    assert _det(api, "e", "label", "add", str(eid), "keep")[1] == f"Added label 'keep' to experiment {eid}\n"
    _det(api, "e", "label", "add", str(eid), "drop")
    _det(api, "e", "label", "add", str(eid), "keep")  # a repeat adds nothing
    said = _det(api, "e", "label", "remove", str(eid), "drop")[1]
    assert said == f"Removed label 'drop' from experiment {eid}\n"
    shown = _described(api, eid)
    assert (shown["name"], shown["description"], shown["labels"]) == ("renamed", "a baseline", ["keep"])


def test_max_slots_is_set_shown_and_cleared_on_an_active_experiment(api):
    eid = api.experiment_id
    assert _described(api, eid)["max_slots"] is None
    code, out, _ = _det(api, "e", "set", "max-slots", str(eid), "3")
    assert (code, out) == (0, f"Set `max_slots` of experiment {eid} to 3\n")
    assert _described(api, eid)["max_slots"] == 3
    assert (
        _det(api, "e", "set", "max-slots", str(eid), "none")[1]
        == f"Set `max_slots` of experiment {eid} to None\n"
    )
    assert _described(api, eid)["max_slots"] is None


def test_bad_values_get_one_error_naming_them_and_change_nothing(api, capsys):
    eid = api.experiment_id
    before = _described(api, eid)
    code, _, _ = _det(api, "e", "set", "max-slots", str(eid), "0")
    assert code == 2 and "0 is not a slot count: give 1 or more, or none" in capsys.readouterr().err
    code, _, err = _det(api, "e", "set", "name", str(eid), "x" * 129)
    assert code == 1 and "name" in err and "128" in err
    code, _, err = _det(api, "e", "label", "add", "999999", "x")
    assert code != 0 and "experiment 999999 does not exist" in err
    assert _described(api, eid) == before
    answer = api.http.patch(f"/experiments/{eid}", json={"add_labels": "not-a-list"})
    assert answer.status_code == 400 and "add_labels" in answer.text
