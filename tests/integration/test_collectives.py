"""The socket collectives of `DistributedContext(chief_ip=...)` (stratus.harness.core._collective) between real
processes and threads on loopback: Determined's framework-free distributed shape (a launcher that starts
its workers under `determined.launch.wrap_rank`, workers that allgather), and the errors that replace a
hang or a wrong answer."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from stratus import harness
from stratus.harness.compat import compat_path
from stratus.harness.core._collective import CollectiveError, SocketCollectives

LAUNCHER = """
import subprocess, sys

SIZE = int(sys.argv[1])
# Determined's flag --no-redirect-stdio is accepted (on even ranks here) and changes nothing.
procs = [
    subprocess.Popen(
        ["python3", "-m", "determined.launch.wrap_rank", *(["--no-redirect-stdio"] if rank % 2 == 0 else []),
         str(rank), "--", "python3", "worker.py", str(rank), str(SIZE)]
    )
    for rank in range(SIZE)
]
sys.exit(max(p.wait() for p in procs))
"""

WORKER = """
import sys
import determined as det

rank, size = int(sys.argv[1]), int(sys.argv[2])
dist = det.core.DistributedContext(
    rank=rank, size=size, local_rank=rank, local_size=size, cross_rank=0, cross_size=1
)
x = 0
for _ in range(10):
    x += sum(dist.allgather(rank + 1))
print(f"x={x} chief_says={dist.broadcast('hello' if rank == 0 else None)} gathered={dist.gather(rank)}")
print(f"stop={dist.any_rank(rank == size - 1)}")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def on_threads(size: int, body: Callable[[int], Any], wait_s: float) -> list[Any]:
    """``body(rank)`` on one thread per rank; each rank's result, or the exception it raised."""
    results: list[Any] = [None] * size

    def run(rank: int) -> None:
        try:
            results[rank] = body(rank)
        except Exception as e:
            results[rank] = e

    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(wait_s)
    assert not any(t.is_alive() for t in threads), "a rank is still blocked in a collective"
    return results


def test_a_launcher_of_wrapped_workers_allgathers_across_ranks(workdir: Any) -> None:
    workdir.script("launcher.py", LAUNCHER)
    workdir.script("worker.py", WORKER)
    env = workdir.env(STRATUS_COLLECTIVE_PORT=str(free_port()))
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(compat_path("determined"))])
    done = subprocess.run(
        [sys.executable, "launcher.py", "4"],
        cwd=workdir.path,
        env=env,
        capture_output=True,
        text=True,
        timeout=workdir.wait_s * 2,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for rank in range(4):
        gathered = "[0, 1, 2, 3]" if rank == 0 else "None"
        assert f"[rank={rank}] x=100 chief_says=hello gathered={gathered}" in lines  # 10 x (1+2+3+4)
        assert f"[rank={rank}] stop=True" in lines


def test_ranks_on_two_nodes_reach_the_chief_by_its_address(wait_s: float) -> None:
    port = free_port()

    def body(rank: int) -> list[Any]:
        dist = harness.core.DistributedContext(
            rank=rank, size=4, local_rank=rank % 2, local_size=2, chief_ip="127.0.0.1", port=port
        )
        try:
            return dist.allgather(f"r{rank}")
        finally:
            dist.close()

    assert on_threads(4, body, wait_s) == [["r0", "r1", "r2", "r3"]] * 4


def test_a_rank_calling_another_collective_is_named(wait_s: float) -> None:
    port = free_port()

    def body(rank: int) -> Any:
        link = SocketCollectives(rank=rank, size=2, chief_ip="127.0.0.1", port=port, connect_timeout_s=wait_s)
        try:
            return link.allgather(rank) if rank == 0 else link.gather(rank)
        finally:
            link.close()

    chief, worker = on_threads(2, body, wait_s)
    assert isinstance(chief, CollectiveError)
    assert "rank 1 called gather() where this rank called allgather()" in str(chief)
    assert worker is None  # gather's worker side sends and returns at once


def test_a_peer_that_goes_away_ends_the_collective_with_an_error(wait_s: float) -> None:
    port = free_port()

    def body(rank: int) -> Any:
        link = SocketCollectives(rank=rank, size=3, chief_ip="127.0.0.1", port=port, connect_timeout_s=wait_s)
        if rank == 2:
            link._connect()  # joins, then its process "dies" before the collective
            link.close()
            return "gone"
        try:
            return link.allgather(rank)
        finally:
            link.close()

    chief, worker, gone = on_threads(3, body, wait_s)
    assert gone == "gone"
    assert isinstance(chief, CollectiveError) and "rank 2 went away" in str(chief)
    assert isinstance(worker, CollectiveError) and "the chief went away" in str(worker)


def test_a_worker_without_its_chief_gives_up_with_the_address(wait_s: float) -> None:
    port = free_port()
    link = SocketCollectives(rank=1, size=2, chief_ip="127.0.0.1", port=port, connect_timeout_s=0.3)
    with pytest.raises(CollectiveError, match=rf"rank 1 could not reach the chief at 127\.0\.0\.1:{port}"):
        link.allgather(1)


def test_the_chiefs_port_taken_is_named(wait_s: float) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        chief = SocketCollectives(rank=0, size=2, chief_ip="127.0.0.1", port=port)
        with pytest.raises(CollectiveError, match=rf"cannot listen on 127\.0\.0\.1:{port}.*pub_port="):
            chief.broadcast("x")
