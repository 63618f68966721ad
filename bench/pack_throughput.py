"""Context packing throughput: `det._context.pack()` against GNU ``tar -cf - . | zstd -3`` and
Determined's own packer (time, peak memory, bytes sent), and the resubmit of an unchanged tree.

Builds (once, under ``bench/.work/``, which git ignores) a 20,000-file tree of about 90 MiB from a
fixed seed: source-like text files of a few KiB, and a hundred larger binary-ish files of random and
repetitive data. Then times, best of 3, on the same tree in the same run:

* ``pack()`` (walk, read, tar, zstd level 3 to a temporary file, SHA-256 on the way),
* ``pack()`` again with the manifest cache (the resubmit of an unchanged tree: walk and stat only),
* GNU ``tar -cf - . | zstd -3`` and the same with ``zstd -3 -T0`` (all cores),
* ``extract()`` of the packed archive (the compute side), for reference.

Needs GNU tar and the ``zstd`` command line tool for the comparison (``apt-get install -y zstd``);
without them, only our own figures are printed.

    .venv/bin/python bench/pack_throughput.py            # print the results
    .venv/bin/python bench/pack_throughput.py --write    # also write bench/results/pack_throughput.md
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import zstandard  # noqa: E402

from det import _archive, _context  # noqa: E402
from stratus.harness._archive import extract  # noqa: E402

SEED = 20240611
NUM_FILES = 20_000
NUM_BINARY = 100
TREE = HERE / ".work" / "pack_tree"
MARKER = HERE / ".work" / "pack_tree.version"
RESULTS = HERE / "results" / "pack_throughput.md"
TREE_VERSION = f"v1 seed={SEED} files={NUM_FILES} binary={NUM_BINARY}"

WORDS = [
    "def",
    "class",
    "return",
    "self",
    "import",
    "from",
    "for",
    "in",
    "if",
    "else",
    "elif",
    "while",
    "with",
    "as",
    "try",
    "except",
    "raise",
    "lambda",
    "yield",
    "None",
    "True",
    "False",
    "tensor",
    "model",
    "layer",
    "batch",
    "loss",
    "optim",
    "step",
    "epoch",
    "config",
    "hparams",
    "metric",
    "value",
    "shape",
    "torch",
    "nn",
    "forward",
    "backward",
    "grad",
    "weight",
    "bias",
    "dropout",
    "relu",
]


def _text_file(rng: random.Random, target: int) -> bytes:
    lines: list[str] = []
    size = 0
    indent = 0
    while size < target:
        words = rng.choices(WORDS, k=rng.randint(2, 9))
        line = "    " * indent + " ".join(words)
        if rng.random() < 0.3:
            line += f"({rng.randint(0, 9999)}, {rng.random():.4f})"
        if rng.random() < 0.2:
            line += ":"
            indent = min(indent + 1, 4)
        elif rng.random() < 0.2:
            indent = max(indent - 1, 0)
        lines.append(line)
        size += len(line) + 1
    return ("\n".join(lines) + "\n").encode()


def _binary_file(rng: random.Random, target: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    while size < target:
        if rng.random() < 0.5:
            chunk = rng.randbytes(rng.randint(1024, 32768))
        else:
            chunk = rng.randbytes(rng.randint(4, 64)) * rng.randint(64, 1024)
        parts.append(chunk)
        size += len(chunk)
    return b"".join(parts)[:target]


def build_tree(root: Path) -> None:
    if MARKER.exists() and MARKER.read_text() == TREE_VERSION and root.is_dir():
        return
    if root.exists():
        shutil.rmtree(root)
    rng = random.Random(SEED)
    binary_at = set(rng.sample(range(NUM_FILES), NUM_BINARY))
    for i in range(NUM_FILES):
        folder = root / f"pkg{i // 2000:02d}" / f"mod{(i // 50) % 40:02d}"
        if i % 50 == 0:
            folder.mkdir(parents=True, exist_ok=True)
        if i in binary_at:
            data = _binary_file(rng, rng.randint(200_000, 800_000))
            (folder / f"blob_{i:05d}.bin").write_bytes(data)
        else:
            target = int(min(16_000, max(120, rng.lognormvariate(7.3, 0.8))))
            (folder / f"file_{i:05d}.py").write_bytes(_text_file(rng, target))
    MARKER.write_text(TREE_VERSION)


def best_of(n: int, fn: Callable[[], object]) -> tuple[float, object]:
    best = float("inf")
    result: object = None
    for _ in range(n):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def gnu_tar_zstd(root: Path, zstd_args: str) -> int:
    """Run ``tar -cf - . | zstd ...`` and return the archive size."""
    out = subprocess.run(
        ["bash", "-c", f"set -o pipefail; tar -cf - . | zstd {zstd_args} -q -c | wc -c"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip())


def _cmd(args: list[str]) -> str:
    try:
        return subprocess.run(args, capture_output=True, text=True, check=True).stdout.splitlines()[0].strip()
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "missing"


def machine() -> dict[str, str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "arch (uname -m)": platform.machine(),
        "CPU": cpu,
        "nproc": _cmd(["nproc"]),
        "Python": platform.python_version(),
        "zstandard / libzstd": f"{zstandard.__version__} / {'.'.join(map(str, zstandard.ZSTD_VERSION))}",
        "zstd CLI": _cmd(["zstd", "--version"]).strip("* "),
        "tar": _cmd(["tar", "--version"]),
        "zstd workers used by pack()": str(_archive._threads()),
    }


DETERMINED_LABEL = "Determined 0.38 `read_v1_context` + request body"

# The peak resident set of this process image: VmHWM, not ru_maxrss, which Linux carries over an exec
# from the process that forked it (the benchmark itself, hundreds of MiB by then).
_PEAK = """
def peak_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
"""

_OURS = (
    _PEAK
    + """
