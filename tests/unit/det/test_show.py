"""`det experiment list|describe` and `det trial describe|logs` against the fake API of
tests/unit/det/fakes.py."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
import yaml

from det._logs import MAX_EMPTY_PAGES
from det._runtime import DEFAULT_MASTER

# --- experiment list / describe ----------------------------------------------------------------


def _seed(api) -> None:
    api.experiments[1] = api.experiment(
        1,
        name="mnist",
        state="COMPLETED",
        progress=1.0,
        end_time="2024-05-01T13:00:00+00:00",
        labels=["b", "a"],
        description="baseline",
    )
    api.experiments[2] = api.experiment(2, name="cifar", owner="bob", progress=0.25)
    api.trials[5] = api.trial(
        5,
        1,
        state="COMPLETED",
        hparams={"lr": 0.1, "layers": 2},
        total_batches=200,
        best_validation=0.0312,
        latest_validation={"validation_loss": 0.0312, "accuracy": 0.99},
        latest_checkpoint={"uuid": "c-200", "steps_completed": 200},
        restarts=1,
        end_time="2024-05-01T13:00:00+00:00",
        exit={"code": 0, "reason": "completed"},
    )
    api.checkpoints[5] = [
        {
            "uuid": "c-200",
            "trial_id": 5,
            "experiment_id": 1,
            "steps_completed": 200,
            "state": "COMPLETED",
            "uri": "s3://bucket/checkpoints/1/5/c-200/",
            "resources": {"model.pt": 1024},
            "metadata": {},
            "report_time": "2024-05-01T12:59:00+00:00",
        },
        {
            "uuid": "c-100",
            "trial_id": 5,
            "experiment_id": 1,
            "steps_completed": 100,
            "state": "DELETED",
            "uri": "s3://bucket/checkpoints/1/5/c-100/",
            "resources": {},
            "metadata": {},
            "report_time": "2024-05-01T12:30:00+00:00",
        },
    ]
    api.metrics[(5, "training")] = [
        {
            "group": "training",
            "steps_completed": s,
            "metrics": {"loss": loss},
            "report_time": "2024-05-01T12:10:00+00:00",
        }
        for s, loss in ((100, 0.5), (200, 0.25))
    ]
    api.metrics[(5, "validation")] = [
        {
            "group": "validation",
            "steps_completed": 200,
            "metrics": {"validation_loss": 0.0312, "note": "text"},
            "report_time": "2024-05-01T12:58:00+00:00",
        }
    ]


def test_list_renders_determined_columns_oldest_first(api, table_rows) -> None:
    _seed(api)

    result = api.run("experiment", "list")

    assert result.code == 0
    rows = table_rows(result.out)
    assert rows[0] == [
        "ID",
        "Owner",
        "Name",
        "Parent ID",
        "State",
        "Progress",
        "Started",
        "Ended",
        "Resource Pool",
    ]
    assert [r[:6] + r[8:] for r in rows[1:]] == [
        ["1", "alice", "mnist", "", "COMPLETED", "100.0%", "default"],
        ["2", "bob", "cifar", "", "ACTIVE", "25.0%", "default"],
    ]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", rows[1][6])
    assert result.out.splitlines()[1].startswith("------+---------+")


def test_list_all_limit_and_json(api, table_rows) -> None:
    _seed(api)

    listed = api.run("e", "ls", "--all", "--limit", "1")
    raw = api.run("e", "list", "--json")

    assert table_rows(listed.out)[0][-1] == "Archived"
    assert [r[0] for r in table_rows(listed.out)[1:]] == ["2"]  # the newest one
    assert ("GET", "/experiments", {"limit": "1"}) in [(m, p, q) for m, p, q, _ in api.requests]
    assert [e["id"] for e in json.loads(raw.out)["experiments"]] == [2, 1]


def test_list_follows_the_cursor_and_applies_offset_and_limit(api, table_rows) -> None:
    for eid in range(1, 106):
        api.experiments[eid] = api.experiment(eid)

    listed = api.run("e", "list", "--offset", "2", "--limit", "101")

    # Newest first, the two newest skipped, 101 kept: ids 103 down to 3, shown oldest first.
    assert [int(r[0]) for r in table_rows(listed.out)[1:]] == list(range(3, 104))
    pages = [
        (q.get("cursor"), q["limit"]) for m, p, q, _ in api.requests if (m, p) == ("GET", "/experiments")
    ]
    assert pages == [(None, "100"), ("6", "3")]  # the second page starts below the first's last id


def test_bare_e_lists(api, table_rows) -> None:
    _seed(api)
    assert table_rows(api.run("e").out)[0][0] == "ID"


def test_describe_prints_experiment_and_trials(api, table_rows) -> None:
    _seed(api)

    result = api.run("experiment", "describe", "1")

    assert result.code == 0
    exp = table_rows(result.out, "Experiment:")
    assert exp[0] == [
        "Experiment ID",
        "State",
        "Progress",
        "Started",
        "Ended",
        "Name",
        "Description",
        "Archived",
        "Resource Pool",
        "Labels",
    ]
    assert [exp[1][i] for i in (0, 1, 2, 5, 6, 7, 8, 9)] == [
        "1",
        "COMPLETED",
        "100.0%",
        "mnist",
        "baseline",
        "False",
        "default",
        "a, b",
    ]
    trials = table_rows(result.out, "Trials:")
    assert trials[0] == [
        "Trial ID",
        "Experiment ID",
        "State",
        "Started",
        "Ended",
        "H-Params",
        "Restarts",
        "# of Batches",
        "Best Validation",
        "Latest Checkpoint",
    ]
    first = trials[1]
    assert [first[i] for i in (0, 1, 2, 5, 6, 7, 8, 9)] == [
        "5",
        "1",
        "COMPLETED",
        "{",
        "1",
        "200",
        "0.0312",
        "c-200",  # the latest checkpoint's UUID, as Determined shows a checkpoint
    ]
    hparams = [r[5] for r in trials[2:]]
    assert hparams == ['"lr": 0.1,', '"layers": 2', "}"]  # JSON spread over lines, like det
    assert "Workloads:" not in result.out


def test_describe_metrics_adds_workloads(api, table_rows) -> None:
    _seed(api)

    result = api.run("e", "describe", "1", "--metrics")

    rows = table_rows(result.out, "Workloads:")
    assert rows[0] == [
        "Trial ID",
        "# of Batches",
        "State",
        "Report Time",
        "Training Metric: loss",
        "Checkpoint State",
        "Checkpoint Report Time",
        "Validation State",
        "Validation Report Time",
        "Validation Metric: validation_loss",
    ]
    assert [r[:3] + [r[4], r[5], r[7], r[9]] for r in rows[1:]] == [
        ["5", "100", "COMPLETED", "0.5", "DELETED", "", ""],
        ["5", "200", "COMPLETED", "0.25", "COMPLETED", "COMPLETED", "0.0312"],
    ]


def test_describe_json_and_several_ids(api) -> None:
    _seed(api)

    one = json.loads(api.run("e", "describe", "1", "--json").out)
    two = json.loads(api.run("e", "describe", "1,2", "--json").out)

    assert one["experiment"]["id"] == 1 and one["trials"][0]["id"] == 5
    assert [a["experiment"]["id"] for a in two] == [1, 2]


def test_describe_unknown_id_names_it(api) -> None:
    result = api.run("e", "describe", "42")

    assert result.code == 1
    assert result.err == "Error: experiment 42 does not exist; `det experiment list --all` shows the ids\n"


def test_describe_rejects_a_non_numeric_id(api) -> None:
    result = api.run("e", "describe", "1,x")

    assert result.code == 2
    assert result.err.startswith("Error: experiment id 'x' is not a number")
    assert api.requests == []


# --- trial describe / logs ---------------------------------------------------------------------


def test_trial_describe(api, table_rows) -> None:
    _seed(api)

    result = api.run("trial", "describe", "5")

    assert result.code == 0
    rows = table_rows(result.out)
    assert rows[0] == [
        "Trial ID",
        "Experiment ID",
        "State",
        "H-Params",
        "Started",
        "Ended",
        "Restarts",
        "# of Batches",
        "Exit",
    ]
    assert [rows[1][i] for i in (0, 1, 2, 3, 6, 7, 8)] == [
        "5",
        "1",
        "COMPLETED",
        "{",
        "1",
        "200",
        "completed (exit code 0)",
    ]
    checkpoints = table_rows(result.out, "Checkpoints:")
    assert checkpoints[0] == ["UUID", "Steps", "State", "Report Time", "URI"]
    assert [[r[0], r[1], r[2], r[4]] for r in checkpoints[1:]] == [
        ["c-100", "100", "DELETED", "s3://bucket/checkpoints/1/5/c-100/"],
        ["c-200", "200", "COMPLETED", "s3://bucket/checkpoints/1/5/c-200/"],
    ]
    assert "Best validation:   0.0312" in result.out
    assert "Latest validation: accuracy=0.99, validation_loss=0.0312" in result.out


def test_trial_describe_metrics_and_json(api, table_rows) -> None:
    _seed(api)

    table = api.run("t", "describe", "5", "--metrics")
    raw = json.loads(api.run("t", "describe", "5", "--metrics", "--json").out)

    assert table_rows(table.out, "Workloads:")[0][4] == "Training Metric: loss"
    assert raw["trial"]["id"] == 5 and len(raw["checkpoints"]) == 2
    assert [m["steps_completed"] for m in raw["metrics"]["training"]] == [100, 200]


def _seed_custom_groups(api) -> None:
    for group, steps in (("inf%er en/ce", (3, 9)), ("group_b", (2,))):
        api.metrics[(5, group)] = [
            {
                "group": group,
                "steps_completed": s,
                "metrics": {f"z{group}/me.t r%i]\\c_0": s * 1.5, "m0": s},
                "report_time": "2024-05-01T12:20:00+00:00",
            }
            for s in steps
        ]


def test_trial_describe_metrics_lists_each_custom_group_by_name(api, table_rows) -> None:
    _seed(api)
    _seed_custom_groups(api)

    table = api.run("t", "describe", "5", "--metrics")
    raw = json.loads(api.run("t", "describe", "5", "--metrics", "--json").out)

    assert table.out.index("Metric group: group_b") < table.out.index("Metric group: inf%er en/ce")
    rows = table_rows(table.out, "Metric group: inf%er en/ce")
    assert rows[0] == [
        "Trial ID",
        "# of Batches",
        "Report Time",
        "Metric: m0",
        "Metric: zinf%er en/ce/me.t r%i]\\c_0",
    ]
    assert [(r[0], r[1], r[3], r[4]) for r in rows[1:]] == [("5", "3", "3", "4.5"), ("5", "9", "9", "13.5")]
    assert (
        table_rows(table.out, "Workloads:")[0][4] == "Training Metric: loss"
    )  # the built-in groups as before
    assert list(raw["metrics"]) == ["training", "validation", "group_b", "inf%er en/ce"]
    asked = [p["group"] for m, path, p, _ in api.requests if path.endswith("/trials/5/metrics")]
    assert "inf%er en/ce" in asked


def test_experiment_describe_metrics_lists_custom_groups(api, table_rows) -> None:
    _seed(api)
    _seed_custom_groups(api)

    result = api.run("e", "describe", "1", "--metrics")

    assert table_rows(result.out, "Metric group: group_b")[1][:2] == ["5", "2"]


def test_trial_unknown_id_names_it(api) -> None:
    for argv in (("t", "describe", "99"), ("t", "logs", "99")):
        result = api.run(*argv)
        assert result.code == 1
        assert result.err.startswith("Error: trial 99 does not exist;")
        assert result.err.count("\n") == 1


def test_trial_logs_head_tail_and_timestamps(api) -> None:
    _seed(api)
    api.log(5, "one", "two", "three", "four")
    api.logs[5][1]["rank"] = 1

    assert api.run("t", "logs", "5").out == "one\n[rank=1] two\nthree\nfour\n"
    assert api.run("t", "logs", "5", "--tail", "2").out == "three\nfour\n"
    assert api.run("t", "logs", "5", "--head", "1").out == "one\n"
    stamped = api.run("t", "logs", "5", "--head", "1", "--timestamps").out
    assert stamped == "[2024-05-01T12:00:00.000Z] one\n"
    assert api.sleeps == 0  # without -f nothing waits
    # A launcher's line carries its prefix already (the agent keeps it in the message): shown once.
    api.logs[5][2].update(rank=0, message="[rank=0] three")
    assert api.run("t", "logs", "5").out == "one\n[rank=1] two\n[rank=0] three\nfour\n"


def test_trial_logs_follow_until_terminal_and_drained(api) -> None:
    api.trials[5] = api.trial(5, 1)
    api.log(5, "a")

    def finish() -> None:
        api.log(5, "b")
        api.trials[5]["state"] = "COMPLETED"

    api.events = [lambda: api.log(5, "x"), finish]

    result = api.run("t", "logs", "5", "-f")

    assert (result.code, result.out) == (0, "a\nx\nb\n")


def test_trial_logs_follow_reads_once_more_after_the_end(api) -> None:
    """Lines that land between the logs read and the state read of one answer are not lost."""
    api.trials[5] = api.trial(5, 1, state="COMPLETED")
    api.log(5, "a")
    original = api._logs
    answered = 0

    def late_line(params: dict[str, str], body: Any, tid: int) -> httpx.Response:
        nonlocal answered
        response = original(params, body, tid)
        answered += 1
        if answered == 2:
            api.log(5, "late")
        return response

    api._logs = late_line  # type: ignore[method-assign]
    assert api.run("t", "logs", "5", "-f").out == "a\nlate\n"


def test_trial_logs_follow_waits_for_a_log_that_does_not_exist_yet(api) -> None:
    """Before the first line there is no log stream: the API answers no lines and no cursor."""
    api.trials[5] = api.trial(5, 1, state="QUEUED")
    original = api._logs

    def no_stream_yet(params: dict[str, str], body: Any, tid: int) -> httpx.Response:
        if not api.logs.get(tid):
            return httpx.Response(
                200, json={"logs": [], "next_token": None, "trial_state": api.trials[tid]["state"]}
            )
        return original(params, body, tid)

    def finish() -> None:
        api.log(5, "first")
        api.trials[5]["state"] = "COMPLETED"

    api._logs = no_stream_yet  # type: ignore[method-assign]
    api.events = [lambda: None, finish]

    assert api.run("t", "logs", "5", "-f").out == "first\n"


def test_trial_logs_read_past_empty_pages_while_the_cursor_moves(api) -> None:
    """CloudWatch may answer an empty page with a new cursor in the middle of a stream."""
    api.trials[5] = api.trial(5, 1, state="COMPLETED")
    pages = {None: (["a"], "t1"), "t1": ([], "t2"), "t2": ([], "t3"), "t3": (["b"], "t4"), "t4": ([], "t4")}

    def gappy(params: dict[str, str], body: Any, tid: int) -> httpx.Response:
        messages, token = pages[params.get("next_token")]
        logs = [{"timestamp": 0, "message": m, "rank": None} for m in messages]
        return httpx.Response(200, json={"logs": logs, "next_token": token, "trial_state": "COMPLETED"})

    api._logs = gappy  # type: ignore[method-assign]

    assert api.run("t", "logs", "5").out == "a\nb\n"
    assert api.sleeps == 0


def test_trial_logs_read_on_past_any_number_of_pages_a_filter_emptied(api) -> None:
    """`--level ERROR` over a long log: pages the API read and filtered to nothing are not the end."""
    api.trials[5] = api.trial(5, 1, state="COMPLETED")
    last = 3 * MAX_EMPTY_PAGES

    def filtered(params: dict[str, str], body: Any, tid: int) -> httpx.Response:
        at = int(params.get("next_token", "0"))
        logs = [{"timestamp": 0, "message": "ERROR: at last", "rank": None}] if at == last else []
        answer = {"logs": logs, "next_token": str(min(at + 1, last + 1)), "trial_state": "COMPLETED"}
        return httpx.Response(200, json=answer | {"lines_read": 1000 if at <= last else 0})

    api._logs = filtered  # type: ignore[method-assign]

    assert api.run("t", "logs", "5", "--level", "ERROR").out == "ERROR: at last\n"


def test_trial_logs_tail_holds_even_if_the_api_sends_more(api) -> None:
    api.trials[5] = api.trial(5, 1, state="COMPLETED")
    api.log(5, "one", "two", "three")
    original = api._logs
    api._logs = lambda params, body, tid: original(
        {k: v for k, v in params.items() if k != "tail"}, body, tid
    )  # type: ignore[method-assign]

    assert api.run("t", "logs", "5", "--tail", "1").out == "three\n"


def test_trial_logs_never_rereads_a_cursor_that_did_not_move(api) -> None:
    """An API that answers the same lines for the same cursor must not make the CLI spin."""
    api.trials[5] = api.trial(5, 1, state="COMPLETED")
    line = {"timestamp": 0, "message": "again", "rank": None}
    api._logs = lambda params, body, tid: httpx.Response(  # type: ignore[method-assign]
        200, json={"logs": [line], "next_token": params.get("next_token", "t1"), "trial_state": "COMPLETED"}
    )

    assert api.run("t", "logs", "5").out == "again\nagain\n"  # the first read, one re-read: then stop


# --- archived experiments, --csv, the owner, log levels ---------------------------------------------


def test_list_hides_archived_experiments_unless_all(api, table_rows) -> None:
    _seed(api)
    api.experiments[3] = api.experiment(3, name="mnist (test mode)", state="COMPLETED", archived=True)

    shown = api.run("e", "list")
    everything = api.run("e", "list", "--all")

    assert [r[0] for r in table_rows(shown.out)[1:]] == ["1", "2"]
    assert api.requests[0][2] == {"limit": "100", "archived": "false"}
    assert [(r[0], r[-1]) for r in table_rows(everything.out)[1:]] == [
        ("1", "False"),
        ("2", "False"),
        ("3", "True"),
    ]


def test_archive_and_unarchive_an_ended_experiment(api) -> None:
    _seed(api)

    archived = api.run("e", "archive", "1")
    unarchived = api.run("experiment", "unarchive", "1")
    active = api.run("e", "archive", "2")
    unknown = api.run("e", "archive", "9")

    assert (archived.code, archived.out) == (0, "Archived experiment 1\n")
    assert (unarchived.code, unarchived.out) == (0, "Unarchived experiment 1\n")
    assert api.calls("POST") == [
        "POST /experiments/1/archive",
        "POST /experiments/1/unarchive",
        "POST /experiments/2/archive",
        "POST /experiments/9/archive",
    ]
    assert (active.code, active.err) == (1, "Error: experiment 2 has not ended; wait for it to end\n")
    assert unknown.err == ("Error: experiment 9 does not exist; `det experiment list --all` shows the ids\n")


def test_list_and_describe_print_csv_with_the_same_columns(api) -> None:
    _seed(api)

    listed = api.run("e", "list", "--csv")
    described = api.run("e", "describe", "1", "--csv")

    header, *rows = listed.out.splitlines()
    assert header == "ID,Owner,Name,Parent ID,State,Progress,Started,Ended,Resource Pool"
    assert [r.split(",")[:6] + r.split(",")[8:] for r in rows] == [
        ["1", "alice", "mnist", "", "COMPLETED", "100.0%", "default"],
        ["2", "bob", "cifar", "", "ACTIVE", "25.0%", "default"],
    ]
    assert rows[1].split(",")[7] == ""  # no end: a blank
    experiment, trials = described.out.split("\n\nTrials:\n")
    assert experiment.splitlines()[:2] == [
        "Experiment:",
        "Experiment ID,State,Progress,Started,Ended,Name,Description,Archived,Resource Pool,Labels",
    ]
    assert experiment.splitlines()[2].endswith(',mnist,baseline,False,default,"a, b"')
    assert trials.splitlines()[0] == (
        "Trial ID,Experiment ID,State,Started,Ended,H-Params,Restarts,# of Batches,Best Validation,"
        "Latest Checkpoint"
    )
    workloads = api.run("e", "describe", "1", "--metrics", "--csv").out.split("\n\nWorkloads:\n")[1]
    assert workloads.splitlines()[0].startswith(
        "Trial ID,# of Batches,State,Report Time,Training Metric: loss,"
    )
    assert workloads.splitlines()[1].startswith("5,100,COMPLETED,")
    # The H-Params JSON stays one quoted cell over several lines, as the csv module writes it.
    assert '"{\n    ""lr"": 0.1,\n    ""layers"": 2\n}",1,200,0.0312,c-200' in trials


def test_trial_describe_prints_csv(api) -> None:
    _seed(api)

    result = api.run("t", "describe", "5", "--csv")

    assert result.code == 0
    assert result.out.splitlines()[0] == (
        "Trial ID,Experiment ID,State,H-Params,Started,Ended,Restarts,# of Batches,Exit"
    )
    assert "\nCheckpoints:\nUUID,Steps,State,Report Time,URI\nc-100,100,DELETED," in result.out


def test_create_names_the_os_user_as_the_owner(api, tmp_path) -> None:
    config = tmp_path / "const.yaml"
    config.write_text("entrypoint: python3 train.py\nsearcher: {name: single, metric: loss}\n")

    api.run("e", "create", str(config), environ={"USER": "carol"})
    api.run("e", "list", environ={"LOGNAME": "dave", "USER": "carol"})  # getpass's order

    assert api.experiments[1]["owner"] == "carol"
    assert api.headers["x-stratus-user"] == "dave"


def test_trial_logs_level_keeps_that_level_and_higher(api, capsys) -> None:
    _seed(api)
    api.log(5, "INFO: [7] root: loading", "a print", "WARNING:root:slow batch", "[rank=1] ERROR: [7] x: bad")

    warnings = api.run("t", "logs", "5", "--level", "warning")
    wrong = api.run("t", "logs", "5", "--level", "LOUD")

    assert warnings.out == "WARNING:root:slow batch\n[rank=1] ERROR: [7] x: bad\n"
    assert {r[2].get("level") for r in api.requests} == {"WARNING"}  # the API filters
    assert wrong.code == 2 and "invalid choice: 'LOUD'" in capsys.readouterr().err  # argparse's


# ---- det version, det master info ---------------------------------------------------------------------


def test_version_shows_the_cli_and_the_api_as_determined_does(api):
    from det._master import client_version

    api.info = {**api.info, "version": client_version()}
    result = api.run("version")
    assert result.code == 0, result.err
    shown = yaml.safe_load(result.out)
    assert shown == {
        "client": {"version": client_version()},
        "master": {"cluster_id": "lab", "region": "eu-west-1", "version": client_version()},
        "master_address": DEFAULT_MASTER,
    }
    assert result.err == ""


def test_version_says_which_side_is_older_and_works_without_an_api(api):
    api.info = {**api.info, "version": "999.0.0"}
    newer = api.run("version")
    assert newer.code == 0 and "CLI behind: the version of the CLI" in newer.err
    assert "is older than the API's (999.0.0): upgrade the CLI: pip install --upgrade" in newer.err
    api.transport = httpx.MockTransport(lambda request: (_ for _ in ()).throw(httpx.ConnectError("refused")))
    away = api.run("version")
    assert away.code == 0
    assert yaml.safe_load(away.out)["master"] == {"cluster_id": "", "region": "", "version": ""}
    assert f"Master not found at {DEFAULT_MASTER}" in away.err and "DET_MASTER" in away.err


def test_master_info_prints_the_apis_info_as_yaml_or_json(api):
    shown = api.run("master", "info")
    assert shown.code == 0, shown.err
    assert yaml.safe_load(shown.out) == api.info
    assert json.loads(api.run("master", "info", "--json").out) == api.info
    assert ("GET", "/info") in [(m, p) for m, p, *_ in api.requests]


# ---- det agent enable | disable -------------------------------------------------------------------------


@pytest.fixture
def toggling(api):
    """The fake API with two agents and the enable/disable routes: gpu-1 holds run 3.1."""
    api.cluster["agents"] = [
        {"id": aid, "resource_pool": "default", "slots": 1, "slots_used": used, "containers": used,
         "last_heartbeat": "2026-11-26T10:00:00Z", "alive": True, "draining": False, "enabled": True}
        for aid, used in (("gpu-1", 1), ("gpu-2", 0))
    ]  # fmt: skip
    fallback = api.handle
    sent: list[tuple[str, Any]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        found = re.fullmatch(r"/agents/([^/]+)/(enable|disable)", request.url.path)
        if request.method == "POST" and found:
            agent_id, action = found.groups()
            body = json.loads(request.content) if request.content else None
            sent.append((f"{action} {agent_id}", body))
            held = ["3.1"] if agent_id == "gpu-1" else []
            drain = bool(body and body.get("drain"))
            moved = held if action == "disable" and not drain else []
            agent = next(a for a in api.cluster["agents"] if a["id"] == agent_id)
            answer = {"agent": {**agent, "enabled": action == "enable"}, "moved": moved}
            return httpx.Response(200, json={**answer, "remaining": [r for r in held if r not in moved]})
        return fallback(request)

    api.transport = httpx.MockTransport(handle)
    api.sent = sent
    return api


def test_agent_disable_moves_its_runs_and_says_so_as_determined_does(toggling):
    result = toggling.run("agent", "disable", "gpu-1")
    assert result.code == 0, result.err
    assert toggling.sent == [("disable gpu-1", {"drain": False})]
    assert result.err.splitlines() == [
        "Disabled agent gpu-1.",
        "  run 3.1 checkpoints and goes back to the queue (it resumes on another agent)",
    ]
    assert result.out == ""


def test_agent_disable_drain_lists_what_still_runs_and_all_takes_every_agent(toggling):
    result = toggling.run("agent", "disable", "--all", "--drain")
    assert result.code == 0, result.err
    assert toggling.sent == [("disable gpu-1", {"drain": True}), ("disable gpu-2", {"drain": True})]
    assert result.out.splitlines() == ["Tasks still in progress on draining nodes:", "  run 3.1 on gpu-1"]
    enabled = toggling.run("agent", "enable", "gpu-2")
    assert enabled.code == 0 and enabled.err == "Enabled agent gpu-2.\n"
    assert toggling.sent[-1] == ("enable gpu-2", None)


def test_agent_disable_needs_an_agent_or_all_and_the_list_shows_who_is_enabled(toggling):
    assert toggling.run("agent", "disable").code == 2
    assert toggling.run("agent", "disable", "gpu-1", "--all").code == 2
    toggling.cluster["agents"][0]["enabled"] = False
    listed = toggling.run("agent", "list")
    rows = [[c.strip() for c in line.split("|")] for line in listed.out.splitlines()[2:]]
    header = [c.strip() for c in listed.out.splitlines()[0].split("|")]
    enabled = header.index("Enabled")
    assert [(row[0], row[enabled]) for row in rows] == [("gpu-1", "False"), ("gpu-2", "True")]
