"""The searcher dialogue (Determined's `core.SearcherContext`): how long to train, and what to report.

    for op in core.searcher.operations():
        while batches < op.length:              # op.length is cumulative, in op.unit (batches)
            train_one_batch(); batches += 1
            op.report_progress(batches)
        op.report_completed(validate()["validation_accuracy"])

On the platform each operation comes from `GET /trials/{id}/searcher` (contracts.md §1):

- `train`: an operation is yielded with that `length` (null: no target, the script decides) and `unit`;
  `op.report_completed(metric)` sends `POST /trials/{id}/searcher/completed {"length", "metric"}`; once an
  operation without a length is completed the iterator ends (the script said it is done);
- `wait`: the searcher has not digested the last report yet; ask again after 0.25 s, 0.5 s, then once
  a second, until it answers (a `train` with a length this process already completed is read as a wait);
  a preemption (SIGTERM, the heartbeat) ends the wait and the iterator;
- `stop`: the iterator ends and `core.preempt.should_preempt()` latches to true.

Off the platform the local twin (`_searcher_local.py`) yields ONE operation.

Only the chief talks to the control plane. With a `torch.distributed` process group the chief hands
every operation to the other ranks (they must iterate in step); without one each rank asks for itself.
`report_completed` and `report_progress` are no-ops on other ranks.

`report_invalid_hp(message)` sends `POST /trials/{id}/searcher/invalid_hp` once; `stratus.harness.init()`'s
context calls it when `harness.InvalidHP` leaves its `with` block, then exits with code 0.
"""

from __future__ import annotations

import abc
import enum
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from stratus.contract.actions import SearcherAction
from stratus.harness._api import ApiClient
from stratus.harness.core._distributed import DistributedContext
from stratus.harness.core._reports import ReportSender
from stratus.harness.core._train import clean_metrics
from stratus.harness.errors import SearcherError

log = logging.getLogger("stratus.harness.searcher")

BATCHES = "batches"
WAIT_BACKOFF_S: tuple[float, ...] = (0.25, 0.5, 1.0)  # then once a second
WAIT_LOG_EVERY = 60  # polls between "still waiting" lines


class Unit(enum.Enum):
    """Determined's `core.Unit`: the unit the config's `searcher.max_length` is written in."""

    EPOCHS = "EPOCHS"
    RECORDS = "RECORDS"
    BATCHES = "BATCHES"


class SearcherMode(enum.Enum):
    """Determined's `core.SearcherMode`. `WorkersAskChief`: every rank iterates `operations()` in step
    and the chief hands them out; `ChiefOnly`: only the chief iterates."""

    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHIEF_ONLY"


@dataclass(frozen=True)
class SearcherAnswer:
    """One answer of `GET /trials/{id}/searcher`."""

    action: SearcherAction
    length: int | None = None
    unit: str = BATCHES

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> SearcherAnswer:
        raw = body.get("action")
        try:
            action = SearcherAction(raw if isinstance(raw, str) else repr(raw))
        except ValueError:
            raise SearcherError(
                f"the searcher answered action {raw!r}; expected train, wait or stop "
                "(the control plane and harness disagree on contracts.md §1)."
            ) from None
        length = body.get("length")
        if length is not None and (isinstance(length, bool) or not isinstance(length, int) or length < 0):
            raise SearcherError(f"the searcher answered length {length!r}; expected a whole number or null.")
        unit = body.get("unit") or BATCHES
        return cls(action, length, str(unit))


