"""The embedded local stack: AWS in one process, for a laptop and for the end-to-end tests.

    python -m infra.local.stack --port 8080 --slots 2 --state-dir ~/.stratus/local [--moto-port N]
        [--pool NAME[:scheduler=..][:preemption=on|off][:slots=N][:agents=N] ...] [--cluster-config FILE]

starts a moto server on 127.0.0.1 (on --moto-port, else a free port; Step Functions execution on,
MOTO_PORT set), creates the stack's resources in it (infra/local/resources.py), serves the Chalice app on
127.0.0.1, runs a pump per SQS queue into its handler (what Lambda's event source mapping does in
AWS), and starts local agents with N slots as
child processes: those of the pool "default", and those of each pool given (`infra.local.cluster_config`), with
a sweep ticker per pool. Once everything is up it writes `<state-dir>/stack.json`; SIGTERM or SIGINT stops it all
and removes that file. `det deploy local up|status|down` drive this program.

The stack's records, logs and objects live in the state folder (`infra/local/persistence.py`): a start loads
what an earlier run of the stack left there, ends whatever that run left running (`infra/local/leftovers.py`),
and recovers what was in flight (`chalicelib.services.recovery`) before its agents start.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infra.local.agents import AgentLauncher, StackContext
from infra.local.api import free_port, serve_api
from infra.local.clouds import LocalClouds
from infra.local.cluster_config import ClusterConfigError, LocalPool, local_pools
from infra.local.leftovers import end_leftovers, record_agents
from infra.local.persistence import StateClients, StateFolder, compact, journaling_moto_server, restore
from infra.shape import with_groups
from stratus.contract.pools import pools_to_json, traits
from stratus.harness.agent import detect_gpus

log = logging.getLogger("stratus.local")


class LocalStack:
    def __init__(
        self,
        *,
        port: int,
        slots: int,
        state_dir: Path,
        stack: str = "stratus",
        agents: int = 1,
        pools: Sequence[LocalPool] | None = None,
        warm_start: bool = False,
        moto_port: int = 0,
    ) -> None:
        self.port = port or free_port()
        #: Agents fork trials from a warm interpreter where safe (`stratus.harness.agent._warm`).
        self.warm_start = warm_start
        self.slots = slots
        self.state_dir = state_dir
        self.stack = stack
        self.agents = agents
        # The pools (`--pool`, `--cluster-config`, else one pool "default" of this machine's agents) are
        # the control plane's (`STRATUS_POOLS`), with their shapes.
        self.pools = list(pools) if pools else local_pools([], None, slots=slots, agents=agents)
        self.moto_port = moto_port or free_port()
        self.api_url = f"http://127.0.0.1:{self.port}"
        self.moto_url = f"http://127.0.0.1:{self.moto_port}"
        self._moto: Any = None
        self._http: Any = None
        self._pumps: list[Any] = []
        self._agents: list[subprocess.Popen[bytes]] = []
        self._agent_token = secrets.token_urlsafe(32)
        self.state = StateFolder(state_dir)
        self._clients: StateClients | None = None
        self._launcher = AgentLauncher(self.state_dir, self.api_url, self._agent_token, warm_start)
        self._clouds: LocalClouds | None = None  # the ec2, batch and sagemaker pools' twins

    # ---- start ------------------------------------------------------------------------------------

    def start(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        end_leftovers(self.state_dir)  # a previous stack killed with -9: its agents and runs end first
        self._environment()
        self._start_moto()
        self._create_resources()
        self._restore()
        self._start_api()
        self._recover()
        self._start_pumps()
        self._start_agents()
        self._write_state()

    def _environment(self) -> None:
        # Never reach a real account from the local stack: fixed fake credentials, everything at moto.
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
            os.environ.pop(name, None)
        os.environ.update(
            {
                "AWS_ACCESS_KEY_ID": "stratus-local",
                "AWS_SECRET_ACCESS_KEY": "stratus-local",
                "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_REGION": "us-east-1",
                "AWS_ENDPOINT_URL": self.moto_url,
                "MOTO_PORT": str(self.moto_port),
                "STRATUS_STACK": self.stack,
                "STRATUS_API_URL": self.api_url,
                "STRATUS_TOKEN_SECRET": secrets.token_urlsafe(32),
                "STRATUS_AGENT_TOKEN": self._agent_token,
            }
        )
        os.environ["STRATUS_POOLS"] = pools_to_json(
            with_groups([pool.spec for pool in self.pools], self.stack)
        )
        # Agents learn of work by their doorbell: the heartbeat is only their liveness.
        os.environ.setdefault("STRATUS_AGENT_HEARTBEAT_S", str(LOCAL_AGENT_HEARTBEAT_S))
        # Metrics show within seconds on this machine, where requests cost nothing.
        os.environ.setdefault("STRATUS_REPORT_INTERVAL_S", str(LOCAL_REPORT_INTERVAL_S))

    def _start_moto(self) -> None:
        import httpx

        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        self._moto = journaling_moto_server(self.state, "127.0.0.1", self.moto_port)
        self._moto.start()
        httpx.post(
            f"{self.moto_url}/moto-api/config",
            # Batch jobs without Docker (`infra.local.moto_batch` keeps them RUNNING until their agents end).
            json={"stepfunctions": {"execute_state_machine": True}, "batch": {"use_docker": False}},
            timeout=10,
        ).raise_for_status()
        log.info("moto server on %s", self.moto_url)

    def _create_resources(self) -> None:
        import boto3

        from infra.local.resources import create
        from infra.shape import StackNames

        names = StackNames(stack=self.stack)
        # A short visibility timeout: a failed local delivery is retried after 5 s instead of 30.
        env = create(boto3.session.Session(), names, endpoint_url=self.moto_url, visibility_timeout=5)
        os.environ.update(env)
        self._queue_urls = {
            "scheduler": env["STRATUS_SCHEDULER_QUEUE_URL"],
            "launch": env["STRATUS_LAUNCH_QUEUE_URL"],
            "events": env["STRATUS_EVENTS_QUEUE_URL"],
            "submissions": env["STRATUS_SUBMISSIONS_QUEUE_URL"],
        }
        log.info("resources of stack %r created", self.stack)
        specs = with_groups([pool.spec for pool in self.pools], self.stack)
        if any(traits(spec.backend).cloud for spec in specs):
            context = StackContext(
                self.stack,
                boto3.session.Session(),
                self.moto_url,
                self._launcher,
                self._queue_urls["events"],
                self.state_dir,
            )
            self._clouds = LocalClouds(context, specs)
            self._clouds.create()
        self._clients = StateClients(
            boto3.session.Session(), self.moto_url, names.region, f"{self.stack}-", names.log_group
        )

    def _restore(self) -> None:
        """Load what the state folder holds (an earlier run of this stack), then start writing to it."""
        assert self._clients is not None
        if self.state.exists():
            counts = restore(self.state, self._clients)
            log.info("state restored from %s: %s", self.state_dir, counts)
        compact(self.state, self._clients)
        threading.Thread(target=self._compact_when_due, name="compactor", daemon=True).start()

    def _compact_when_due(self) -> None:
        assert self._clients is not None
        while self.state.recording:
            if self.state.compaction_due.wait(timeout=5):
                try:
                    compact(self.state, self._clients)
                except Exception:  # the journal keeps growing; the next start replays it all
                    log.exception("could not fold the journal into a snapshot")
                    return

    def _recover(self) -> None:
        """Runs that were in flight when the stack last stopped are lost; their trials go on."""
        from chalicelib import wiring
        from chalicelib.services import recovery

        report = recovery.recover(wiring.ports(), "lost: the local stack stopped while the run was in flight")
        log.info("recovery: %s", report.summary())

    def _start_api(self) -> None:
        from chalicelib import wiring

        wiring.reset()
        self._http = serve_api(self.port)
        log.info("API on %s", self.api_url)

    def _start_pumps(self) -> None:
        import boto3

        from chalicelib.handlers import events, submissions  # the consumers `app` registers
        from chalicelib.settings import get_settings
        from infra.local.pump import STACK_SWEEP_S, QueuePump, SweepTicker
        from stratus.contract.messages import EVERY_POOL

        sqs = boto3.client("sqs", endpoint_url=self.moto_url)
        handlers = {
            "scheduler": (events.on_scheduler_message, 1),
            "launch": (events.on_launch_message, 10),
            "events": (events.on_trial_event, 1),
            "submissions": (submissions.on_submission, 1),
        }
        for kind, (handler, batch) in handlers.items():
            pump = QueuePump(sqs, self._queue_urls[kind], handler, batch_size=batch)
            pump.start()
            self._pumps.append(pump)
        # A third of the agent timeout: a lost agent's runs end at most ~1.3 timeouts after its last beat.
        interval = min(60.0, max(1.0, get_settings().agent_timeout_s / 3))
        for pool in self.pools:
            ticker = SweepTicker(sqs, self._queue_urls["scheduler"], pool.spec.name, interval)
            ticker.start()
            self._pumps.append(ticker)
        # The template's one-minute schedule: the stack-wide sweep (the price table, the searcher watch).
        stack_ticker = SweepTicker(sqs, self._queue_urls["scheduler"], EVERY_POOL, STACK_SWEEP_S)
        stack_ticker.start()
        self._pumps.append(stack_ticker)

    def _start_agents(self) -> None:
        # Every agent is a node on this machine: multi-node trials rendezvous on the loopback.
        for pool in self.pools:
            for agent_id in pool.agent_ids():
                self._agents.append(
                    self._launcher.start(
                        agent_id, pool.spec.name, pool.slots, extra=["--address", "127.0.0.1"]
                    )
                )
        record_agents(self.state_dir, [agent.pid for agent in self._agents])
        if self._clouds is not None:
            self._clouds.start()  # cloud pools' agents come and go with their instances and jobs

    def _write_state(self) -> None:
        state = {
            "pid": os.getpid(),
            "api_url": self.api_url,
            "moto_url": self.moto_url,
            "slots": self.slots,
            "agents": self.agents,
            "pools": [
                {
                    "name": pool.spec.name,
                    "scheduler": pool.spec.scheduler,
                    "preemption": pool.spec.preemption,
                    "agents": pool.agents,
                    "slots": pool.slots,
                    "backend": pool.spec.backend,
                    **(
                        {
                            "min_instances": pool.spec.provider.min_instances,
                            "max_instances": pool.spec.provider.max_instances,
                        }
                        if pool.spec.provider is not None
                        else {}
                    ),
                }
                for pool in self.pools
            ],
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        tmp = self.state_dir / "stack.json.tmp"
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_dir / "stack.json")

    # ---- stop -------------------------------------------------------------------------------------

    def stop(self) -> None:
        (self.state_dir / "stack.json").unlink(missing_ok=True)
        for agent in self._agents:
            if agent.poll() is None:
                agent.terminate()
        for agent in self._agents:
            try:
                agent.wait(timeout=30)
            except subprocess.TimeoutExpired:
                agent.kill()
        if self._clouds is not None:
            self._clouds.stop()
        for pump in self._pumps:
            pump.stop()
        if self._http is not None:
            self._http.shutdown()
        if self._clients is not None and self.state.recording:
            try:
                compact(self.state, self._clients)
            except Exception:  # the journal has every write anyway: the next start replays it
                log.exception("could not fold the journal into a snapshot")
        self.state.close()
        if self._moto is not None:
            self._moto.stop()
        log.info("stopped")


#: How often the stack's main thread looks whether it was told to stop.
STOP_POLL_S = 0.5
#: A local agent's slots on a machine without GPUs, unless --slots says otherwise.
DEFAULT_SLOTS = 2
#: The local agents' heartbeat interval (seconds; `STRATUS_AGENT_HEARTBEAT_S` sets another).
LOCAL_AGENT_HEARTBEAT_S = 5.0
#: How long trials gather reports before sending them on the local stack (`STRATUS_REPORT_INTERVAL_S`).
LOCAL_REPORT_INTERVAL_S = 5.0


class StopSignal:
    """SIGTERM and SIGINT as a flag the main thread looks at every `STOP_POLL_S` (`wait`). The handler only
    sets it: a handler runs in the main thread between two bytecodes, and one that took a lock the main
    thread held there (`threading.Event.set`) would wait on itself for ever. The waits are timed: a
    signal the kernel hands to another thread (the API's, moto's) only marks the handler due, and the
    main thread runs it at its next bytecode; in an untimed wait it never got there (the stack ignored a
    SIGTERM until it was killed, seen in the e2e tests)."""

    def __init__(self) -> None:
        self.received = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.received = True

    def wait(self) -> None:
        while not self.received:
            time.sleep(STOP_POLL_S)


def default_slots(environ: dict[str, str] | None = None) -> int:
    """A local agent's slots when --slots is not given: one per GPU of this machine (as the agent hands
    them out: ``CUDA_VISIBLE_DEVICES``, else ``nvidia-smi -L``), as Determined's agent offers; 2 without."""
    return len(detect_gpus(environ)) or DEFAULT_SLOTS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.local.stack", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8080, help="API port (0 picks a free one)")
    parser.add_argument(
        "--moto-port", type=int, default=0, help="port of the embedded moto server (default 0: a free one)"
    )
    parser.add_argument(
        "--slots",
        type=int,
        default=None,
        help="slots of each local agent (default: one per GPU that nvidia-smi lists, 2 on a machine without)",
    )
    parser.add_argument("--agents", type=int, default=1, help="number of local agents")
    parser.add_argument(
        "--pool",
        action="append",
        default=[],
        metavar="NAME[:KEY=VALUE...]",
        help="a resource pool and its agents (repeatable); see infra/local/cluster_config.py",
    )
    parser.add_argument(
        "--cluster-config", type=Path, metavar="FILE", help="resource pools as in Determined's master config"
    )
    parser.add_argument("--state-dir", type=Path, default=Path.home() / ".stratus" / "local")
    parser.add_argument("--stack", default="stratus")
    parser.add_argument(
        "--warm-start",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="agents fork trials from a warm interpreter where safe (default: $STRATUS_WARM_START, else off)",
    )
    args = parser.parse_args(argv)
    if args.slots is None:
        args.slots = default_slots()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        pools = local_pools(args.pool, args.cluster_config, slots=args.slots, agents=args.agents)
    except ClusterConfigError as error:
        parser.exit(2, f"Error: {error}\n")
    configured = bool(args.pool) or args.cluster_config is not None

    stop = StopSignal()
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1`: every thread's stack to the log
    stack = LocalStack(
        port=args.port,
        moto_port=args.moto_port,
        slots=args.slots,
        state_dir=args.state_dir,
        stack=args.stack,
        agents=args.agents,
        pools=pools if configured else None,
        warm_start=(
            args.warm_start
            if args.warm_start is not None
            else os.environ.get("STRATUS_WARM_START", "").strip().lower() in ("1", "true", "yes", "on")
        ),
    )
    try:
        stack.start()
        log.info("ready: %s", stack.api_url)
        stop.wait()
    finally:
        stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
