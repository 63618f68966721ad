"""``python -m harness.agent``: parse the settings, log to stderr, run the agent until SIGTERM/SIGINT."""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from contract.hardening import not_dumpable
from harness.agent._agent import Agent
from harness.agent._settings import TOKEN_ENV, parse_cli

log = logging.getLogger("harness.agent")


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_cli(argv)
    not_dumpable()  # its token stays out of the trials' reach (`contract.hardening`)
    logging.basicConfig(
        level=opts.log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    s = opts.settings
    if not s.token:
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
    agent = Agent(s)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        agent.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return agent.run()
