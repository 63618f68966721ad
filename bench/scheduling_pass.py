"""One scheduling pass, in process: the issue-9 FIFO pass (`assign_fifo`, the baseline) against the
policies of `plan_pass` (priority without and with preemption, fair share without and with preemption)
over 1,000 / 10,000 / 100,000 queued requests and 100 / 1,000 agents of 8 slots. Run from the
repository root:

    .venv/bin/python bench/scheduling_pass.py [--repeats 5] [--write]

The workload is built from a fixed seed: 100 jobs (experiments) submitted one second apart, each with
an equal share of the requests; a request asks for 1 slot (70 %), 2 (15 %), 4 (10 %), 8 (4 %) or 16
(1 %, two whole agents); priorities 10, 42 (three in five) or 60. Half the pool's slots are held by
running runs of priority 42, 60 or 90 (2 % of them already stopping), so the preempting policies have
victims to choose from. The time is the median CPU time of ``--repeats`` passes (3 at 100,000
requests) of the pure function, inputs built beforehand; it includes sorting the queue and writing
every reason.

The two `head:` columns are the pass the scheduler runs since issue 12 (`queue_reading.plan_head`): it
reads the queue's head from its index page by page (here an in-process index: the requests sorted once,
pages served by bisection, so the time is the scheduler's own) and plans again after each page until no
request further back could be placed; the whole-queue columns are the policies over every request.
"""

from __future__ import annotations

import argparse
import bisect
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.machine import describe  # noqa: E402
from chalicelib.domain.queue_head import QueueSummary, sort_key  # noqa: E402
from chalicelib.domain.run_records import Run  # noqa: E402
from chalicelib.domain.scheduling import AgentCapacity, Holding, SlotRequest, assign_fifo  # noqa: E402
from chalicelib.domain.scheduling_policies import PoolPolicy, plan_pass, policy_for  # noqa: E402
from chalicelib.domain.states import RunState  # noqa: E402
from chalicelib.services.queue_reading import plan_head  # noqa: E402

SEED = 20261123
SLOTS_PER_AGENT = 8
JOBS = 100
REQUESTS = (1_000, 10_000, 100_000)
AGENTS = (100, 1_000)
GOAL_MS = 50.0

Workload = tuple[list[SlotRequest], list[Holding], list[AgentCapacity]]


def workload(requests: int, agents: int) -> Workload:
    rng = random.Random(f"{SEED}-{requests}-{agents}")
    base = 1_795_000_000.0
    queued = []
    for i in range(requests):
        job = i % JOBS
        slots = rng.choices([1, 2, 4, 8, 16], weights=[70, 15, 10, 4, 1])[0]
        queued.append(
            SlotRequest(
                run_id=f"{job}-{i}",
                slots=slots,
                priority=rng.choice([10, 42, 42, 42, 60]),
                queued_at=f"2026-11-23T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z",
                job_id=str(job),
                weight=1.0 + job % 3,
                queue_position=base + job,
            )
        )
    used = [0] * agents
    holdings = []
    target = agents * SLOTS_PER_AGENT // 2
    n = 0
    while sum(used) < target:
        agent = rng.randrange(agents)
        size = rng.choice([1, 1, 2, 4])
        if used[agent] + size > SLOTS_PER_AGENT:
            continue
        used[agent] += size
        job = rng.randrange(JOBS)
        holdings.append(
            Holding(
                run_id=f"held-{n}",
                job_id=str(job),
                slots=size,
                priority=rng.choice([42, 60, 90]),
                placements={f"agent-{agent:04d}": size},
                weight=1.0 + job % 3,
                queue_position=base + job,
                started_at=f"2026-11-23T00:{n // 60 % 60:02d}:{n % 60:02d}Z",
                stopping=rng.random() < 0.02,
            )
        )
        n += 1
    capacities = [AgentCapacity(f"agent-{i:04d}", SLOTS_PER_AGENT, used[i]) for i in range(agents)]
    return queued, holdings, capacities


class SortedQueue:
    """The queue's index, in process: requests sorted once by their sort key (as DynamoDB keeps them),
    pages served by bisection, so that a head pass's time is the scheduler's own."""

    def __init__(self, requests: list[SlotRequest]) -> None:
        runs = [
            Run(
                run_id=r.run_id,
                trial_id=i,
                experiment_id=int(r.job_id),
                pool="default",
                slots=r.slots,
                state=RunState.PENDING,
                priority=r.priority,
                weight=r.weight,
                queue_position=r.queue_position,
                queued_at=r.queued_at,
            )
            for i, r in enumerate(requests)
        ]
        self._all = self._index(runs)
        self._jobs = {
            job: self._index([r for r in runs if str(r.experiment_id) == job])
            for job in {q.job_id for q in requests}
        }
        sizes: dict[int, int] = {}
        jobs: dict[str, tuple[int, int]] = {}
        for r in requests:
            sizes[r.slots] = sizes.get(r.slots, 0) + 1
            n, slots = jobs.get(r.job_id, (0, 0))
            jobs[r.job_id] = (n + 1, slots + r.slots)
        self.summary = QueueSummary(len(requests), sum(r.slots for r in requests), sizes, jobs)
        self.runs = self

    @staticmethod
    def _index(runs: list[Run]) -> tuple[list[str], list[Run]]:
        ordered = sorted(runs, key=sort_key)
        return [sort_key(r) for r in ordered], ordered

    @staticmethod
    def _page(
        index: tuple[list[str], list[Run]], after: str | None, limit: int
    ) -> tuple[list[Run], str | None]:
        keys, runs = index
        start = bisect.bisect_right(keys, after) if after is not None else 0
        end = start + limit
        return runs[start:end], (keys[end - 1] if end < len(keys) else None)

    def queue_page(self, pool: str, after: str | None, limit: int) -> tuple[list[Run], str | None]:
        return self._page(self._all, after, limit)

    def job_queue_page(
        self, pool: str, job: str, after: str | None, limit: int
    ) -> tuple[list[Run], str | None]:
        return self._page(self._jobs[job], after, limit)


