"""The four steps a test run checks, as Determined's test mode does: **scheduling**, **training**,
**validation**, **checkpointing**.

The checklist goes to stderr: one line redrawn in place on a terminal, else one ``[✓] step`` line per
step as it is reached and a ``[✗] step`` line per step never reached.

A step of `WARNED_STEPS` never reached is a warning, not a failure (`skipped`, not `missing`):
Determined's test mode passes a Core API script that completes without saving a checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable

from det._logs import StatusLine
from det._runtime import Runtime

STEPS = ("scheduling", "training", "validation", "checkpointing")
#: The steps whose absence only warns, with what the warning says after "the script" or "trial N".
WARNED_STEPS: dict[str, str] = {
    "checkpointing": "saved no checkpoint, so checkpointing was not tested: a paused or preempted trial "
    "of this code starts over from its first batch (Determined's test mode passes such code too)",
}


class Checklist:
    """The four steps, shown on stderr: one redrawn line on a terminal, else a line per step."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt
        self.done: dict[str, bool] = dict.fromkeys(STEPS, False)
        self.status = StatusLine(rt.err, enabled=rt.err_is_tty())
        self._shown = ""

    def tick(self, steps: Iterable[str]) -> None:
        wanted = set(steps)
        for step in STEPS:  # in their order, whatever the order they were seen in
            if step in wanted and not self.done[step]:
                self.done[step] = True
                if not self.status.enabled:
                    self._rt.note(f"[✓] {step}")

    def missing(self) -> list[str]:
        """The steps not reached that fail the test."""
        return [step for step in STEPS if not self.done[step] and step not in WARNED_STEPS]

    def skipped(self) -> list[str]:
        """The steps not reached that only warn (`WARNED_STEPS`)."""
        return [step for step in STEPS if not self.done[step] and step in WARNED_STEPS]

    def line(self, *, final: bool = False) -> str:
        marks = {True: "✓", False: "✗" if final else " "}
        return "  ".join(f"[{marks[self.done[step]]}] {step}" for step in STEPS)

    def show(self, detail: str = "") -> None:
        text = self.line() + (f" · {detail}" if detail else "")
        if text != self._shown:  # redrawn only when it changes
            self.status.show(text)
            self._shown = text

    def print_lines(self, lines: list[str]) -> None:
        self.status.print_lines(self._rt.out, lines)

    def finish(self) -> None:
        """Leave the final state on stderr: ✓ or ✗ for every step."""
        self.status.clear()
        if self.status.enabled:
            self._rt.note(self.line(final=True))
        else:
            for step in STEPS:
                if not self.done[step]:
                    self._rt.note(f"[✗] {step}")
