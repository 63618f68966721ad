"""Agent processes of the local stack: one per agent of a local pool (`infra.local.stack`), and one per
running instance of an ec2 pool (`infra.local.compute`). Each gets its own credential in a file it deletes
once read, never the stack's agent secret, and an environment without the stack's AWS and Stratus
variables."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stratus.contract.pools import PoolSpec

log = logging.getLogger("stratus.local")

#: An agent whose stack's API has not answered for this long stops and ends its runs.
AGENT_GIVE_UP_S = 60.0


@dataclass(frozen=True)
class AgentLauncher:
    """What every agent process of one local stack shares."""

    state_dir: Path
    api_url: str
    agent_token: str
    warm_start: bool = False

    def start(
        self, agent_id: str, pool: str, slots: int, *, extra: Sequence[str] = ()
    ) -> subprocess.Popen[bytes]:
        """Start the agent `agent_id` of a local pool `pool` with `slots` slots (`extra`: more flags)."""
        line = ["-m", "stratus.harness.agent", "--api", self.api_url, "--agent-id", agent_id]
        return self.start_line(agent_id, [*line, "--pool", pool, "--slots", str(slots)], extra=extra)

    def start_line(
        self,
        agent_id: str,
        line: Sequence[str],
        *,
        extra: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start an agent from its command line after the interpreter (`-m stratus.harness.agent ...`, e.g. the line
        of an ec2 instance's user data), as agent `agent_id` of this stack: its `--work-dir` is moved under
        the state folder, and it gets a credential file and the local stack's flags."""
        from chalicelib.services.tokens import agent_credential

        work_dir = self.state_dir / "agents" / agent_id
        work_dir.mkdir(parents=True, exist_ok=True)
        token_file = work_dir / "credential"
        token_file.unlink(missing_ok=True)
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(agent_credential(self.agent_token, agent_id))
        args = list(line)
        if "--work-dir" in args:
            del args[args.index("--work-dir") : args.index("--work-dir") + 2]
        cmd = [
            sys.executable,
            *(["-P"] if "-P" not in args else []),  # safe path: never the folder the stack runs from
            *args,
            "--work-dir",
            str(work_dir),
            "--token-file",
            str(token_file),
            # Killed with -9, the stack cannot stop its agents: each stops itself and ends its runs.
            "--parent-pid",
            str(os.getpid()),
            "--give-up-after",
            str(AGENT_GIVE_UP_S),
            "--warm-start" if self.warm_start else "--no-warm-start",
            *extra,
        ]
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "STRATUS_", "MOTO_"))}
        with (self.state_dir / f"{agent_id}.log").open("ab") as out:
            process = subprocess.Popen(
                cmd, env={**clean, **(env or {})}, stdout=out, stderr=subprocess.STDOUT
            )
        log.info("agent %s: %s", agent_id, " ".join(args))
        return process


@dataclass(frozen=True)
class StackContext:
    """What every local cloud runner works with (`infra.local.backends.RUNNERS`): the stack's name, a boto3
    session and moto's URL, the launcher of the stack's agent processes, the events queue (where the
    stack's EventBridge rules would put a backend's events) and the stack's state folder."""

    stack: str
    session: Any
    moto_url: str
    launcher: AgentLauncher
    events_queue_url: str
    state_dir: Path

    def client(self, service: str) -> Any:
        """A boto3 client of `service` on the stack's moto."""
        return self.session.client(service, endpoint_url=self.moto_url)

    @property
    def interrupts(self) -> Path:
        """Where `det deploy local` drops requests to interrupt a spot instance or job."""
        return self.state_dir / "compute" / "interrupt"


class Runner:
    """A local cloud twin's runner (`infra.local.backends.RunnerFactory`: made from the stack's context
    and its backend's pools): a thread that looks at moto every `interval` (`look`, which must outlive a
    moto hiccup: its errors are logged) and, when stopped, ends the agent processes it keeps
    (`processes`: SIGTERM, then SIGKILL after `STOP_WAIT_S`). A runner sets up its own clients and state
    in `prepare`, and puts its backend's AWS events on the events queue with `send_event`."""

    STOP_WAIT_S = 30.0
    #: The runner's thread's name.
    NAME = "local-runner"

    def __init__(self, context: StackContext, pools: Sequence[PoolSpec], *, interval: float = 0.5) -> None:
        self.context = context
        self.pools = list(pools)
        self._sqs = context.client("sqs")
        self._launcher = context.launcher
        self._requests = context.interrupts
        self._interval = interval
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=self.NAME, daemon=True)
        self.prepare()

    def prepare(self) -> None:
        """The runner's own clients and state (the context and pools are set)."""

    def send_event(self, source: str, detail_type: str, event_id: str, resource: str, detail: Any) -> None:
        """Put one of the backend's AWS events on the stack's events queue (`send_aws_event`)."""
        send_aws_event(
            self._sqs,
            self.context.events_queue_url,
            source=source,
            detail_type=detail_type,
            event_id=event_id,
            resource=resource,
            detail=detail,
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        end_processes(self.processes(), self.STOP_WAIT_S)

    def look(self) -> None:
        raise NotImplementedError

    def processes(self) -> list[subprocess.Popen[bytes]]:
        raise NotImplementedError

    def _loop(self) -> None:
        while not self._stopping.wait(self._interval):
            try:
                self.look()
            except Exception:
                log.exception("%s: a look at moto failed", self._thread.name)


def end_processes(processes: Sequence[subprocess.Popen[bytes]], wait_s: float) -> None:
    """SIGTERM every process still running, then SIGKILL what has not exited after `wait_s`."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def send_aws_event(
    sqs: Any, queue_url: str, *, source: str, detail_type: str, event_id: str, resource: str, detail: Any
) -> None:
    """Put an AWS event on the events queue as the stack's EventBridge rules deliver it: the whole event
    wrapped in a `compute_event` message (their input transformer's `<aws.events.event.json>`)."""
    event = {
        "version": "0",
        "id": event_id,
        "detail-type": detail_type,
        "source": source,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "region": "us-east-1",
        "resources": [resource],
        "detail": detail,
    }
    body = json.dumps({"type": "compute_event", "event": event}, default=str)
    sqs.send_message(QueueUrl=queue_url, MessageBody=body)
