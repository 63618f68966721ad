"""A job's slot limit: Determined's `resources.max_slots`, "the maximum number of scheduler slots that
this experiment is allowed to use at any one time", changed while it runs by `det experiment set
max-slots`.

Determined enforces it in its fair-share scheduler only (a job's demand is capped); here it holds under
every policy. Before a pass plans, each job's requests are taken in queue order while the slots its runs
hold plus those already let through stay within its limit; the rest are held back: they wait with the
reason, block no other job (they are never a blocked head, never preempt, reserve nothing), and the
backend is not asked to grow the pool for them. A lowered limit stops no running trial: the job gets no
more slots until its holdings drop under the new limit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from chalicelib.domain.scheduling import Holding, SlotRequest


class JobLimits:
    """The slots each job holds (its holdings, stopping ones included until their slots are free) and
    the requests let through so far, which count as held: fed in queue order, page after page."""

    def __init__(self, holdings: Iterable[Holding]) -> None:
        self.held: dict[str, int] = {}
        for holding in holdings:
            self.held[holding.job_id] = self.held.get(holding.job_id, 0) + holding.slots

    def split(self, requests: Sequence[SlotRequest]) -> tuple[list[SlotRequest], dict[str, str]]:
        """The requests the pass may plan, in order, and run id -> why each other one is held back."""
        admitted: list[SlotRequest] = []
        held_back: dict[str, str] = {}
        for request in requests:
            limit = request.max_slots
            if limit > 0:
                taken = self.held.get(request.job_id, 0)
                if taken + request.slots > limit:
                    held_back[request.run_id] = held_back_reason(request, taken)
                    continue
                self.held[request.job_id] = taken + request.slots
            admitted.append(request)
        return admitted, held_back


def held_back_reason(request: SlotRequest, taken: int) -> str:
    slots = "1 slot" if request.slots == 1 else f"{request.slots} slots"
    return (
        f"needs {slots}; its experiment may hold {request.max_slots} at once (resources.max_slots) and "
        f"{taken} are taken by its other trials; `det experiment set max-slots {request.job_id} N` "
        "changes the limit"
    )


def capped_demand(
    waiting_slots: Mapping[str, int], requests: Iterable[SlotRequest], holdings: Iterable[Holding]
) -> dict[str, int]:
    """Each job's demand for fair shares, capped at what its limit still allows (Determined's fair
    share caps a group's slot demand at its max_slots). A job's limit is known from its requests read."""
    limits = {r.job_id: r.max_slots for r in requests if r.max_slots > 0}
    if not limits:
        return dict(waiting_slots)
    held = JobLimits(holdings).held
    return {
        job: min(slots, max(0, limits[job] - held.get(job, 0))) if job in limits else slots
        for job, slots in waiting_slots.items()
    }
