"""Preemption latency on the embedded local stack: a high-priority submission on a full pool → its first
metric, by stage, and the victim's requeue → its resumed first metric. Run from the repository root:

    .venv/bin/python bench/preemption_latency.py [--runs 3] [--megabytes 1] [--step-s 0.1] [--write]

The stack has one slot, in the default pool (priority scheduler, preemption on). Each run:

1. a low-priority experiment (`resources.priority` 60) runs bench/contexts/preempt/probe.py as the
   victim: a "training loop" that reports a metric every step (`--step-s`), asks `should_preempt()`
   every 10 ms and, once told to stop, checkpoints `--megabytes` and exits 0;
2. once its first metric is visible, after a wait spread over one agent heartbeat across the runs, a
   high-priority experiment (priority 10) is submitted the way `det experiment create` does it: the
   context packed (one file changed, so it is packed and uploaded for real), uploaded, POST /experiments;
3. the bench polls the API for the high one's first metric, then for the victim's first metric after
   its resume (its requeued run 2 restores the checkpoint and reports `resumed`), then waits until
   both experiments are done (the slot is free for the next run).

Every boundary is a real clock reading, all from this machine's clock: the client's (pack, upload,
POST answered; first GET /trials/{id}/metrics showing the metric), the run records' timestamps
(`queued_at`, `assigned_at`, `launched_at`, `started_at`, `exited_at`; DynamoDB on the stack's moto
server), the stack log's `preempting run` line (the scheduling pass that chose the victim), the agent
log's `run … ended` line, and the probes' own `BENCH <name> <epoch s>` lines.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._latency import stage_row, wait_for  # noqa: E402
from bench.machine import describe  # noqa: E402
from chalicelib.services.clock import epoch_of  # noqa: E402
from det._client import ApiClient  # noqa: E402
from det._context import pack  # noqa: E402
from det.deploy.background import BackgroundStack  # noqa: E402
from stratus.harness.agent._settings import Settings as AgentSettings  # noqa: E402

BEAT_POLL_S = 0.05  # polling of the agent record's `last_seen` (each heartbeat writes its own time)
AGENT_HEARTBEAT_S = AgentSettings(
    api_url="", agent_id="", pool="", slots=1, work_dir=Path()
).heartbeat_interval
LOW_PRIORITY = 60
HIGH_PRIORITY = 10

#: Milestones of the preemption, each as seconds after the submission started (before the pack).
MILESTONES = [
    ("packed", "context packed (tar + zstd + sha256)"),
    ("uploaded", "context uploaded (POST /contexts + PUT to the presigned URL)"),
    ("created", "POST /experiments answered"),
    ("queued", "high request queued by the scheduler (its run's `queued_at`)"),
    ("victim_marked", "a scheduling pass chooses the victim (stack log `preempting run`)"),
    ("preempt_beat", "the agent's heartbeat whose answer lists the victim under `preempt`"),
    ("preempt_seen", "the victim sees `should_preempt()` (its agent's stop file)"),
    ("checkpoint_stored", "victim's checkpoint written, uploaded and registered"),
    ("victim_process_exit", "victim's interpreter runs its last atexit hook (exit 0)"),
    ("victim_reaped", "the agent's `run … ended` line for the victim"),
    ("victim_exited", "victim's exit recorded (run 1 `exited_at`): its slot free"),
    ("exit_beat", "the agent's heartbeat once it has reported the exit (it beats at once when a run ends)"),
    ("granted", "high request granted (`assigned_at`)"),
    ("launched", "high launch consumed, waiting for the agent (`launched_at`)"),
    ("launch_beat", "the agent's heartbeat whose answer carries the launch"),
    ("started", "high process spawned by the agent (`started_at`)"),
    ("high_process_start", "the high probe's first line runs"),
    ("high_torch_imported", "the high probe has imported torch"),
    ("high_imported", "the high probe has imported harness too"),
    ("high_init", "the high probe's `stratus.harness.init()` returned"),
    ("high_metric_sent", "the high probe calls `report_training_metrics`"),
    ("high_metric_reported", "the high probe's `report_training_metrics` returned"),
    ("first_metric", "first GET /trials/{id}/metrics showing the high one's metric"),
]

#: Milestones of the victim's requeue, as seconds after the submission started.
REQUEUE_MILESTONES = [
    ("victim_requeued", "victim's run 2 queued (`queued_at`): back in the queue, not a restart"),
    ("high_exited", "the high run's exit recorded (`exited_at`)"),
    ("victim_granted", "victim's run 2 granted (`assigned_at`)"),
    ("victim_started", "victim's run 2 spawned (`started_at`)"),
    ("victim_restored", "run 2 has downloaded and loaded its checkpoint"),
    ("victim_resumed", "first GET /trials/{id}/metrics showing run 2's metric"),
]

#: Stages: (name, what, from milestone, to milestone).
STAGES = [
    ("submit", "pack + upload + POST /experiments", "submitted", "created"),
    (
        "to_queue",
        "API answered → request queued (Step Functions: Enqueue, RequestSlots)",
        "created",
        "queued",
    ),
    (
        "choose_victim",
        "request queued → the pass marks the victim preempt + requeue",
        "queued",
        "victim_marked",
    ),
    (
        "tell_victim",
        "victim marked → it sees should_preempt() (agent heartbeat + stop file)",
        "victim_marked",
        "preempt_seen",
    ),
    ("  preempt_wait", "  of which waiting for the agent's next heartbeat", "victim_marked", "preempt_beat"),
    (
        "  stop_file",
        "  of which that heartbeat → seen (stop file, harness poll)",
        "preempt_beat",
        "preempt_seen",
    ),
    (
        "checkpoint",
        "preempt seen → checkpoint stored (the victim's own time)",
        "preempt_seen",
        "checkpoint_stored",
    ),
    (
        "victim_exit",
        "checkpoint stored → victim exit recorded (teardown, reap, POST exit)",
        "checkpoint_stored",
        "victim_exited",
    ),
    (
        "  teardown",
        "  of which the last atexit hook → the agent sees the process end",
        "victim_process_exit",
        "victim_reaped",
    ),
    ("grant", "victim exit recorded → high granted (Release → scheduling pass)", "victim_exited", "granted"),
    ("launch", "grant → launch consumed (Launch state + launch queue)", "granted", "launched"),
    ("agent", "launch → process spawned (agent heartbeat, context download, extract)", "launched", "started"),
    ("  launch_wait", "  of which waiting for the agent's next heartbeat", "launched", "launch_beat"),
    ("  spawn", "  of which that heartbeat → spawned (download, extract, spawn)", "launch_beat", "started"),
    ("imports", "spawn → torch and harness imported", "started", "high_imported"),
    (
        "  torch",
        "  of which spawn → torch imported (interpreter start + `import torch`)",
        "started",
        "high_torch_imported",
    ),
    ("init", "imports → stratus.harness.init() returned", "high_imported", "high_init"),
    (
        "report",
        "metric sent → visible through the API (incl. client poll)",
        "high_metric_sent",
        "first_metric",
    ),
    (
        "  post",
        "  of which the probe's POST (report_training_metrics)",
        "high_metric_sent",
        "high_metric_reported",
    ),
    ("total", "submit → high-priority first metric", "submitted", "first_metric"),
    ("  preempted", "  of which submit → victim's exit recorded (slot free)", "submitted", "victim_exited"),
    ("  start", "  of which victim's exit recorded → high first metric", "victim_exited", "first_metric"),
]

REQUEUE_STAGES = [
    (
        "requeue",
        "victim exit recorded → run 2 queued (Release, Exited?, Enqueue, RequestSlots)",
        "victim_exited",
        "victim_requeued",
    ),
    ("high_runs", "high first metric → high exit recorded (searcher, exit)", "first_metric", "high_exited"),
    ("resume_grant", "high exit recorded → run 2 granted", "high_exited", "victim_granted"),
    ("resume_start", "run 2 granted → spawned (launch, agent)", "victim_granted", "victim_started"),
    (
        "resume_restore",
        "spawned → checkpoint restored (imports, init, download)",
        "victim_started",
        "victim_restored",
    ),
    ("resume_metric", "restored → run 2's metric visible", "victim_restored", "victim_resumed"),
    (
        "off_slot",
        "victim exit recorded → its resumed metric (the victim's time off the slot)",
        "victim_exited",
        "victim_resumed",
    ),
]


def _log_time(line: str) -> float:
    """A log line's asctime (this machine's local time, milliseconds) as epoch seconds."""
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


class HeartbeatWatch(threading.Thread):
    """The agent's heartbeats, each by the time it wrote into the agent record's `last_seen` (the
    heartbeat handler's clock), read every 0.05 s: well under the 0.5 s between regular beats."""

    def __init__(self, table: Any, agent_id: str) -> None:
        super().__init__(daemon=True)
        self._table = table
        self._agent_id = agent_id
        self._stop_event = threading.Event()
        self.beats: list[float] = []

    def run(self) -> None:
        while not self._stop_event.wait(BEAT_POLL_S):
            item = self._table.get_item(Key={"agent_id": self._agent_id}, ConsistentRead=True).get("Item")
            seen = float(item["last_seen"]) if item else None
            if seen is not None and (not self.beats or seen != self.beats[-1]):
                self.beats.append(seen)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()

    def first_after(self, moment: float) -> float:
        """The first heartbeat at or after `moment`."""
        return float(wait_for("agent heartbeat", lambda: next((b for b in self.beats if b >= moment), None)))

    def last_before(self, moment: float) -> float:
        """The last heartbeat at or before `moment`."""
        return max(b for b in self.beats if b <= moment)


class Stack:
    """What the API does not show: run records (the stack's moto server) and the stack's and agent's logs."""

    def __init__(self, state: dict[str, Any], state_dir: Path) -> None:
        kwargs = {
            "endpoint_url": state["moto_url"],
            "region_name": "us-east-1",
            "aws_access_key_id": "stratus-local",
            "aws_secret_access_key": "stratus-local",
        }
        dynamodb = boto3.resource("dynamodb", **kwargs)
        self.runs = dynamodb.Table("stratus-runs")
        self.heartbeats = HeartbeatWatch(dynamodb.Table("stratus-agents"), "local-0")
        self.stack_log = state_dir / "stack.log"
        self.agent_log = state_dir / "local-0.log"

    def run(self, run_id: str) -> dict[str, Any] | None:
        item: dict[str, Any] | None = self.runs.get_item(Key={"run_id": run_id}, ConsistentRead=True).get(
            "Item"
        )
        return item

    def preempting(self, victim: str, requester: str) -> float | None:
        """The scheduling pass's log line that chose `victim` for `requester`."""
        wanted = f"chalicelib.services.scheduler INFO pool default: preempting run {victim} for {requester}"
        for line in self.stack_log.read_text(errors="replace").splitlines():
            if wanted in line:
                return _log_time(line)
        return None

    def run_ended(self, run_id: str) -> float | None:
        for line in self.agent_log.read_text(errors="replace").splitlines():
            if f"stratus.harness.agent: run {run_id} ended:" in line:
                return _log_time(line)
        return None

    def preemption_lines(self) -> str:
        lines = self.stack_log.read_text(errors="replace").splitlines()
        return "\n".join(line for line in lines if "chalicelib.services.scheduler" in line)[-4000:]


def _probe_marks(api: ApiClient, trial_id: int) -> dict[str, list[float]]:
    """The probe's `BENCH` lines, each name with its readings in order (run 1's, then run 2's)."""
    marks: dict[str, list[float]] = {}
    for line in api.trial_logs(trial_id, limit=10_000)["logs"]:
        words = line["message"].split()
        if len(words) == 3 and words[0] == "BENCH":
            marks.setdefault(words[1], []).append(float(words[2]))
    return marks


def _first_trial(api: ApiClient, experiment_id: int) -> int:
    return int(
        wait_for(
            f"trial of experiment {experiment_id}",
            lambda: (trials := api.get_experiment(experiment_id).get("trials")) and trials[0]["id"],
        )
    )


def _config(name: str, entrypoint: str, priority: int) -> dict[str, Any]:
    return {
        "name": name,
        "entrypoint": entrypoint,
        "searcher": {"name": "single", "metric": "loss", "max_length": 1, "smaller_is_better": True},
        "resources": {"priority": priority},
        "max_restarts": 0,
    }


def one_run(
    api: ApiClient,
    stack: Stack,
    context: Path,
    low_sha256: str,
    n: int,
    phase: float,
    args: argparse.Namespace,
) -> dict[str, float]:
    low_config = _config(
        "preempt-victim", f"python3 probe.py low {args.megabytes:g} {args.step_s:g}", LOW_PRIORITY
    )
    low = api.create_experiment(low_config, context_sha256=low_sha256, validate_only=False, activate=True)
    low_id = int(low["experiment"]["id"])
    victim = _first_trial(api, low_id)
    wait_for("victim's first metric (the victim running)", lambda: api.trial_metrics(victim, "training"))
    time.sleep(phase)

    # The high-priority submission, as `det experiment create` makes it.
    (context / "nonce.txt").write_text(f"{n} {time.time()}\n")
    at: dict[str, float] = {"submitted": time.time()}
    packed = pack(context)
    at["packed"] = time.time()
    answer = api.request_context_upload(packed.sha256, len(packed.data))
    if answer.get("upload"):
        api.upload(answer["upload"], packed.data)
    at["uploaded"] = time.time()
    high_config = _config("preempt-high", "python3 probe.py high", HIGH_PRIORITY)
    high = api.create_experiment(
        high_config, context_sha256=packed.sha256, validate_only=False, activate=True
    )
    at["created"] = time.time()
    high_id = int(high["experiment"]["id"])
    trial = _first_trial(api, high_id)
    wait_for("high-priority first metric", lambda: api.trial_metrics(trial, "training"))
    at["first_metric"] = time.time()
    wait_for(
        "victim's resumed metric",
        lambda: any(row["metrics"].get("resumed") for row in api.trial_metrics(victim, "training")),
    )
    at["victim_resumed"] = time.time()
    wait_for("both experiments done (no jobs left)", lambda: not api.list_jobs())

    victim_run, high_run = f"{victim}.1", f"{trial}.1"
    marked = stack.preempting(victim_run, high_run)
    if marked is None:
        raise SystemExit(
            f"no `preempting run {victim_run} for {high_run}` in {stack.stack_log}; scheduler lines:\n"
            + stack.preemption_lines()
        )
    v1, v2, h1 = stack.run(victim_run), stack.run(f"{victim}.2"), stack.run(high_run)
    if v1 is None or v2 is None or h1 is None:
        raise SystemExit(f"run records: {victim_run} {v1}, {victim}.2 {v2}, {high_run} {h1}")
    if not (v1.get("preempt") and v1.get("requeue")) or int(v1.get("exit_code", -1)) != 0:
        raise SystemExit(f"victim run {victim_run} was not preempted and requeued cleanly: {v1}")
    vm, hm = _probe_marks(api, victim), _probe_marks(api, trial)
    victim_trial, high_trial = api.get_trial(victim)["trial"], api.get_trial(trial)["trial"]
    at.update(
        {
            "queued": epoch_of(h1["queued_at"]),
            "victim_marked": marked,
            "preempt_seen": vm["preempt_seen"][0],
            "checkpoint_stored": vm["checkpoint_stored"][0],
            "victim_process_exit": vm["exit"][0],
            "victim_reaped": wait_for("agent's `ended` line", lambda: stack.run_ended(victim_run)),
            # The beat whose answer the victim acted on; the one the agent sends once the exit is
            # reported; the one whose answer carried the launch.
            "preempt_beat": stack.heartbeats.last_before(vm["preempt_seen"][0]),
            "exit_beat": stack.heartbeats.first_after(epoch_of(v1["exited_at"])),
            "launch_beat": stack.heartbeats.last_before(epoch_of(h1["started_at"])),
            "victim_exited": epoch_of(v1["exited_at"]),
            "granted": epoch_of(h1["assigned_at"]),
            "launched": epoch_of(h1["launched_at"]),
            "started": epoch_of(h1["started_at"]),
            "high_process_start": hm["process_start"][0],
            "high_torch_imported": hm["torch_imported"][0],
            "high_imported": hm["imported"][0],
            "high_init": hm["init"][0],
            "high_metric_sent": hm["metric_sent"][0],
            "high_metric_reported": hm["metric_reported"][0],
            "victim_requeued": epoch_of(v2["queued_at"]),
            "high_exited": epoch_of(h1["exited_at"]),
            "victim_granted": epoch_of(v2["assigned_at"]),
            "victim_started": epoch_of(v2["started_at"]),
            "victim_restored": vm["restored"][0],
        }
    )
    result = {name: at[end] - at[start] for name, _, start, end in [*STAGES, *REQUEUE_STAGES]}
    result.update({f"@{name}": at[name] - at["submitted"] for name, _ in [*MILESTONES, *REQUEUE_MILESTONES]})
    result["phase"] = phase
    result["victim_restarts"] = float(victim_trial.get("restarts", 0))
    result["victim_completed"] = float(victim_trial.get("state") == "COMPLETED")
    result["high_completed"] = float(high_trial.get("state") == "COMPLETED")
    result["context_bytes"] = float(len(packed.data))
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--megabytes", type=float, default=1.0, help="the victim's checkpoint size in MB")
    parser.add_argument("--step-s", type=float, default=0.1, help="the victim's step (one metric per step)")
    parser.add_argument("--write", action="store_true", help="write bench/results/preemption_latency.md")
    args = parser.parse_args()
    base = ROOT / "bench" / ".work"
    work = Path(tempfile.mkdtemp(prefix="preempt-", dir=base if base.exists() else None))
    context = work / "context"
    context.mkdir()
    (context / "probe.py").write_text((ROOT / "bench" / "contexts" / "preempt" / "probe.py").read_text())
    background = BackgroundStack(work / "stack", slots=1)
    results = []
    stack: Stack | None = None
    try:
        with ApiClient(background.state["api_url"]) as api:
            stack = Stack(background.state, work / "stack")
            stack.heartbeats.start()
            packed = pack(context)  # the victim's context, uploaded once
            answer = api.request_context_upload(packed.sha256, len(packed.data))
            if answer.get("upload"):
                api.upload(answer["upload"], packed.data)
            for n in range(args.runs):
                phase = AGENT_HEARTBEAT_S * (n + 0.5) / args.runs
                result = one_run(api, stack, context, packed.sha256, n, phase, args)
                results.append(result)
                print(
                    f"run {n + 1}: victim marked {result['@victim_marked']:.2f} s, slot free "
                    f"{result['@victim_exited']:.2f} s, high first metric {result['total']:.2f} s, victim "
                    f"resumed {result['@victim_resumed']:.2f} s",
                    flush=True,
                )
    finally:
        if stack is not None and stack.heartbeats.is_alive():
            stack.heartbeats.stop()
        background.stop()

    text = _report(args, results)
    if args.write:
        (ROOT / "bench" / "results" / "preemption_latency.md").write_text(text)
    print(text)
    return 0


def _median(key: str, results: list[dict[str, float]]) -> float:
    return statistics.median(r[key] for r in results)


def _report(args: argparse.Namespace, results: list[dict[str, float]]) -> str:
    runs = len(results)
    command = (
        f"`.venv/bin/python bench/preemption_latency.py --runs {runs} --megabytes {args.megabytes:g} "
        f"--step-s {args.step_s:g} --write`"
    )
    lines = [
        "# Preemption latency on the embedded local stack",
        "",
        f"Machine: {describe()}.  ",
        f"Date: {time.strftime('%Y-%m-%d')}. Runs: {runs}. Command: {command}.",
        "",
        "One slot, the default pool (priority scheduler, preemption on). A victim experiment (priority "
        f"{LOW_PRIORITY}) runs a probe that reports a metric every {args.step_s:g} s and checkpoints "
        f"{args.megabytes:g} MB when told to stop; once it runs, a high-priority experiment (priority "
        f"{HIGH_PRIORITY}) is submitted as `det experiment create` does (pack, upload, POST /experiments; "
        f"context archive {results[0]['context_bytes']:.0f} bytes), after a wait spread over one agent "
        f"heartbeat ({AGENT_HEARTBEAT_S:g} s) across the runs. Every boundary is a real clock reading: "
        "the client's, the run records' timestamps, the stack log's `preempting run` line, the agent "
        "log's `run … ended` line, the probes' own.",
        "",
        "## Submit → the high-priority trial's first metric",
        "",
        "| stage | what | median s | max s |",
        "|---|---|---:|---:|",
        *(stage_row(key, what, results) for key, what, _, _ in STAGES),
        "",
        "Milestones, seconds after the submission started:",
        "",
        "| milestone | what | median s | max s |",
        "|---|---|---:|---:|",
        *(stage_row(f"@{key}", what, results) for key, what in MILESTONES),
        "",
        "## The victim's requeue",
        "",
        "| stage | what | median s | max s |",
        "|---|---|---:|---:|",
        *(stage_row(key, what, results) for key, what, _, _ in REQUEUE_STAGES),
        "",
        "Milestones, seconds after the submission started:",
        "",
        "| milestone | what | median s | max s |",
        "|---|---|---:|---:|",
        *(stage_row(f"@{key}", what, results) for key, what in REQUEUE_MILESTONES),
        "",
        "Each run:",
        "",
        "| run | wait before submit s | victim marked s | told s | slot free s | high first metric s "
        "| victim resumed s | victim restarts | both COMPLETED |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        *(
            f"| {n + 1} | {r['phase']:.2f} | {r['@victim_marked']:.2f} | {r['@preempt_seen']:.2f} | "
            f"{r['@victim_exited']:.2f} | {r['total']:.2f} | {r['@victim_resumed']:.2f} | "
            f"{r['victim_restarts']:.0f} | {'yes' if r['victim_completed'] and r['high_completed'] else 'no'} |"
            for n, r in enumerate(results)
        ),
        "",
        *_reading(results),
    ]
    return "\n".join(lines)


