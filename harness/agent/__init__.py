"""The Stratus compute agent: ``python -m stratus.harness.agent --api URL --agent-id ID --pool POOL ...``.

It heartbeats to the control plane (``POST /agents/{id}/heartbeat``), starts the runs the answer
launches (context download → ``startup-hook.sh`` → entrypoint, each in its own process group), ships their
output to ``POST /trials/{id}/logs``, kills what the answer kills, and reports every run's exit.
Uses only the standard library (its HTTP session is `stratus.contract.http`'s); never imports the control plane.
"""

from stratus.contract.launch import LaunchSpec
from stratus.harness.agent._agent import Agent
from stratus.harness.agent._api import AgentApi
from stratus.harness.agent._run import Run
from stratus.harness.agent._settings import Settings, detect_gpus

__all__ = ["Agent", "AgentApi", "LaunchSpec", "Run", "Settings", "detect_gpus"]
