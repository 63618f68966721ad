"""The AdaptDL supervisor the replicas call: a small HTTP server on 127.0.0.1, in the launcher.

AdaptDL calls its supervisor without authentication, retries a 408 with no pause, and the API Gateway cuts
requests at 29 s, so the replicas never call the API themselves (docs/architecture.md, "Elastic trials (AdaptDL)"):

- ``GET /discover/<job>/<group>`` is answered here, from the rendezvous the launcher already did: the
  address of every replica by global rank (AdaptDL reads ``[0]``, rank 0's). A job or a group (the restart
  counter) other than this start's is refused with 404, which AdaptDL raises instead of looping.
- ``PUT /hints/<job>`` is checked (`stratus.contract.adaptdl.validate_hints`), given a ``speedup`` table when
  ``adaptdl.goodput`` imports in this process (with numpy's removed aliases, `stratus.launchers._adaptdl_numpy`,
  as the replicas have them), and forwarded to ``PUT {master}/trials/{id}/adaptdl/hints``
  with the run token. An API without that route (404) means "not supported yet": said once, and AdaptDL
  still gets 200 so training goes on. Off the platform the hints are only checked.
"""

from __future__ import annotations

import importlib
import json
import math
import sys
import threading
import urllib.parse
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from stratus.contract import adaptdl
from stratus.contract.errors import HttpCallError, InvalidHintsError
from stratus.contract.http import Session
from stratus.launchers._adaptdl_numpy import install as install_numpy_aliases

MAX_BODY_BYTES = 1 << 20


def discover_answer(path: str, job_id: str, group: int, addresses: Sequence[str]) -> tuple[int, Any]:
    """(status, JSON body) for ``GET path``: the addresses by rank for this job's group."""
    rest = urllib.parse.unquote(path.split("?", 1)[0])[len(adaptdl.DISCOVER_PREFIX) :]
    job, _, asked = rest.rpartition("/")
    if job != job_id:
        return 404, {"error": "NotFound", "message": f"job {job!r} is not this launcher's ({job_id!r})"}
    if asked != str(group):
        return 404, {
            "error": "NotFound",
            "message": f"group {asked!r} is not this start's ADAPTDL_NUM_RESTARTS ({group}); restart the replica",
        }
    return 200, list(addresses)


def speedup_table(
    hints: dict[str, Any], max_replicas: int, replicas_per_node: int
) -> dict[str, float] | None:
    """``{"r": goodput(r replicas) / goodput(1)}`` for r = 1..max_replicas, with AdaptDL's own goodput model
    (adaptdl-sched's ``SpeedupFunction``); None when ``adaptdl.goodput`` does not import here or the hints
    lack the model's parameters (no ``perfParams``/``gradParams`` yet)."""
    perf, grad, init = hints.get("perfParams"), hints.get("gradParams"), hints.get("initBatchSize")
    if perf is None or grad is None or init is None:
        return None
    install_numpy_aliases()  # adaptdl 0.2.11's optimize(accumulation=False) uses np.int, gone since numpy 1.24
    try:
        np = importlib.import_module("numpy")
        goodput = importlib.import_module("adaptdl.goodput")
    except Exception:  # not installed, or its scipy/autograd missing: the raw hints go on
        return None
    fn = goodput.GoodputFunction(
        goodput.PerfParams(**perf), goodput.GradParams(sqr=grad["norm"], var=grad["var"]), init
    )
    bounds = hints.get("localBszBounds")
    kwargs = {
        "max_batch_size": hints.get("maxBatchSize") or init,
        "atomic_bsz_range": tuple(bounds) if bounds else None,
        "accumulation": bool(hints.get("gradientAccumulation")),
    }
    replicas = np.arange(1, max_replicas + 1)
    nodes = np.ceil(replicas / replicas_per_node).astype(int)
    try:
        rates = fn.optimize(nodes, replicas, **kwargs)[0]
        base = float(fn.optimize(1, 1, **kwargs)[0])
    except Exception as e:
        _say(f"the speedup table could not be computed ({type(e).__name__}: {e}); hints go without it")
        return None
    if not math.isfinite(base) or base <= 0:
        return None
    return {
        str(int(r)): float(g) / base for r, g in zip(replicas, rates, strict=True) if math.isfinite(float(g))
    }


class HintsForwarder:
    """Sends checked hints to the API's hints route, with the run token."""

    def __init__(self, session: Session, trial_id: str) -> None:
        self._session = session
        self._path = adaptdl.HINTS_ROUTE.format(trial_id=urllib.parse.quote(trial_id, safe=""))
        self._said_unsupported = threading.Event()

    def send(self, hints: dict[str, Any]) -> None:
        try:
            self._session.call("PUT", self._path, hints, timeout_s=10.0)
        except HttpCallError as e:
            if e.status == 404:
                if not self._said_unsupported.is_set():
                    self._said_unsupported.set()
                    _say(f"the API has no {adaptdl.HINTS_ROUTE} route yet; hints stay with the replicas")
                return
            _say(f"hints not delivered: {e}")


class SupervisorProxy:
    """The server, on a thread; ``url`` is what ``ADAPTDL_SUPERVISOR_URL`` says."""

    def __init__(
        self,
        job_id: str,
        group: int,
        addresses: Sequence[str],
        *,
        send_hints: Callable[[dict[str, Any]], None] | None = None,
        max_replicas: int = 1,
        replicas_per_node: int = 1,
    ) -> None:
        self.job_id, self.group, self.addresses = job_id, group, list(addresses)
        self._send_hints = send_hints
        self._max_replicas, self._per_node = max_replicas, replicas_per_node
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="adaptdl-proxy", daemon=True)

    def __enter__(self) -> SupervisorProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def hints(self, raw: bytes) -> tuple[int, Any]:
        """(status, JSON body) for a PUT of ``raw`` hints."""
        try:
            hints = adaptdl.validate_hints(json.loads(raw))
        except (ValueError, InvalidHintsError) as e:
            _say(f"hints refused: {e}")
            return 400, {"error": "BadRequest", "message": str(e)}
        table = speedup_table(hints, self._max_replicas, self._per_node)
        if table is not None:
            hints[adaptdl.SPEEDUP] = table
        if self._send_hints is not None:
            self._send_hints(hints)
        return 200, {}


def _handler(proxy: SupervisorProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if not self.path.startswith(adaptdl.DISCOVER_PREFIX):
                self._answer(404, {"error": "NotFound", "message": self.path})
                return
            self._answer(*discover_answer(self.path, proxy.job_id, proxy.group, proxy.addresses))

        def do_PUT(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            job = urllib.parse.unquote(self.path[len(adaptdl.HINTS_PREFIX) :])
            if (
                not self.path.startswith(adaptdl.HINTS_PREFIX)
                or job != proxy.job_id
                or length > MAX_BODY_BYTES
            ):
                self.rfile.read(min(length, MAX_BODY_BYTES))
                self._answer(404, {"error": "NotFound", "message": f"{self.path} is not this job's hints"})
                return
            self._answer(*proxy.hints(self.rfile.read(length)))

        def _answer(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def _say(message: str) -> None:
    print(f"[launcher] adaptdl: {message}", file=sys.stderr, flush=True)