def head_pass(policy: PoolPolicy, queue: SortedQueue, work: Workload) -> object:
    return plan_head(queue, "default", policy_for(policy), queue.summary, work[1], work[2])  # type: ignore[arg-type]


POLICIES: list[tuple[str, Callable[[Workload], object]]] = [
    ("FIFO (issue 9, baseline)", lambda w: assign_fifo(w[0], w[2])),
    ("priority", lambda w: plan_pass(PoolPolicy("priority", False), *w)),
    ("priority + preemption", lambda w: plan_pass(PoolPolicy("priority", True), *w)),
    ("fair share", lambda w: plan_pass(PoolPolicy("fair_share", False), *w)),
    ("fair share + preemption", lambda w: plan_pass(PoolPolicy("fair_share", True), *w)),
]


#: The pass the scheduler runs since issue 12: over the head of the queue only (`queue_reading.plan_head`).
HEAD_POLICIES = [
    ("head: priority + preemption", PoolPolicy("priority", True)),
    ("head: fair share + preemption", PoolPolicy("fair_share", True)),
]


def median_ms(run: Callable[[], object], repeats: int) -> float:
    """Median CPU time of the process (`time.process_time`) over ``repeats`` runs, in ms: the pass is
    single-threaded pure Python, and CPU time is not inflated by other processes waiting on the same
    cores (this machine is shared)."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        run()
        times.append((time.process_time() - start) * 1000)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--write", action="store_true", help="write bench/results/scheduling_pass.md")
    args = parser.parse_args()
    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "unknown"
    rows = []
    for agents in AGENTS:
        for requests in REQUESTS:
            work = workload(requests, agents)
            repeats = args.repeats if requests <= 10_000 else min(args.repeats, 3)
            plan = plan_pass(PoolPolicy("priority", True), *work)
            row = {"requests": requests, "agents": agents, "holdings": len(work[1])}
            row["granted"] = len(plan.assignments)
            row["preempted"] = len(plan.preempt)
            for name, policy in POLICIES:
                row[name] = median_ms(lambda policy=policy, work=work: policy(work), repeats)  # type: ignore[misc]
            queue = SortedQueue(work[0])
            for name, pool_policy in HEAD_POLICIES:
                row[name] = median_ms(lambda p=pool_policy, q=queue, w=work: head_pass(p, q, w), repeats)  # type: ignore[misc]
            rows.append(row)
            print(
                f"{requests:>7,} requests, {agents:>5,} agents: "
                + ", ".join(f"{name} {row[name]:.1f} ms" for name, _ in [*POLICIES, *HEAD_POLICIES]),
                flush=True,
            )
    names = [name for name, _ in [*POLICIES, *HEAD_POLICIES]]
    lines = [
        "# Scheduling pass, in process",
        "",
        f"Machine: {describe()}.  ",
        f"Date: {time.strftime('%Y-%m-%d')}. Median CPU time (`time.process_time`) of {args.repeats} "
        "passes (3 at 100,000 requests), in ms. "
        f"Command: `.venv/bin/python bench/scheduling_pass.py --repeats {args.repeats} --write`.",
        "",
        f"Agents of {SLOTS_PER_AGENT} slots, half of them held by running runs; {JOBS} jobs; requests of "
        "1-16 slots at priorities 10/42/60 (see the script's docstring). Goal: under "
        f"{GOAL_MS:.0f} ms at 10,000 requests (issue 9), and for the head pass under {GOAL_MS:.0f} ms at "
        f"100,000 (issue 12). Load average when it started: {load} (the machine is shared; figures move by "
        "a third from run to run).",
        "",
        "| requests | agents | holdings | " + " | ".join(names) + " |",
        "|---:|---:|---:|" + "---:|" * len(names),
    ]
    for row in rows:
        cells = " | ".join(f"{row[n]:.1f}" for n in names)
        lines.append(f"| {row['requests']:,} | {row['agents']:,} | {row['holdings']:,} | {cells} |")
    lines += [
        "",
        "What the priority pass with preemption decided, for scale: "
        + "; ".join(
            f"{r['requests']:,} × {r['agents']:,}: {r['granted']:,} granted, {r['preempted']:,} preempted"
            for r in rows
        )
        + ".",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        (ROOT / "bench" / "results" / "scheduling_pass.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
