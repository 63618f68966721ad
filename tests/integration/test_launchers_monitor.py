"""The launchers with real processes: tiny Python workers, and real 2-process gloo groups.

Each launcher runs as `python -m launchers.<name>` from this venv; every wait has a deadline and nothing
waits by sleeping (workers block in `signal.pause()`, on a FIFO, or in a collective).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from stratus.launchers import Worker, run_workers
from stratus.launchers._monitor import supervise

FIRST_FAILURE = "[launcher] rank {rank} exited with code {code}; stopping the other workers"

# Every worker: prints "ready" once its handlers are in place, says which signals reached it.
WORKER = textwrap.dedent(
    """
    import os, signal, sys
    rank = int(os.environ["RANK"])
    def on(sig, frame):
        print(f"rank {rank} got {signal.Signals(sig).name}", flush=True)
        if sig == signal.SIGTERM:
            sys.exit(0)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(s, on)
    print(f"ready {rank}", flush=True)
    while True:
        signal.pause()
    """
)


_READERS: dict[int, queue.Queue[str | None]] = {}


def _lines(proc: subprocess.Popen[str]) -> queue.Queue[str | None]:
    """A thread reads ``proc``'s stdout line by line into a queue. (A selector on the pipe next to a
    buffered readline misses lines already read into the buffer, so the waiting is done on the queue.)"""
    lines = _READERS.get(proc.pid)
    if lines is None:
        lines = _READERS[proc.pid] = queue.Queue()
        assert proc.stdout is not None
        stream = proc.stdout

        def pump() -> None:
            try:
                for line in stream:
                    lines.put(line.rstrip("\n"))
            except (OSError, ValueError):  # closed by communicate() at the end of the test
                pass
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
    return lines


def spawn_torch_distributed(workdir, slots: int) -> subprocess.Popen[str]:  # noqa: ANN001
    """`python -m stratus.launchers.torch_distributed -- worker.py` with ``slots`` workers, its output piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "stratus.launchers.torch_distributed", "--", "worker.py"],
        cwd=workdir.path,
        env=workdir.env(STRATUS_SLOTS=str(slots)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_until(proc: subprocess.Popen[str], wanted: set[str], timeout: float) -> list[str]:
    """Lines of ``proc``'s stdout until each of ``wanted`` has been seen (a deadline, not a sleep)."""
    lines = _lines(proc)
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while not wanted <= set(seen):
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"still waiting for {wanted - set(seen)}; got {seen}") from None
        if line is None:
            raise AssertionError(f"output ended before {wanted - set(seen)}; got {seen}")
        seen.append(line)
    return seen


def in_process(tmp_path: Path, workers: list[Worker], **kwargs: object) -> tuple[int, str, str]:
    """run_workers in this process, its output going to files."""
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with out.open("wb") as o, err.open("wb") as e:
        code = run_workers(workers, out_fd=o.fileno(), err_fd=e.fileno(), **kwargs)  # type: ignore[arg-type]
    return code, out.read_text(), err.read_text()


