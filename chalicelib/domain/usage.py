"""What a run used: its time on an instance, its share of that instance, what that cost and what of it
was waste. Pure arithmetic over the run's timestamps (`Run.assigned_at` ... `exited_at`).

Attribution: a run holds ``slots`` of an instance that offers ``instance_slots``; it is charged that
share of the instance's time (a 1-slot trial on a 4-GPU instance pays a quarter of its hours), so the
runs sharing one instance add up to the instance's busy time. A run on several instances (a multi-node
run) holds more slots than one instance offers: its share is above 1.

Waste is time on the instance not spent training, split three ways:

- ``startup``: from the slots' assignment to the process's start (launch, image pull, context download);
  a run that never started is all startup.
- ``lost``: after an exit that is not clean (a preemption without a checkpoint, a lost agent, an error),
  the work since the run's last checkpoint (or since its start, with none in the run): it is redone.
- ``idle``: after a clean exit, the time from the run's last checkpoint to its exit (its last validation,
  teardown); nothing is lost, but the instance was not training.

Each run is recorded once, keyed by its id (`Trial.usage`): a second report of the same exit replaces
the same entry and is never added twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Instance:
    """What a run ran on: its type (`local` for a local agent), spot or on-demand, its GPUs and the
    slots its agent offers."""

    type: str
    spot: bool = False
    gpus: int = 0
    slots: int = 1

    @classmethod
    def of(cls, item: Mapping[str, Any]) -> Instance:
        return cls(
            type=str(item.get("type") or "unknown"),
            spot=bool(item.get("spot", False)),
            gpus=int(item.get("gpus") or 0),
            slots=max(int(item.get("slots") or 1), 1),
        )

    def to_item(self) -> dict[str, Any]:
        return {"type": self.type, "spot": self.spot, "gpus": self.gpus, "slots": self.slots}


@dataclass(frozen=True)
class RunUsage:
    """One run's use of its instance. Every ``*_s`` is instance-seconds: wall seconds times ``share``."""

    run_id: str
    instance_type: str
    spot: bool
    gpus: int
    slots: int
    share: float
    seconds: float
    startup_s: float
    lost_s: float
    idle_s: float
    usd_per_hour: float
    usd: float
    #: Where the price came from ("committed 2025-06", "price-list 2026-01-05 spot", "unknown: ...").
    price_source: str
    priced: bool = True

    @property
    def training_s(self) -> float:
        return max(self.seconds - self.startup_s - self.lost_s - self.idle_s, 0.0)

    @property
    def waste_s(self) -> float:
        return self.startup_s + self.lost_s + self.idle_s

    def to_item(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def of(cls, item: Mapping[str, Any]) -> RunUsage:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in item.items() if k in names})


def _epoch(value: str | None) -> float | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else None


def run_usage(
    run_id: str,
    *,
    slots: int,
    instance: Instance,
    usd_per_hour: float,
    price_source: str,
    priced: bool = True,
    assigned_at: str | None,
    started_at: str | None,
    exited_at: str,
    last_checkpoint_at: str | None = None,
    clean: bool,
) -> RunUsage:
    """A run's usage from its timestamps (ISO-8601): on the instance from its assignment to its exit;
    ``clean``: it exited on its own with code 0 (completed, paused, drained after a checkpoint)."""
    end = _epoch(exited_at) or 0.0
    begin = min(_epoch(assigned_at) or end, end)
    started = _epoch(started_at)
    wall = end - begin
    startup = wall if started is None else min(max(started - begin, 0.0), wall)
    checkpoint = _epoch(last_checkpoint_at)
    in_run = checkpoint is not None and started is not None and started <= checkpoint <= end
    tail = 0.0
    if started is not None:
        tail = end - (checkpoint if in_run and checkpoint is not None else max(started, begin))
        tail = min(max(tail, 0.0), wall - startup)
    lost = 0.0 if clean else tail
    idle = tail if clean and in_run else 0.0
    share = slots / max(instance.slots, 1)
    seconds = wall * share
    return RunUsage(
        run_id=run_id,
        instance_type=instance.type,
        spot=instance.spot,
        gpus=instance.gpus,
        slots=slots,
        share=share,
        seconds=seconds,
        startup_s=startup * share,
        lost_s=lost * share,
        idle_s=idle * share,
        usd_per_hour=usd_per_hour,
        usd=seconds / 3600 * usd_per_hour,
        price_source=price_source,
        priced=priced,
    )


@dataclass(frozen=True)
class UsageLine:
    """Usage summed over runs of one instance type and lifecycle (or over everything: ``instance_type``
    "total")."""

    instance_type: str
    spot: bool | None
    gpus: int
    runs: int
    seconds: float
    training_s: float
    startup_s: float
    lost_s: float
    idle_s: float
    usd: float
    #: False when some run's instance type had no price (its cost counted 0).
    priced: bool


def summarize(usages: Iterable[RunUsage]) -> tuple[list[UsageLine], UsageLine]:
    """The usage by instance type and lifecycle (most expensive first), and its total."""
    groups: dict[tuple[str, bool], list[RunUsage]] = {}
    every = list(usages)
    for usage in every:
        groups.setdefault((usage.instance_type, usage.spot), []).append(usage)
    lines = [_line(name, spot, runs) for (name, spot), runs in groups.items()]
    lines.sort(key=lambda line: (-line.usd, -line.seconds, line.instance_type))
    return lines, _line("total", None, every)


def _line(name: str, spot: bool | None, runs: list[RunUsage]) -> UsageLine:
    return UsageLine(
        instance_type=name,
        spot=spot,
        gpus=max((u.gpus for u in runs), default=0),
        runs=len(runs),
        seconds=sum(u.seconds for u in runs),
        training_s=sum(u.training_s for u in runs),
        startup_s=sum(u.startup_s for u in runs),
        lost_s=sum(u.lost_s for u in runs),
        idle_s=sum(u.idle_s for u in runs),
        usd=sum(u.usd for u in runs),
        priced=all(u.priced for u in runs),
    )


def trial_usages(usage: Mapping[str, Mapping[str, Any]]) -> list[RunUsage]:
    """A trial record's `usage` map (run id -> entry) as values, in run order."""
    return [RunUsage.of(entry) for _, entry in sorted(usage.items())]
