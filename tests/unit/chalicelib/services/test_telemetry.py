"""CloudWatch metrics from the services (`chalicelib.services.telemetry`), on the in-memory twin: what a
trial's reports chart, what a scheduling pass tells of its pool, failures as restarts or errors, and an
experiment's dashboard."""

from __future__ import annotations

from chalicelib.domain.telemetry import MAX_NAMES_PER_GROUP
from chalicelib.services import runs, scheduler, telemetry, trial_reports
from chalicelib.services.trial_reports import MetricsReport, ProgressReport
from stratus.contract import messages


def _running(ports, flow, config=None):
    (trial_id,) = flow.trial_ids(flow.submit(config).id)
    spec = flow.place(trial_id)
    runs.started(ports, "agent-1", spec["run_id"], 10)
    ports.telemetry.data.clear()  # the passes that placed it
    return ports.runs.get(spec["run_id"])


def test_a_batch_of_reports_charts_training_and_validation_scalars_only(ports, flow):
    run = _running(ports, flow)
    trial_reports.report_batch(
        ports,
        run,
        [
            MetricsReport("training", 5, {"loss": 0.9, "lr": 0.1, "note": "text", "flag": True}),
            MetricsReport("training", 10, {"loss": 0.7, "lr": 0.1}),
            MetricsReport("validation", 10, {"loss": 0.8, "nan": float("nan")}),
            MetricsReport("inference", 10, {"latency": 3.0}),  # a custom group: stored, not charted
            ProgressReport(0.5),
        ],
    )
    trial = {"experiment": str(run.experiment_id), "trial": str(run.trial_id)}
    assert ports.telemetry.values("training.loss", **trial) == [0.9, 0.7]
    assert ports.telemetry.values("training.lr", **trial) == [0.1, 0.1]
    assert ports.telemetry.values("validation.loss", **trial) == [0.8]
    assert {d.name for d, _ in ports.telemetry.data} == {"training.loss", "training.lr", "validation.loss"}
    assert {at for _, at in ports.telemetry.data} == {ports.clock.now()}
    assert ports.metrics.list(run.trial_id, "inference")  # the API keeps what is not charted


def test_a_report_charts_the_searcher_metric_and_a_bounded_number_of_others(ports, flow):
    run = _running(ports, flow, {**flow.SINGLE, "searcher": {**flow.SINGLE["searcher"], "metric": "z_acc"}})
    many = {f"m{i:02d}": float(i) for i in range(50)} | {"z_acc": 0.5}
    trial_reports.report_metrics(ports, run, "validation", 10, many)
    names = [d.name for d, _ in ports.telemetry.data]
    assert names == ["validation.z_acc"] + [f"validation.m{i:02d}" for i in range(MAX_NAMES_PER_GROUP)]


def test_a_pass_tells_its_pools_queue_slots_instances_and_oldest_wait(ports, flow):
    experiment, *_ = flow.running_and_queued(flow.TWO_AT_ONCE)
    ports.telemetry.data.clear()
    ports.clock.advance(20)  # within the agent timeout
    runs.heartbeat(ports, "agent-1", "default", 1, [flow.ports.runs.allocated("default")[0].run_id])
    scheduler.schedule_pool(ports, "default")
    pool = {"pool": "default"}
    seen = {name: ports.telemetry.values(name, **pool) for name in telemetry_names()}
    assert seen == {
        "QueueDepth": [1.0],
        "PendingSlots": [1.0],
        "SlotsUsed": [1.0],
        "SlotsIdle": [0.0],
        "Instances": [1.0],
        "Preemptions": [0.0],
        "SilentRuns": [0.0],
        "OldestWaitSeconds": [20.0],
    }


def test_an_idle_pool_and_a_silent_agent_are_told_too(ports, flow):
    run = _running(ports, flow)
    ports.clock.advance(ports.settings.agent_timeout_s + 1)
    runs.heartbeat(ports, "agent-2", "default", 4, [])
    ports.telemetry.data.clear()
    scheduler.handle_message(ports, messages.Sweep("default"))
    assert ports.runs.get(run.run_id).state == "EXITED"
    pool = {"pool": "default"}
    assert ports.telemetry.values("SilentRuns", **pool) == [1.0]
    assert ports.telemetry.values("QueueDepth", **pool) == [0.0]
    assert ports.telemetry.values("SlotsIdle", **pool) == [4.0]
    assert ports.telemetry.values("OldestWaitSeconds", **pool) == [0.0]
    # The lost run failed: the trial has restarts left (max_restarts 5), so it is a restart.
    assert ports.telemetry.values("Restarts", **pool) == [1.0]
    assert ports.telemetry.values("Errors", **pool) == []


def test_a_pool_at_zero_puts_no_metric(ports):
    scheduler.handle_message(ports, messages.Sweep("default"))  # no agent, nothing queued or held
    assert ports.telemetry.values("Instances", pool="default") == []
    assert ports.telemetry.values("QueueDepth", pool="default") == []
    runs.heartbeat(ports, "agent-1", "default", 4, [])  # an agent alive: charted again
    scheduler.handle_message(ports, messages.Sweep("default"))
    assert ports.telemetry.values("Instances", pool="default")[-1:] == [1.0]


def test_a_failure_without_restarts_left_is_an_error_and_a_clean_exit_nothing(ports, flow):
    run = _running(ports, flow, {**flow.SINGLE, "max_restarts": 0})
    runs.exited(ports, "agent-1", run.run_id, 1, "exited with code 1")
    assert ports.telemetry.values("Errors", pool="default") == [1.0]
    other = _running(ports, flow)
    runs.exited(ports, "agent-1", other.run_id, 0, "exited with code 0")
    assert ports.telemetry.values("Errors", pool="default") == []  # cleared by `_running`: none since
    assert ports.telemetry.values("Restarts", pool="default") == []


def test_an_experiments_dashboard_has_a_graph_per_trial(ports, flow):
    config = {**flow.TWO_AT_ONCE, "searcher": {**flow.TWO_AT_ONCE["searcher"], "max_concurrent_trials": 3}}
    experiment = flow.submit(config)
    trial_ids = flow.trial_ids(experiment.id)
    made = telemetry.experiment_dashboard(ports, experiment.id)
    name = f"{ports.settings.stack}-experiment-{experiment.id}"
    region = ports.settings.region
    assert (made.name, made.trials) == (name, 3)
    assert made.url == (
        f"https://{region}.console.aws.amazon.com/cloudwatch/home?region={region}#dashboards/dashboard/{name}"
    )
    titles = [w["properties"].get("title") for w in ports.telemetry.dashboards[name]["widgets"]]
    assert [t for t in titles if t and t.startswith("Trial ")] == [f"Trial {t}" for t in trial_ids]


def telemetry_names():
    return (
        "QueueDepth",
        "PendingSlots",
        "SlotsUsed",
        "SlotsIdle",
        "Instances",
        "Preemptions",
        "SilentRuns",
        "OldestWaitSeconds",
    )