class SearcherOperation:
    """One train-validate-report cycle: train until the cumulative `length` (in `unit`), then
    `report_completed(searcher_metric)` exactly once."""

    def __init__(self, searcher: SearcherContext, length: int | None, unit: str, *, is_chief: bool) -> None:
        self._searcher = searcher
        self._length = length
        self._unit = unit
        self._is_chief = is_chief
        self._completed = False
        self._progress: float | None = None

    @property
    def length(self) -> int | None:
        """The cumulative training target (not an increment); None when the script decides."""
        return self._length

    @property
    def unit(self) -> str:
        """`batches`, or the name of adaptive_asha's `time_metric`."""
        return self._unit

    @property
    def completed(self) -> bool:
        return self._completed

    def report_progress(self, length: float) -> None:
        """Report how far training is, in the unit of `length` (progress is `length / self.length`)."""
        self._progress = float(length)
        if not self._is_chief or not self._length:
            return
        self._searcher._report_progress(min(1.0, max(0.0, float(length) / self._length)))

    def report_completed(self, searcher_metric: Any, *, length: int | None = None) -> None:
        """Report the searcher metric at the end of this operation; call it once per operation.

        `length` is only needed when the operation has none (the script decided how long to train):
        it defaults to the operation's length, else to the last `report_progress` value.
        """
        if self._completed:
            raise SearcherError("report_completed() was already called for this operation; call it once.")
        self._completed = True
        self._searcher._mark_completed(self._length)
        if not self._is_chief:
            return
        done = length if length is not None else self._length
        if done is None:
            done = int(self._progress) if self._progress is not None else 0
        self._searcher._send_completed(int(done), self._unit, _metric(searcher_metric))

    def __repr__(self) -> str:
        return f"SearcherOperation(length={self._length!r}, unit={self._unit!r}, completed={self._completed})"


