"""What each run cost, recorded when it ends; what a trial and an experiment cost, for `describe`.

A run's usage is recorded where its exit is (`runs._report_run_exit`: the agent's report, a lost agent,
a kill, a Batch or SageMaker job's end; `recovery`: runs lost with the stack), by whoever moved the run
to EXITED: that move is a conditional write, so a stale or repeated exit (SQS and agents deliver twice)
records nothing more, and the trial's `usage` map is keyed by run id, so even a repeated write replaces
its entry rather than adding to it.

The instance is what the run's agent said at its start (its instance type and spot or on-demand life
cycle from IMDS, its GPUs, its slots; `local` at no price for a local agent), else the pool's provider
(its first instance type). The run is charged its share of that instance: slots used / the instance's
slots (`chalicelib.domain.usage`). Prices come from the table the stack keeps current from AWS
(`chalicelib.services.prices`: `prices/ec2.json` in its bucket, or the operator's ``STRATUS_PRICES``),
else, per type, from the committed one (`stratus.contract.prices`).
"""

from __future__ import annotations

from typing import Any

from chalicelib.domain.records import Trial
from chalicelib.domain.run_records import Run
from chalicelib.domain.usage import Instance, RunUsage, run_usage, summarize, trial_usages
from chalicelib.services.ports import Ports
from chalicelib.services.prices import stack_table
from stratus.contract.pools import traits
from stratus.contract.prices import LOCAL, gpus_of, price_of


def instance_of(ports: Ports, run: Run) -> Instance:
    """What the run ran on: its agent's word, else its pool's provider, else `unknown`."""
    if run.instance:
        return Instance.of(run.instance)
    pool = ports.settings.pool(run.pool)
    slots = (pool.slots_per_agent if pool else None) or run.slots
    if pool is None or not traits(pool.backend).cloud:
        return Instance(LOCAL, slots=slots)
    provider = pool.provider
    if provider is None or not provider.instance_types:
        return Instance("unknown", slots=slots)
    kind = provider.instance_types[0]
    gpus = provider.gpus or gpus_of(kind, stack_table(ports)) or 0
    return Instance(kind, spot=provider.spot, gpus=gpus, slots=slots)


def record_run_usage(ports: Ports, run: Run, trial: Trial | None, exit_code: int) -> RunUsage | None:
    """Record what the run used, once it has exited (call it only after winning the run's move to
    EXITED); None when its trial is gone. A clean exit (code 0) wastes no work; any other loses the work
    since the run's last checkpoint."""
    if trial is None:
        return None
    instance = instance_of(ports, run)
    price = price_of(instance.type, instance.spot, stack_table(ports))
    checkpoint_at = None
    if trial.latest_checkpoint:
        stored = ports.checkpoints.get(trial.latest_checkpoint)
        checkpoint_at = stored.report_time if stored is not None and stored.report_time else None
    usage = run_usage(
        run.run_id,
        slots=run.slots,
        instance=instance,
        usd_per_hour=price.usd_per_hour,
        price_source=price.source,
        priced=price.known,
        assigned_at=run.assigned_at or run.launched_at,
        started_at=run.started_at,
        exited_at=run.exited_at or ports.clock.now_iso(),
        last_checkpoint_at=checkpoint_at,
        clean=exit_code == 0,
    )
    ports.trials.record_usage(trial.id, {**trial.usage, run.run_id: usage.to_item()})
    return usage


def cost_view(usages: list[RunUsage]) -> dict[str, Any] | None:
    """What runs cost, as the API shows it (`chalicelib.api.cost_models.Cost`); None with no run."""
    if not usages:
        return None
    lines, total = summarize(usages)
    return {"total": _line(total), "by_instance": [_line(line) for line in lines]}


def trial_cost(trial: Trial) -> dict[str, Any] | None:
    return cost_view(trial_usages(trial.usage))


def experiment_cost(trials: list[Trial]) -> dict[str, Any] | None:
    return cost_view([usage for trial in trials for usage in trial_usages(trial.usage)])


def _line(line: Any) -> dict[str, Any]:
    return {
        "instance_type": line.instance_type,
        "lifecycle": None if line.spot is None else ("spot" if line.spot else "on-demand"),
        "gpus": line.gpus,
        "runs": line.runs,
        "instance_s": round(line.seconds, 3),
        "training_s": round(line.training_s, 3),
        "waste": {
            "startup_s": round(line.startup_s, 3),
            "lost_s": round(line.lost_s, 3),
            "idle_s": round(line.idle_s, 3),
        },
        "usd": round(line.usd, 6),
        "priced": line.priced,
    }
