"""The numpy alias layer as a replica gets it (issue 28): a real Python started with
``launchers/adaptdl_numpy`` first on its ``PYTHONPATH`` (what `stratus.launchers.adaptdl` gives every replica)
runs adaptdl 0.2.11's goodput model at AdaptDL's default (``accumulation=False``, which uses ``np.int``),
fits its performance model (which swaps goodput's numpy for autograd's and back), and its own ``numpy``
still has no ``np.int``; the same program without the folder fails as a replica did. A sitecustomize that
the folder hides still runs. Needs adaptdl (requirements-dev.txt); skipped without it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from stratus.launchers._adaptdl_numpy import BOOT_DIR, with_layer

from .conftest import WAIT_S, Workdir

#: AdaptDL's goodput model as `autoscale_batch_size` at its defaults and the launcher's proxy run it.
PROGRAM = """
import json, sys
import numpy
from adaptdl import goodput

perf = goodput.PerfParams(0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1.1)
fn = goodput.GoodputFunction(perf, goodput.GradParams(sqr=1.0, var=4.0), 32)
one = fn.optimize(1, 1, max_batch_size=1024, atomic_bsz_range=(32, 256), accumulation=False)
many = fn.optimize([1, 1], [1, 2], max_batch_size=1024, atomic_bsz_range=(32, 256), accumulation=False)
a = numpy.array  # as adaptdl.torch._metrics passes its profile
fitted = goodput.fit_perf_params(a([1, 1, 1]), a([1, 1, 1]), a([32, 64, 128]), a([0.1, 0.15, 0.25]), a([0.11, 0.16, 0.26]))
import sitecustomize
print(json.dumps({
    "one": [float(one[0]), int(one[1]), int(one[2])],
    "accum_steps": [int(s) for s in many[2]],
    "fitted": len(fitted),
    "goodput_np": type(goodput.np).__name__,
    "user_numpy_has_int": hasattr(numpy, "int"),
    "sitecustomize": sitecustomize.__file__,
}))
"""


def run(workdir: Workdir, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    workdir.script("program.py", PROGRAM)
    return subprocess.run(
        [sys.executable, "program.py"],
        cwd=workdir.path,
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )


def test_adaptdls_goodput_at_its_defaults_runs_in_a_replica_and_the_users_numpy_is_untouched(
    workdir: Workdir,
) -> None:
    done = run(workdir, with_layer(workdir.env()))
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["one"][1:] == [32, 0] and seen["accum_steps"] == [0, 0]  # no accumulation: the default
    assert seen["fitted"] == 7 and seen["goodput_np"] == "AliasedNumpy"  # restored after the fit
    assert seen["user_numpy_has_int"] is False
    assert done.stderr.count("adaptdl.goodput uses np.int, gone from numpy") == 1


def test_without_the_folder_the_same_program_fails_as_replicas_did(workdir: Workdir) -> None:
    done = run(workdir, workdir.env())
    assert done.returncode == 1
    assert "AttributeError: module 'numpy' has no attribute 'int'" in done.stderr


def test_the_sitecustomize_the_folder_hides_still_runs(workdir: Workdir, tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text(
        "import sys\nprint('their sitecustomize ran', file=sys.stderr)\n"
    )
    env = workdir.env()
    env = with_layer({**env, "PYTHONPATH": os.pathsep.join([str(theirs), env["PYTHONPATH"]])})
    assert env["PYTHONPATH"].split(os.pathsep)[:2] == [str(BOOT_DIR), str(theirs)]
    done = run(workdir, env)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("their sitecustomize ran") == 1
    assert json.loads(done.stdout.splitlines()[-1])["sitecustomize"] == str(theirs / "sitecustomize.py")