import json, sys, time
sys.path.insert(0, {root!r})
from det import _context
start = time.perf_counter()
packed = _context.pack({tree!r})
sent = sum(len(piece) for piece in packed.pieces())
took = time.perf_counter() - start
packed.discard()
print(json.dumps({{"s": took, "bytes": sent, "peak_kib": peak_kib()}}))
"""
)

_IMPORT_ONLY = (
    _PEAK
    + """
import json, sys
sys.path.insert(0, {root!r})
from det import _context
print(json.dumps({{"s": 0.0, "bytes": 0, "peak_kib": peak_kib()}}))
"""
)

_DETERMINED = (
    _PEAK
    + """
import json, pathlib, time
from determined.common import context
from determined.common.api import bindings
start = time.perf_counter()
files = context.read_v1_context(pathlib.Path({tree!r}))
req = bindings.v1CreateExperimentRequest(config="name: bench", modelDefinition=files, activate=True)
body = json.dumps(req.to_json()).encode()
took = time.perf_counter() - start
print(json.dumps({{"s": took, "bytes": len(body), "peak_kib": peak_kib()}}))
"""
)

_TAR_ZSTD = """
import json, resource, subprocess, time
start = time.perf_counter()
out = subprocess.run(["bash", "-c", "set -o pipefail; tar -cf - . | zstd -3 -q -c | wc -c"],
                     cwd={tree!r}, capture_output=True, text=True, check=True)