def py(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def rank_env(rank: int, base: Mapping[str, str] | None = None) -> dict[str, str]:
    return {**(os.environ if base is None else base), "RANK": str(rank)}


# ---- run_workers -------------------------------------------------------------------------------------


def test_all_exit_0(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    workers = [Worker(r, py(f"print('hello from {r}')")) for r in range(3)]
    code, out, err = in_process(tmp_path, workers, report_path=report)
    assert code == 0
    assert sorted(out.splitlines()) == [
        "[rank=0] hello from 0",
        "[rank=1] hello from 1",
        "[rank=2] hello from 2",
    ]
    assert "[launcher]" not in err
    assert json.loads(report.read_text()) == {
        "exit_code": 0,
        "failed_rank": None,
        "reason": "every worker exited with code 0",
    }


def test_first_failure_stops_the_others(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    block = "import signal; print('up', flush=True); signal.pause()"
    workers = [Worker(0, py(block)), Worker(1, py("import sys; sys.exit(3)")), Worker(2, py(block))]
    code, _, err = in_process(tmp_path, workers, report_path=report, kill_grace=30.0)
    assert code == 3
    assert err.count("[launcher]") == 1
    assert FIRST_FAILURE.format(rank=1, code=3) in err.splitlines()
    assert json.loads(report.read_text()) == {
        "exit_code": 3,
        "failed_rank": 1,
        "reason": "rank 1 exited with code 3",
    }


def test_worker_ignoring_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    fifo = tmp_path / "ready.fifo"
    os.mkfifo(fifo)
    stubborn = f"""
        import signal
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with open({str(fifo)!r}, "w") as f:
            f.write("ignoring SIGTERM")
        while True:
            signal.pause()
    """
    # Rank 1 fails only once rank 0 ignores SIGTERM: it reads the FIFO to its end first.
    failing = f"import sys; open({str(fifo)!r}).read(); sys.exit(2)"
    code, _, err = in_process(tmp_path, [Worker(0, py(stubborn)), Worker(1, py(failing))], kill_grace=1.0)
    assert code == 2
    assert err.splitlines() == [
        FIRST_FAILURE.format(rank=1, code=2),
        "[launcher] rank 0 still running 1 s after SIGTERM; sending SIGKILL",
    ]


def test_worker_killed_by_a_signal_counts_as_failed(tmp_path: Path) -> None:
    killed = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    code, _, err = in_process(tmp_path, [Worker(0, py(killed)), Worker(1, py("pass"))])
    assert code == 128 + signal.SIGKILL
    assert FIRST_FAILURE.format(rank=0, code=137) in err.splitlines()


def test_the_outcome_tells_a_worker_a_signal_ended_from_one_that_exited_143(tmp_path: Path) -> None:
    """`Outcome.signals`: a worker that died of SIGTERM had no handler yet (an AdaptDL replica still
    starting); one that caught it and exited 143 did (`launchers.adaptdl.final_outcome` tells them apart)."""
    fifo = tmp_path / "handler.fifo"
    os.mkfifo(fifo)
    # Rank 1 catches SIGTERM as AdaptDL does (exit 143); rank 0 dies of its own SIGTERM once rank 1's
    # handler is in place, and the launcher passes SIGTERM on to rank 1.
    caught = f"""
        import signal, sys
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        with open({str(fifo)!r}, "w") as f:
            f.write("handler set")
        while True:
            signal.pause()
    """
    died = f"import os, signal; open({str(fifo)!r}).read(); os.kill(os.getpid(), signal.SIGTERM)"
    outcome = supervise([Worker(0, py(died)), Worker(1, py(caught))], kill_grace=30.0, announce=False)
    assert outcome.codes == {0: 143, 1: 143}
    assert outcome.signals == {0: signal.SIGTERM}


def test_prefixes_keep_each_stream_apart(tmp_path: Path) -> None:
    talk = """
        import os, sys
        r = os.environ["RANK"]
        print(f"out {r}"); print(f"err {r}", file=sys.stderr)
        sys.stdout.write(f"bar 1\\rbar 2\\r"); sys.stdout.write("x" * 40000 + "\\n")
    """
    code, out, err = in_process(tmp_path, [Worker(r, py(talk), rank_env(r)) for r in range(2)])
    assert code == 0
    for r in range(2):
        mine = [line for line in out.splitlines() if line.startswith(f"[rank={r}] ")]
        assert mine[:3] == [f"[rank={r}] out {r}", f"[rank={r}] bar 1", f"[rank={r}] bar 2"]
        assert [len(line) for line in mine[3:]] == [9 + 16384, 9 + 16384, 9 + 40000 - 2 * 16384]
        assert err.splitlines().count(f"[rank={r}] err {r}") == 1
    assert "out" not in err and "err" not in out


def test_a_command_that_cannot_start(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    workers = [Worker(0, py("pass")), Worker(1, ["/nonexistent/program"]), Worker(2, py("pass"))]
    code, _, err = in_process(tmp_path, workers, report_path=report)
    assert code == 127
    assert err.splitlines() == [
        "[launcher] rank 1 could not start '/nonexistent/program': No such file or directory",
        FIRST_FAILURE.format(rank=1, code=127),
    ]
    assert json.loads(report.read_text())["reason"] == "rank 1 could not start: No such file or directory"


# ---- torch_distributed, one node: the launcher's own workers -------------------------------------------


def test_signals_reach_every_worker(workdir) -> None:
    workdir.script("worker.py", WORKER)
    proc = spawn_torch_distributed(workdir, slots=3)
    try:
        read_until(proc, {f"[rank={r}] ready {r}" for r in range(3)}, workdir.wait_s)
        proc.send_signal(signal.SIGUSR1)
        read_until(proc, {f"[rank={r}] rank {r} got SIGUSR1" for r in range(3)}, workdir.wait_s)
        proc.send_signal(signal.SIGTERM)
        rest = read_until(proc, {f"[rank={r}] rank {r} got SIGTERM" for r in range(3)}, workdir.wait_s)
        assert proc.wait(timeout=workdir.wait_s) == 0  # the workers stopped cleanly: no failure to report
        assert all("[launcher]" not in line for line in rest)
    finally:
        proc.kill()
        proc.communicate()


def test_an_exit_after_a_passed_on_sigterm_is_named_as_such(workdir) -> None:
    """Workers that die of the SIGTERM the launcher passed on (as an AdaptDL replica does once it has
    saved): the first exit is named as the answer to that stop, not as the worker's own failure."""
    workdir.script("worker.py", WORKER.replace("sys.exit(0)", "os._exit(143)"))
    proc = spawn_torch_distributed(workdir, slots=2)
    try:
        read_until(proc, {f"[rank={r}] ready {r}" for r in range(2)}, workdir.wait_s)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=workdir.wait_s) == 143
        err = proc.communicate()[1]
    finally:
        proc.kill()
    named = [line for line in err.splitlines() if line.startswith("[launcher] rank ")]
    assert len(named) == 1 and named[0].endswith(
        " exited with code 143 after SIGTERM was passed on; stopping the other workers"
    ), err


def test_launcher_exit_code_and_report_through_the_cli(tmp_path: Path, workdir) -> None:
    workdir.script("w.py", WORKER.replace('print(f"ready', 'sys.exit(5) if rank == 2 else print(f"ready'))
    report = tmp_path / "launcher.json"
    done = workdir.launch(
        "torch_distributed", "--", "w.py", STRATUS_SLOTS="3", STRATUS_LAUNCHER_REPORT=str(report)
    )
    assert done.returncode == 5, done.stderr
    assert FIRST_FAILURE.format(rank=2, code=5) in done.stderr.splitlines()
    assert json.loads(report.read_text())["failed_rank"] == 2


def test_usage_errors_are_one_line(workdir) -> None:
    done = workdir.launch("torch_distributed", "--nproc_per_node", "2", "train.py")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "do not end with '--'" in done.stderr


@pytest.mark.parametrize(("module", "program"), [("horovod", "horovodrun"), ("deepspeed", "deepspeed")])
def test_missing_program_is_named(module: str, program: str, workdir) -> None:
    nowhere = workdir.path / "empty-bin"  # a PATH without the program (make installs deepspeed)
    nowhere.mkdir()
    done = workdir.launch(module, "train.py", PATH=str(nowhere))
    assert done.returncode == 127
    assert done.stderr.startswith(f"[launcher] {module}: {program} is not installed")
    assert done.stderr.count("\n") == 1


def test_horovod_runs_on_the_chief_only(workdir) -> None:
    nodes = {"STRATUS_SLOTS": "2", "STRATUS_NUM_NODES": "2", "STRATUS_CHIEF_ADDR": "10.0.0.1"}
    done = workdir.launch("horovod", "train.py", STRATUS_NODE_RANK="1", **nodes)
    assert done.returncode == 2
    assert "only the chief runs horovodrun" in done.stderr and done.stderr.count("\n") == 1


# ---- wrap_rank ----------------------------------------------------------------------------------------


def test_wrap_rank_prefixes_and_passes_the_exit_code_on(workdir) -> None:
    done = workdir.launch(
        "wrap_rank",
        "7",
        "--",
        sys.executable,
        "-c",
        "import sys; print('o'); print('e', file=sys.stderr); sys.exit(4)",
    )
    assert (done.returncode, done.stdout, done.stderr) == (4, "[rank=7] o\n", "[rank=7] e\n")


def test_wrap_rank_reads_the_rank_from_the_environment(workdir) -> None:
    done = workdir.launch("wrap_rank", "HOROVOD_RANK,PMI_RANK", "echo", "hi", PMI_RANK="3")
    assert (done.returncode, done.stdout) == (0, "[rank=3] hi\n")


def test_wrap_rank_forwards_signals_and_reports_128_plus_n(workdir) -> None:
    child = "import signal; print('ready', flush=True); signal.pause()"
    proc = subprocess.Popen(
        [sys.executable, "-m", "stratus.launchers.wrap_rank", "1", sys.executable, "-c", child],
        cwd=workdir.path,
        env=workdir.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        read_until(proc, {"[rank=1] ready"}, workdir.wait_s)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=workdir.wait_s) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.communicate()


# ---- real torch.distributed (gloo on CPU) --------------------------------------------------------------

CRASH_AFTER_INIT = """
    import datetime, os
    import torch, torch.distributed as dist
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    t = torch.ones(1)
    dist.all_reduce(t)  # everyone is in the group
    if dist.get_rank() == 1:
        print("rank 1 crashing", flush=True)
        os._exit(3)
    dist.all_reduce(t)  # rank 0 blocks here: rank 1 never joins
    print("rank 0 should not get here", flush=True)
"""


def test_gloo_all_reduce_on_two_processes(all_reduce, workdir) -> None:
    workdir.script("script.py", all_reduce)
    done = workdir.launch("torch_distributed", "--", "script.py", STRATUS_SLOTS="2")
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == [
        "[rank=0] sum=3 rank=0/2 local=0",
        "[rank=1] sum=3 rank=1/2 local=1",
    ]


def test_gloo_crash_ends_the_launch_before_any_collective_timeout(workdir) -> None:
    workdir.script("crash.py", CRASH_AFTER_INIT)
    done = workdir.launch("torch_distributed", "--", "crash.py", STRATUS_SLOTS="2")
    assert done.returncode == 3, done.stderr
    assert FIRST_FAILURE.format(rank=1, code=3) in done.stderr.splitlines()
    assert "should not get here" not in done.stdout


def two_nodes(workdir, *args: str, **env: str) -> list[tuple[int, str, str]]:  # workdir: the fixture
    """Two torch_distributed launchers on this machine as node 0 and node 1 of a static setup (the chief
    given, so no rendezvous), one process each: ``(exit code, stdout, stderr)`` per node. Node N's
    launcher report is ``report-N.json``."""
    from stratus.launchers._info import free_port

    common = {"STRATUS_SLOTS": "2", "STRATUS_NUM_NODES": "2", "STRATUS_CHIEF_ADDR": "127.0.0.1"}
    common["STRATUS_CHIEF_PORT"] = str(free_port())
    envs = [
        workdir.env(
            STRATUS_NODE_RANK=str(n),
            STRATUS_LAUNCHER_REPORT=str(workdir.path / f"report-{n}.json"),
            **{**common, **env},
        )
        for n in range(2)
    ]
    return workdir.run_nodes("torch_distributed", list(args), envs)


@pytest.mark.timeout(30)
def test_gloo_on_two_simulated_nodes(all_reduce, workdir) -> None:
    """Several nodes, no overrides: each launcher runs its node's workers itself, with global ranks."""
    workdir.script("script.py", all_reduce)
    (code0, out0, err0), (code1, out1, err1) = two_nodes(workdir, "--", "script.py")
    assert (code0, code1) == (0, 0), (err0, err1)
    assert out0.splitlines() == ["[rank=0] sum=3 rank=0/2 local=0"]
    assert out1.splitlines() == ["[rank=1] sum=3 rank=1/2 local=0"]


@pytest.mark.timeout(60)
def test_gloo_through_torchrun_on_two_simulated_nodes(all_reduce, workdir) -> None:
    """A torchrun override (``--rdzv_backend static``) takes the torchrun path on each node."""
    workdir.script("script.py", all_reduce)
    (code0, out0, err0), (code1, out1, err1) = two_nodes(
        workdir, "--rdzv_backend", "static", "--", "script.py"
    )
    assert (code0, code1) == (0, 0), (err0, err1)
    assert out0.splitlines() == ["[rank=0] sum=3 rank=0/2 local=0"]
    assert out1.splitlines() == ["[rank=1] sum=3 rank=1/2 local=0"]


@pytest.mark.timeout(30)
def test_gloo_crash_on_node_1_names_its_global_rank(tmp_path: Path, workdir) -> None:
    workdir.script("crash.py", CRASH_AFTER_INIT)
    (code0, out0, _), (code1, out1, err1) = two_nodes(workdir, "--", "crash.py")
    assert code1 == 3, err1
    assert FIRST_FAILURE.format(rank=1, code=3) in err1.splitlines()
    assert out1.splitlines() == ["[rank=1] rank 1 crashing"]
    assert json.loads((tmp_path / "report-1.json").read_text()) == {
        "exit_code": 3,
        "failed_rank": 1,
        "reason": "rank 1 exited with code 3",
    }
    # Rank 0's collective fails with its peer gone: node 0 ends too, naming its own rank.
    assert code0 != 0 and "should not get here" not in out0
    assert json.loads((tmp_path / "report-0.json").read_text())["failed_rank"] == 0


# ---- DeepSpeed's launcher (make installs deepspeed; CPU runs use DS_ACCELERATOR=cpu) -----------------


def test_gloo_through_deepspeed_on_one_node(all_reduce, workdir) -> None:
    workdir.script("script.py", all_reduce)
    accel = {} if os.environ.get("DS_ACCELERATOR") else {"DS_ACCELERATOR": "cpu"}
    done = workdir.launch("deepspeed", "--", "script.py", STRATUS_SLOTS="2", **accel)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("[rank=")]
    assert sorted(lines) == ["[rank=0] sum=3 rank=0/2 local=0", "[rank=1] sum=3 rank=1/2 local=1"]


def test_gloo_through_deepspeed_on_two_simulated_nodes(all_reduce, workdir) -> None:
    """--no_ssh and a shared hostfile: "localhost" and "127.0.0.1" are two names of this machine."""
    workdir.script("script.py", all_reduce)
    from stratus.launchers._info import free_port

    common = {
        "STRATUS_SLOTS": "2",
        "STRATUS_NUM_NODES": "2",
        "STRATUS_CHIEF_ADDR": "127.0.0.1",
        # One machine, one address, as on the local stack's pool (the hostfile labels the nodes apart).
        "STRATUS_NODE_ADDRS": "127.0.0.1,127.0.0.1",
        "STRATUS_CHIEF_PORT": str(free_port()),
        "DS_ACCELERATOR": os.environ.get("DS_ACCELERATOR", "cpu"),
    }
    envs = [workdir.env(STRATUS_NODE_RANK=str(n), **common) for n in range(2)]
    # DeepSpeed imports for a long while on 2 busy cores (53 s seen): a wider guard than the others.
    nodes = workdir.run_nodes("deepspeed", ["--", "script.py"], envs, timeout=3 * workdir.wait_s)
    assert [code for code, _, _ in nodes] == [0, 0], [err for _, _, err in nodes]
    ranked = [[line for line in out.splitlines() if line.startswith("[rank=")] for _, out, _ in nodes]
    assert ranked == [["[rank=0] sum=3 rank=0/2 local=0"], ["[rank=1] sum=3 rank=1/2 local=0"]]
