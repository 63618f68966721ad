"""``python -m stratus.harness.agent``: parse the settings, log to stderr, run the agent until SIGTERM/SIGINT.

With ``--aws`` a spot interruption notice drains the agent (`stratus.harness.agent._aws.SpotWatcher`), and so
does SIGTERM (an instance shutdown, a scale-in): its runs get `SIGTERM_DRAIN_S` to checkpoint and exit,
then the agent stops as it does on SIGTERM without ``--aws``; a second SIGTERM stops it at once, a third
stops waiting for the runs' exit reports. A Batch or SageMaker job's agent (``--only-runs``) drains on
SIGTERM too (its job stopped, its spot host reclaimed), for `JOB_SIGTERM_DRAIN_S`.
"""

from __future__ import annotations

import logging
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType

from stratus.contract.hardening import not_dumpable
from stratus.harness.agent._agent import Agent
from stratus.harness.agent._aws import ImdsClient, SpotWatcher
from stratus.harness.agent._job_credential import with_job_credential
from stratus.harness.agent._settings import TOKEN_ENV, parse_cli

log = logging.getLogger("stratus.harness.agent")

#: With ``--aws``, how long the runs have to checkpoint and exit after SIGTERM before the agent stops
#: them (then SIGTERM to their processes, and SIGKILL `--kill-grace` seconds later).
SIGTERM_DRAIN_S = 5.0
#: A Batch or SageMaker job's agent (`--only-runs`): its container gets SIGTERM when the job is stopped or
#: its spot host reclaimed, and SIGKILL 30 s later (ECS's default stop timeout): drain for 18 s, then
#: `--kill-grace` (10 s) for what is left.
JOB_SIGTERM_DRAIN_S = 18.0


def main(argv: Sequence[str] | None = None) -> int:
    opts = with_job_credential(parse_cli(argv))  # the settings first, then the network
    not_dumpable()  # its token stays out of the trials' reach (`stratus.contract.hardening`)
    logging.basicConfig(
        level=opts.log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    s = opts.settings
    if not s.token and s.aws:
        log.info("no agent token: the credential comes from this instance's IAM role (SigV4)")
    elif not s.token:
        log.warning("%s is not set: calls to the API carry no Authorization header", TOKEN_ENV)
    log.info(
        "agent %s: pool %s, %d slots, GPUs [%s], API %s, work dir %s",
        s.agent_id,
        s.pool,
        s.slots,
        ",".join(s.gpus),
        s.api_url,
        s.work_dir,
    )
    if opts.instance is not None:
        log.info(
            "on EC2: instance %s (%s), address %s; spot notices polled every %g s at %s",
            opts.instance.instance_id,
            opts.instance.life_cycle,
            s.address,
            s.spot_poll_interval,
            s.imds_url,
        )
    agent = Agent(s)
    sigterms = 0

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal sigterms
        if (s.aws or s.only_run) and signum == signal.SIGTERM:
            sigterms += 1
            if sigterms == 1:  # the machine is going away: drain (the runs checkpoint and are requeued)
                drain_s = SIGTERM_DRAIN_S if s.aws else JOB_SIGTERM_DRAIN_S
                agent.drain(time.monotonic() + drain_s + s.kill_grace, "SIGTERM")
                return
        agent.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if not s.aws:
        return agent.run()
    imds = ImdsClient(s.imds_url)
    watcher = SpotWatcher(imds, agent.drain, interval=s.spot_poll_interval)
    watcher.start()
    try:
        return agent.run()
    finally:
        watcher.stop()
        imds.close()
