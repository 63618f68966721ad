"""The Stratus compute agent: ``python -m harness.agent --api URL --agent-id ID --pool POOL ...``.

It heartbeats to the control plane (``POST /agents/{id}/heartbeat``), starts the runs the answer
launches (context download → ``startup-hook.sh`` → entrypoint, each in its own process group), ships their
output to ``POST /trials/{id}/logs``, kills what the answer kills, and reports every run's exit.
Uses only the standard library (its HTTP session is `contract.http`'s); never imports the control plane.
"""

from contract.launch import LaunchSpec
from harness.agent._agent import Agent
from harness.agent._api import AgentApi
from harness.agent._run import Run
from harness.agent._settings import Settings, detect_gpus

__all__ = ["Agent", "AgentApi", "LaunchSpec", "Run", "Settings", "detect_gpus"]
