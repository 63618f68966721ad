"""Words in the messages the control plane writes for people."""

from __future__ import annotations


def plural(count: int, word: str, many: str | None = None) -> str:
    """A count and its noun in agreement: `1 agent`, `2 agents` (`many`: an irregular plural)."""
    return f"{count} {word if count == 1 else (many or word + 's')}"
