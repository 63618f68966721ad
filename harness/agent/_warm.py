"""Warm start: the agent keeps one interpreter with torch and the harness already imported, and starts a
trial by forking it (a fork server, as Android's zygote) instead of starting Python anew.

What a warm start saves is the trial's own start: Python, torch, numpy and the harness imported before
the first line of the trial runs (most of the 2.4 s of "submit → first metric" that is not the control
plane, `bench/results/warm_start.md`).

**When a trial starts warm** (every rule must hold; `cold_reason` names the first that does not, and the
run's log says so on its first line):

1. the agent runs a warm interpreter (`STRATUS_WARM_START=1`, and it started);
2. the context has no ``startup-hook.sh``: a hook may install packages or export variables that an
   interpreter started before it cannot see;
3. the entrypoint is this interpreter running a script or a module (``python3 train.py ARGS`` or
   ``python3 -m pkg.mod ARGS``, ``-u`` allowed), not a launcher of workers (``stratus.launchers.*``,
   Determined's ``determined.launch.*``), a shell
   line or another program;
4. the trial's environment agrees with the warm interpreter's on every variable read while Python and
   its libraries start (``PYTHON*``, ``LD_*``, ``OMP_*``, ``MKL_*``, ``KMP_*``, ``OPENBLAS_*``,
   ``TORCH_*``); ``CUDA_VISIBLE_DEVICES`` may differ, since CUDA reads it only when it initialises;
5. in the warm interpreter itself, checked before each fork: it has one Python thread and no native
   thread beyond those its imports started (forking a threaded process copies locks held by threads that
   do not exist in the child; the pools libraries start when imported, numpy's OpenBLAS, handle a fork
   with their own `pthread_atfork` handlers), and CUDA is not initialised (a CUDA context does not
   survive a fork).

A warm child is what a cold start would be: its own session and process group (the agent signals the
group), confined as a cold trial is, the run's environment, working folder, output pipe and ``argv``,
``sys.path[0]`` as Python sets it, Python's and numpy's global random state drawn anew, and a normal
interpreter exit (``atexit`` handlers, non-daemon threads). What differs: modules the warm interpreter
imported are already imported (their import-time side effects happened once, in the warm interpreter),
and ``PYTHONHASHSEED``-randomised hashes are the warm interpreter's.

The server (`serve`, run as ``python -c "from stratus.harness.agent._warm import main; main()" SOCKET``) is
single-threaded: it waits on its
socket and on SIGCHLD with one selector, forks on a request (the run's output pipe comes with it, as
SCM_RIGHTS), answers the child's pid, and when the child ends, its exit status (as `Popen.returncode`).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import selectors
import signal
import socket
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: What the warm interpreter imports before it serves (`STRATUS_WARM_IMPORTS`, comma-separated).
DEFAULT_IMPORTS = ("numpy", "torch", "determined", "stratus.harness.core")
IMPORTS_ENV = "STRATUS_WARM_IMPORTS"
#: Variables read while Python and its libraries start: a trial differing in one starts cold.
IMPORT_TIME_VARIABLES = re.compile(r"^(PYTHON|LD_|OMP_|MKL_|KMP_|OPENBLAS_|TORCH_)")
HOOK = "startup-hook.sh"
_MAX_REQUEST = 4 << 20


@dataclass(frozen=True)
class Job:
    """What a forked child runs: the module or script, its argv, folder and environment."""

    module: str | None
    script: str | None
    argv: list[str]
    cwd: str
    env: dict[str, str]


#: Modules that start workers of their own (`python3 -m <one of these>.<launcher>`).
LAUNCHER_PACKAGES = ("stratus.launchers", "determined.launch")


def plain_python(argv: Sequence[str], executable: str) -> tuple[str | None, str | None, list[str]] | None:
    """``(module, script, sys.argv)`` when ``argv`` runs ``executable`` on a module or a script with no
    other interpreter option than ``-u``; None otherwise."""
    if not argv:
        return None
    program = argv[0]
    names = {"python", "python3", f"python3.{sys.version_info.minor}"}
    if program not in names and os.path.realpath(program) != os.path.realpath(executable):
        return None
    rest = list(argv[1:])
    while rest and rest[0] == "-u":
        rest.pop(0)
    if len(rest) >= 2 and rest[0] == "-m" and not rest[1].startswith("-"):
        return rest[1], None, [rest[1], *rest[2:]]
    if rest and not rest[0].startswith("-"):
        return None, rest[0], rest
    return None


def cold_reason(
    argv: Sequence[str],
    context_dir: Path,
    env: Mapping[str, str],
    warm_env: Mapping[str, str],
    executable: str,
) -> str | None:
    """Why a run must start cold (rules 2 to 4 of the module docstring); None when it may start warm."""
    if (context_dir / HOOK).exists():
        return f"the context has a {HOOK}, which may change the environment the interpreter starts in"
    parsed = plain_python(argv, executable)
    if parsed is None:
        return "the entrypoint is not `python3 SCRIPT` or `python3 -m MODULE` of the agent's interpreter"
    module, script, _ = parsed
    if module is not None and any(module == p or module.startswith(p + ".") for p in LAUNCHER_PACKAGES):
        return "a launcher starts its own workers"
    if script is not None and not (context_dir / script).is_file():
        return f"the script {script} is not a file of the context"
    for name in sorted({*env, *warm_env}):
        if IMPORT_TIME_VARIABLES.match(name) and env.get(name) != warm_env.get(name):
            return f"{name} differs from the warm interpreter's (it is read when Python starts)"
    return None


#: Native threads the preloaded libraries started while they were imported (numpy's OpenBLAS pool), which
#: get through a fork by their own `pthread_atfork` handlers; set once the imports are done.
_IMPORT_THREADS = 1


def _native_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _fork_refusal() -> str | None:
    """Rule 5, in the server before each fork."""
    if threading.active_count() != 1 or _native_threads() > _IMPORT_THREADS:
        return "the warm interpreter has started threads since its imports (a fork would copy their locks)"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "CUDA is initialised in the warm interpreter"
    return None


# ---- the server ---------------------------------------------------------------------------------------


def serve(path: str) -> Job:
    """Import, listen on ``path``, fork for each request; returns only in a forked child, with its job.
    It ends with the agent that started it, however the agent ends (SIGTERM when its parent dies)."""
    from stratus.contract.hardening import end_with_parent

    parent = os.getppid()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # its children live on in their sessions
    if end_with_parent(signal.SIGTERM) and os.getppid() != parent:
        os._exit(0)  # the agent died before the request took
    for name in os.environ.get(IMPORTS_ENV, ",".join(DEFAULT_IMPORTS)).split(","):
        if name.strip():
            try:
                importlib.import_module(name.strip())
            except Exception as error:  # an optional package: the trials that need it import it cold
                print(f"warm start: not importing {name}: {type(error).__name__}: {error}", file=sys.stderr)
    global _IMPORT_THREADS
    _IMPORT_THREADS = _native_threads()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # the wakeup fd carries it
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_r, selectors.EVENT_READ, "child")
    children: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while True:
        for key, _ in selector.select():
            if key.data == "accept":
                conn, _ = listener.accept()
                selector.register(conn, selectors.EVENT_READ, "request")
            elif key.data == "child":
                os.read(wake_r, 4096)
                _reap(children)
            else:
                requester = key.fileobj
                assert isinstance(requester, socket.socket)
                selector.unregister(requester)
                job = _handle(requester, children)
                if job is not None:  # the forked child: leave the server behind
                    selector.close()
                    signal.set_wakeup_fd(-1)
                    for fd in (wake_r, wake_w, listener.fileno(), *(c.fileno() for c in children.values())):
                        os.close(fd)
                    return job


def _handle(conn: socket.socket, children: dict[int, socket.socket]) -> Job | None:
    try:
        data, fds, _, _ = socket.recv_fds(conn, _MAX_REQUEST, 1)
        request = json.loads(data)
        if len(fds) != 1:
            raise ValueError("a request carries the run's output pipe")
    except (OSError, ValueError) as error:
        _answer(conn, {"error": f"bad request: {error}"})
        conn.close()
        return None
    out_fd = fds[0]
    refusal = _fork_refusal()
    if refusal is not None:
        os.close(out_fd)
        _answer(conn, {"cold": refusal})
        conn.close()
        return None
    pid = os.fork()
    if pid == 0:
        conn.close()
        return _become(request, out_fd)
    os.close(out_fd)
    children[pid] = conn
    _answer(conn, {"pid": pid})
    return None


def _reap(children: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            _answer(conn, {"exit": os.waitstatus_to_exitcode(status)})
            conn.close()


def _answer(conn: socket.socket, message: Mapping[str, Any]) -> None:
    with contextlib.suppress(OSError):  # the agent went away: the child's group is its to end
        conn.sendall(json.dumps(message).encode() + b"\n")


def _become(request: Mapping[str, Any], out_fd: int) -> Job:
    """In the forked child: the run's session, output, folder and environment."""
    os.setsid()
    from stratus.contract.hardening import confine_trial

    confine_trial()
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL if sig != signal.SIGINT else signal.default_int_handler)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    for fd in (devnull, out_fd):
        if fd > 2:
            os.close(fd)
    job = Job(
        module=request.get("module"),
        script=request.get("script"),
        argv=list(request["argv"]),
        cwd=str(request["cwd"]),
        env={str(k): str(v) for k, v in request["env"].items()},
    )
    os.chdir(job.cwd)
    os.environ.clear()
    os.environ.update(job.env)
    return job


def run_job(job: Job) -> None:
    """Run the child's trial as ``python3`` would have (in ``__main__``, with its ``sys.argv``)."""
    import runpy

    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()  # a fresh global state, as a fresh import draws (Python's random reseeds itself)
    sys.argv = list(job.argv)
    if job.script is not None:
        script = os.path.abspath(job.script)
        sys.argv[0] = job.script
        sys.path[0] = os.path.dirname(script)
        runpy.run_path(script, run_name="__main__")
    else:
        assert job.module is not None
        sys.path[0] = os.getcwd()
        runpy.run_module(job.module, run_name="__main__", alter_sys=True)


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        raise SystemExit('usage: python -c "from stratus.harness.agent._warm import main; main()" SOCKET')
    job = serve(args[0])
    run_job(job)  # the child: an exception or SystemExit ends it as it would end `python3 SCRIPT`