class SearcherContext(abc.ABC):
    """Yields the searcher's operations; see the module docstring."""

    def __init__(
        self,
        distributed: DistributedContext,
        *,
        report_progress: Callable[[float], None] | None = None,
        wait: Callable[[float], bool] | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        """`wait(seconds)` pauses between polls and returns True to stop waiting (a preemption)."""
        self._dist = distributed
        self._progress_cb = report_progress
        self._wait = wait if wait is not None else _never_interrupted
        self._config = dict(config or {})
        self._completed_lengths: set[int] = set()
        self._ops_completed = 0
        self._open_ended_done = False  # an operation without a length was completed: the script is done
        self._invalid_hp_reported = False
        self._lock = threading.Lock()

    def operations(
        self, searcher_mode: SearcherMode | str = SearcherMode.WorkersAskChief, auto_ack: bool = True
    ) -> Iterator[SearcherOperation]:
        """Yield operations until the searcher says stop; each must be completed before the next.

        `searcher_mode` and `auto_ack` are Determined's arguments (`ChiefOnly` refuses other ranks).
        """
        mode = SearcherMode(searcher_mode)
        share = mode is SearcherMode.WorkersAskChief and self._dist.size > 1 and self._dist.has_process_group
        if not self._dist.is_chief and mode is SearcherMode.ChiefOnly:
            raise SearcherError("operations(searcher_mode=ChiefOnly) was called on a non-chief rank.")
        while True:
            if share and not self._dist.is_chief:
                received = self._dist.broadcast(None)
                if received is None:
                    return
                answer = SearcherAnswer(SearcherAction.TRAIN, received[0], received[1])
            else:
                next_answer = self._next_train()
                if share:
                    self._dist.broadcast(
                        None if next_answer is None else (next_answer.length, next_answer.unit)
                    )
                if next_answer is None:
                    return
                answer = next_answer
            op = SearcherOperation(self, answer.length, answer.unit, is_chief=self._dist.is_chief)
            yield op
            if not op.completed:
                raise SearcherError(
                    f"operation of length {op.length} was not completed; call op.report_completed(metric) "
                    "on every operation before asking for the next."
                )

    def next_operation(self) -> SearcherOperation | None:
        """The next operation, outside the iterator (each rank asks for itself); None once the searcher
        says stop or a preemption ends the wait. Complete it before asking again."""
        answer = self._next_train()
        if answer is None:
            return None
        return SearcherOperation(self, answer.length, answer.unit, is_chief=self._dist.is_chief)

    def acknowledge_out_of_ops(self) -> None:  # noqa: B027 - Determined's no-op, not a hook
        """Determined's call after the last operation; nothing to do here."""

    def get_configured_units(self) -> Unit | None:
        """The unit of the config's `searcher.max_length` (`{epochs: 5}` gives EPOCHS); None when it is a
        bare number or absent."""
        max_length = (self._config.get("searcher") or {}).get("max_length")
        if isinstance(max_length, Mapping) and len(max_length) == 1:
            return {"batches": Unit.BATCHES, "records": Unit.RECORDS, "epochs": Unit.EPOCHS}.get(
                str(next(iter(max_length)))
            )
        return None

    def report_invalid_hp(self, message: str = "") -> None:
        """Tell the searcher the trial's hyperparameters cannot work (once; chief only)."""
        with self._lock:
            if self._invalid_hp_reported:
                return
            self._invalid_hp_reported = True
        if self._dist.is_chief:
            self._send_invalid_hp(message or "InvalidHP raised by the trial")

    def _next_train(self) -> SearcherAnswer | None:
        """The next `train` answer, or None for stop (or a preemption while waiting)."""
        polls = 0
        while True:
            answer = self._ask()
            if answer.action == SearcherAction.STOP:
                self._on_stop()
                return None
            if answer.action == SearcherAction.TRAIN and answer.length is None and self._open_ended_done:
                return None  # the script decided when it was done, and it said so
            if answer.action == SearcherAction.TRAIN and not (
                answer.length is not None and answer.length in self._completed_lengths
            ):
                return answer
            delay = WAIT_BACKOFF_S[min(polls, len(WAIT_BACKOFF_S) - 1)]
            polls += 1
            if polls % WAIT_LOG_EVERY == 0:
                log.info("still waiting for the searcher (%d polls)", polls)
            if self._wait(delay):
                log.info("preempted while waiting for the searcher; no more operations")
                return None

    def _mark_completed(self, length: int | None) -> None:
        with self._lock:
            self._ops_completed += 1
            if length is None:
                self._open_ended_done = True
            else:
                self._completed_lengths.add(length)

    def _report_progress(self, progress: float) -> None:
        if self._progress_cb is not None:
            self._progress_cb(progress)

    def _on_stop(self) -> None:  # noqa: B027 - a hook, empty by default
        """Called when the searcher says stop."""

    @abc.abstractmethod
    def _ask(self) -> SearcherAnswer: ...

    @abc.abstractmethod
    def _send_completed(self, length: int, unit: str, metric: Any) -> None: ...

    @abc.abstractmethod
    def _send_invalid_hp(self, message: str) -> None: ...


class PlatformSearcherContext(SearcherContext):
    """Asks `GET /trials/{id}/searcher`; reports to `POST .../searcher/completed` and `.../invalid_hp`.

    The searcher's answer depends on what the trial reported, so the report sender is flushed before
    each question, and a completion goes out in its place after the metrics and is delivered at once."""

    def __init__(
        self,
        api: ApiClient,
        trial_id: int,
        distributed: DistributedContext,
        sender: ReportSender,
        *,
        report_progress: Callable[[float], None] | None = None,
        wait: Callable[[float], bool] | None = None,
        on_stop: Callable[[], None] | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(distributed, report_progress=report_progress, wait=wait, config=config)
        self._api = api
        self._trial_id = trial_id
        self._sender = sender
        self._stop_cb = on_stop

    def _ask(self) -> SearcherAnswer:
        self._sender.flush()
        return SearcherAnswer.from_json(self._api.get(f"/trials/{self._trial_id}/searcher"))

    def _on_stop(self) -> None:
        if self._stop_cb is not None:
            self._stop_cb()

    def _send_completed(self, length: int, unit: str, metric: Any) -> None:
        body = {"length": length, "metric": metric}
        path = f"/trials/{self._trial_id}/searcher/completed"
        self._sender.call(path, body, f"the searcher operation of length {length}")
        self._sender.flush()

    def _send_invalid_hp(self, message: str) -> None:
        self._sender.flush()
        self._api.post(f"/trials/{self._trial_id}/searcher/invalid_hp", {"message": message})


def _metric(value: Any) -> Any:
    """The searcher metric as JSON: a number (tensors and numpy scalars unwrapped); non-finite floats
    become "NaN" / "Infinity" / "-Infinity" as metrics do."""
    cleaned = clean_metrics({"searcher_metric": value})["searcher_metric"]
    if isinstance(cleaned, bool) or not isinstance(cleaned, int | float | str):
        raise SearcherError(f"the searcher metric must be a number, not {type(value).__name__}.")
    if isinstance(cleaned, str) and cleaned not in ("NaN", "Infinity", "-Infinity"):
        try:
            return float(cleaned)
        except ValueError:
            raise SearcherError(f"the searcher metric must be a number, not {cleaned!r}.") from None
    return float(cleaned) if isinstance(cleaned, int) else cleaned


def _never_interrupted(seconds: float) -> bool:
    threading.Event().wait(seconds)
    return False
