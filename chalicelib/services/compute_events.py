"""AWS events about the stack's compute, from the events queue (`contract.messages.ComputeEvent`):
a spot interruption warning drains the instance's agent (`draining`). Every event may come more than
once and late; each handler does only what is still to do."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from chalicelib.domain import compute_events
from chalicelib.services import draining
from chalicelib.services.clock import iso_utc
from chalicelib.services.ports import Ports

log = logging.getLogger(__name__)


def handle(ports: Ports, event: Mapping[str, Any]) -> None:
    parsed = compute_events.parse(event)
    if parsed is None:
        log.info("compute event ignored: %s / %s", event.get("source"), event.get("detail-type"))
        return
    when = iso_utc(parsed.time) if parsed.time is not None else "now"
    reason = f"EC2 reclaims spot instance {parsed.instance_id} ({parsed.action}, warned at {when})"
    # On EC2 an agent's id is its instance id.
    draining.drain_agent(ports, parsed.instance_id, reason)