took = time.perf_counter() - start
print(json.dumps({{"s": took, "bytes": int(out.stdout), "peak_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}}))
"""


def _child(python: str, code: str) -> dict[str, float]:
    done = subprocess.run(
        [python, "-c", code.format(root=str(HERE.parent), tree=str(TREE))],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def memory_rows(determined_python: str) -> list[tuple[str, dict[str, float]]]:
    """Each packer in a fresh process: best time of two, and the peak memory of that run."""

    def best(python: str, code: str) -> dict[str, float]:
        return min((_child(python, code) for _ in range(2)), key=lambda row: row["s"])

    rows = [
        ("Stratus `pack()` + reading it back for the upload", best(sys.executable, _OURS)),
        (
            "(the same interpreter with `det._context` imported, nothing packed)",
            _child(sys.executable, _IMPORT_ONLY),
        ),
    ]
    if shutil.which("tar") and shutil.which("zstd"):
        rows.append(("GNU `tar -cf - . | zstd -3`", best(sys.executable, _TAR_ZSTD)))
    if Path(determined_python).exists():
        rows.append((DETERMINED_LABEL, best(determined_python, _DETERMINED)))
    else:
        print(f"no {determined_python}: Determined's packer is left out", file=sys.stderr)
    for label, row in rows:
        print(
            f"{label}: {row['s']:.2f} s, peak {row['peak_kib'] / 1024:.0f} MiB, {row['bytes'] / 2**20:.1f} MiB",
            file=sys.stderr,
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--write", action="store_true", help=f"write the results to {RESULTS.relative_to(HERE.parent)}"
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--determined-python",
        default=str(HERE / ".work" / "determined-venv" / "bin" / "python"),
        help="a Python with `determined` installed (python3 -m venv bench/.work/determined-venv && "
        "bench/.work/determined-venv/bin/pip install determined); its row is left out when missing",
    )
    args = parser.parse_args()

    t0 = time.perf_counter()
    build_tree(TREE)
    print(f"tree ready in {time.perf_counter() - t0:.1f} s: {TREE}", file=sys.stderr)
    files = _context.collect(TREE)
    num_files = len(files)
    file_bytes = sum(f.size for f in files)

    rows: list[tuple[str, float, int | None]] = []
    # warm the page cache so every contender reads from memory
    best_of(1, lambda: _context.pack(TREE))

    t_collect, _ = best_of(args.runs, lambda: _context.collect(TREE))
    rows.append(("`collect()` only (walk + stat)", t_collect, None))
    t_pack, packed = best_of(args.runs, lambda: _context.pack(TREE))
    assert isinstance(packed, _context.PackedContext)
    rows.append(
        ("`pack()` (tar + zstd -3, multi-threaded, + sha256, to a temporary file)", t_pack, packed.size)
    )
    cache = _context.ManifestCache(HERE / ".work" / "manifest_cache")
    shutil.rmtree(cache.folder, ignore_errors=True)
    _context.pack(TREE, (), cache).discard()  # packed once: the manifest is cached
    t_resubmit, again = best_of(args.runs, lambda: _context.pack(TREE, (), cache))
    assert isinstance(again, _context.PackedContext) and again.reused and again.sha256 == packed.sha256
    rows.append(
        ("resubmit of the unchanged tree (`pack()` with the manifest cache: walk + stat)", t_resubmit, None)
    )

    have_gnu = shutil.which("tar") is not None and shutil.which("zstd") is not None
    if have_gnu:
        for label, zargs in (
            ("GNU `tar -cf - . \\| zstd -3`", "-3"),
            ("GNU `tar -cf - . \\| zstd -3 -T0`", "-3 -T0"),
        ):
            t, size = best_of(args.runs, lambda zargs=zargs: gnu_tar_zstd(TREE, zargs))
            assert isinstance(size, int)
            rows.append((label, t, size))
    else:
        print(
            "GNU tar or the zstd CLI is missing: skipping the comparison (apt-get install -y zstd)",
            file=sys.stderr,
        )

    dest = HERE / ".work" / "extract_dest"

    def do_extract() -> None:
        if dest.exists():
            shutil.rmtree(dest)
        extract(packed.data, dest)

    t_extract, _ = best_of(args.runs, do_extract)
    t_gnu_extract: float | None = None
    if have_gnu:
        archive = HERE / ".work" / "pack_tree.tar.zst"
        archive.write_bytes(packed.data)

        def gnu_extract() -> None:
            if dest.exists():
                shutil.rmtree(dest)
            dest.mkdir()
            subprocess.run(["tar", "--zstd", "-xf", str(archive), "-C", str(dest)], check=True)

        t_gnu_extract, _ = best_of(args.runs, gnu_extract)
        archive.unlink()
    shutil.rmtree(dest, ignore_errors=True)

    assert (packed.num_files, packed.file_bytes) == (num_files, file_bytes)
    lines = [
        "# Context packing throughput",
        "",
        f"Tree: {num_files:,} files, {file_bytes / 2**20:.1f} MiB of file contents "
        f"({NUM_FILES - NUM_BINARY:,} source-like text files, {NUM_BINARY} binary-ish files of random and "
        f"repetitive data; seed {SEED}), page cache warm. Best of {args.runs} runs, wall clock. "
        "MB/s counts file contents (10^6 bytes) per second.",
        "",
        "| what | time | files/s | MB/s | archive |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, t, size in rows:
        archive = f"{size / 2**20:.1f} MiB" if size is not None else "–"
        lines.append(
            f"| {label} | {t:.2f} s | {num_files / t:,.0f} | {file_bytes / t / 1e6:,.0f} | {archive} |"
        )
    lines.append(
        f"| `extract()` of the packed archive (checks + tarfile data filter) | {t_extract:.2f} s | "
        f"{num_files / t_extract:,.0f} | {file_bytes / t_extract / 1e6:,.0f} | – |"
    )
    if t_gnu_extract is not None:
        lines.append(
            f"| GNU `tar --zstd -xf` of the same archive, for reference | {t_gnu_extract:.2f} s | "
            f"{num_files / t_gnu_extract:,.0f} | {file_bytes / t_gnu_extract / 1e6:,.0f} | – |"
        )
    lines += [
        "",
        "Extraction times are dominated by creating 20,000 files on this machine's disk (mostly system "
        "time, for GNU tar too) and vary from run to run; packing reads from the page cache.",
    ]
    if have_gnu:
        gnu = next(t for label, t, _ in rows if label.endswith("zstd -3`"))
        lines += ["", f"`pack()` / `tar | zstd -3` time ratio: {t_pack / gnu:.2f}."]
    memory = memory_rows(args.determined_python)
    lines += [
        "",
        "## Peak memory and bytes sent",
        "",
        "Each packer in a fresh process on the same tree (page cache warm), its peak resident set "
        "(`VmHWM`) at the end; `pack()` then reads the archive back the way the upload sends it "
        "(1 MiB pieces). Determined's row is what `det experiment create` does before its request: "
        "`context.read_v1_context` (every file base64-encoded into a `v1File`) and the JSON body of "
        "`v1CreateExperimentRequest`, from `determined` installed in its own venv "
        "(`--determined-python`, never a dependency of this project). For `tar | zstd`, the larger of "
        "the two processes.",
        "",
        "| packer | time | peak memory | bytes sent |",
        "|---|---:|---:|---:|",
    ]
    for label, row in memory:
        lines.append(
            f"| {label} | {row['s']:.2f} s | {row['peak_kib'] / 1024:.0f} MiB | {row['bytes'] / 2**20:.1f} MiB |"
        )
    ours = dict(memory).get("Stratus `pack()` + reading it back for the upload")
    theirs = dict(memory).get(DETERMINED_LABEL)
    if ours and theirs:
        lines += [
            "",
            f"Peak memory, `pack()` / Determined: {ours['peak_kib'] / theirs['peak_kib']:.2f} (goal: at most "
            f"0.2); bytes sent: {ours['bytes'] / theirs['bytes']:.2f}; time: {ours['s'] / theirs['s']:.2f}.",
        ]
    lines += ["", "Machine:", ""]
    lines += [f"- {k}: {v}" for k, v in machine().items()]
    lines += ["", f"Run: `.venv/bin/python bench/pack_throughput.py --write` ({time.strftime('%Y-%m-%d')})."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(text)
        print(f"wrote {RESULTS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
