"""How a launcher frames a worker's line with its rank so the agent can trust it: the mark, the run's
frame secret (`stratus.contract.env.LOG_FRAME`, given by the agent, kept from the workers), then `[rank=N] `.
The agent removes the mark and the secret; a line without them has no rank, whatever it says."""

from __future__ import annotations

#: ASCII's record separator: leads a framed line, followed by the run's frame secret.
LOG_FRAME_MARK = "\x1e"
