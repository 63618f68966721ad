"""A run's usage recorded at its exit (`chalicelib.services.costs`), once, and shown by the API's views."""

from __future__ import annotations

import pytest

from chalicelib.api import views
from chalicelib.services import runs

G5 = {"type": "g5.12xlarge", "spot": True, "gpus": 4, "slots": 4}


def test_a_run_records_its_usage_once_at_its_exit(ports, flow):
    experiment = flow.submit()
    (trial_id,) = flow.trial_ids(experiment.id)
    spec = flow.place(trial_id, slots=4)
    ports.clock.advance(60)  # launch and pull
    runs.started(ports, "agent-1", spec["run_id"], pid=7, instance=G5)
    ports.clock.advance(3540)
    runs.exited(ports, "agent-1", spec["run_id"], 0, "exited with code 0")
    runs.exited(ports, "agent-1", spec["run_id"], 0, "exited with code 0")  # a repeated report
    trial = ports.trials.get(trial_id)
    assert list(trial.usage) == [spec["run_id"]]
    cost = views.trial(ports, trial).cost
    assert cost is not None and cost.total.runs == 1
    line = cost.by_instance[0]
    assert (line.instance_type, line.lifecycle, line.gpus) == ("g5.12xlarge", "spot", 4)
    assert line.instance_s == pytest.approx(3600 / 4)  # 1 slot of the instance's 4
    assert line.waste.startup_s == pytest.approx(60 / 4)
    assert line.usd > 0 and line.priced
    total = views.experiment_cost(ports.trials.for_experiment(experiment.id))
    assert total is not None and total.total.usd == pytest.approx(line.usd)


def test_a_lost_agent_loses_the_work_since_the_start_and_a_local_run_costs_nothing(ports, flow):
    (trial_id,) = flow.trial_ids(flow.submit().id)
    spec = flow.place(trial_id)
    runs.started(ports, "agent-1", spec["run_id"], pid=7)  # no instance said: the pool's (local)
    ports.clock.advance(600)
    run = ports.runs.get(spec["run_id"])
    assert runs.agents_lost(ports, run, ["agent-1"], 480)
    assert not runs.agents_lost(ports, run, ["agent-1"], 480)  # a second sweep records nothing more
    usage = views.trial(ports, ports.trials.get(trial_id)).cost
    assert usage is not None
    assert usage.total.instance_s == pytest.approx(600)
    assert usage.total.waste.lost_s == pytest.approx(600)
    assert (usage.by_instance[0].instance_type, usage.total.usd) == ("local", 0.0)