def _reading(results: list[dict[str, float]]) -> list[str]:
    def m(key: str) -> float:
        return _median(key, results)

    total = m("total")
    top = sorted(
        ((m(key), key) for key, _, _, _ in STAGES if not key.startswith(" ") and key != "total"), reverse=True
    )
    ranked = ", ".join(f"`{key}` {value:.2f} s ({100 * value / total:.0f} %)" for value, key in top[:4])
    trial_start = m("imports") + m("init")
    missed = sum(r["@exit_beat"] < r["@launched"] for r in results)
    early = sum(r["@victim_requeued"] < r["@granted"] for r in results)
    return [
        "## Reading",
        "",
        f"- Submit → the high-priority trial's first metric: a median {total:.2f} s (max "
        f"{max(r['total'] for r in results):.2f} s). The preemption itself (submit → the victim's slot free) "
        f"is a median {m('  preempted'):.2f} s; starting the high trial in the freed slot "
        f"{m('  start'):.2f} s. Largest stages: {ranked}.",
        f"- What dominates is the high trial's own start: spawn → `stratus.harness.init()` returned, a median "
        f"{trial_start:.2f} s ({100 * trial_start / total:.0f} %), of which the interpreter and `import "
        f"torch` {m('  torch'):.2f} s and `stratus.harness.init()` {m('init'):.2f} s (from "
        f"{min(r['init'] for r in results):.2f} to {max(r['init'] for r in results):.2f} s across the runs; "
        "profiled once, in two runs of 0.19 s each, all of it was the wait for the answer to GET "
        "/trials/{id}/info; the slow cases were not profiled). The imports are the trial's code, the same "
        "with or without preemption (submit_latency.md shows them too); the control plane could only hide "
        "them by starting the interpreter before the slot is free (an agent-side pre-imported interpreter "
        "to fork from), not proposed here. The `init` wait is the API answering GET /trials/{id}/info; at "
        "up to a second on the local stack it is worth profiling on the API side.",
        f"- The largest costs on the control plane's side are two waits of about half a second each. "
        f"(1) The victim's exit: from its last atexit hook to the agent seeing the process end, "
        f"a median {m('  teardown'):.2f} s, after its checkpoint of the configured size took "
        f"{m('checkpoint'):.2f} s: the interpreter tearing torch down. A trial stopping for a preemption could "
        "leave with `os._exit(0)` once its checkpoint is registered and its output flushed (the harness, "
        "on the preemption path only). (2) The launch's wait for the agent: a median "
        f"{m('  launch_wait'):.2f} s of the `agent` stage ({m('agent'):.2f} s). The agent beats at once when a "
        "run ends (`exit_beat`, right after the exit is recorded), but the grant comes after that beat "
        f"(Release → scheduling pass, {m('grant'):.2f} s, then the Launch state, {m('launch'):.2f} s), so "
        f"the launch waits for the next regular beat, about a full interval later: in {missed} of "
        f"{len(results)} runs the exit beat came before the launch existed. An agent that has just freed "
        "slots could beat again a short while after (say 0.2 s), or the exit report's answer could carry "
        "launches granted meanwhile; either saves most of that wait. The grant itself could also skip the "
        "workflow hop: the exit report already frees the slot, so the API could send the pool's scheduler "
        f"message itself instead of the Release state ({m('grant'):.2f} s from exit to grant here).",
        f"- Telling the victim: the pass marks it {m('choose_victim'):.2f} s after the request is "
        f"queued, and it sees `should_preempt()` {m('tell_victim'):.2f} s later: the agent's next heartbeat "
        f"({m('  preempt_wait'):.2f} s, 0 to 0.5 s by where the pass falls in the agent's cycle), then the "
        f"stop file ({m('  stop_file'):.2f} s). Only a shorter agent heartbeat (more requests) or a push to the "
        "agent would cut the first part. The heartbeat stamps are the agent record's `last_seen` (the "
        "heartbeat handler's clock at its start), so the beat that carried the stop can start a little "
        "before the pass that marked the victim.",
        f"- The victim is requeued, not restarted: its run 2 is queued {m('requeue'):.2f} s after its exit "
        f"(before the high request's grant in {early} of {len(results)} runs; the high request gets the slot "
        "by priority either way), its restarts stay at 0, and it resumes from its checkpoint "
        f"once the high trial ends: a median {m('off_slot'):.2f} s off the slot: the high trial's start "
        f"({m('  start'):.2f} s to its first metric) and the rest of its life ({m('high_runs'):.2f} s: searcher "
        f"completion, teardown, exit), then its own grant ({m('resume_grant'):.2f} s), launch and spawn "
        f"({m('resume_start'):.2f} s) and imports, init and checkpoint restore ({m('resume_restore'):.2f} s).",
        "- Some stages can read negative: `to_queue` when the request is queued before the POST's answer "
        "reaches the client, `preempt_wait` when the beat that carried a change started just before it.",
        "",
    ]


if __name__ == "__main__":
    sys.exit(main())
