"""Context packing throughput: `det._context.pack()` against GNU ``tar -cf - . | zstd -3``.

Builds (once, under ``bench/.work/``, which git ignores) a 20,000-file tree of about 90 MiB from a
fixed seed: source-like text files of a few KiB, and a hundred larger binary-ish files of random and
repetitive data. Then times, best of 3, on the same tree in the same run:

* ``pack()`` (walk, read, tar, zstd level 3 in memory, SHA-256),
* GNU ``tar -cf - . | zstd -3`` and the same with ``zstd -3 -T0`` (all cores),
* ``extract()`` of the packed archive (the compute side), for reference.

Needs GNU tar and the ``zstd`` command line tool for the comparison (``apt-get install -y zstd``);
without them, only our own figures are printed.

    .venv/bin/python bench/pack_throughput.py            # print the results
    .venv/bin/python bench/pack_throughput.py --write    # also write bench/results/pack_throughput.md
"""

from __future__ import annotations

import argparse
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

from det import _context  # noqa: E402
from harness._archive import extract  # noqa: E402

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
        "zstd workers used by pack()": str(_context._threads()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--write", action="store_true", help=f"write the results to {RESULTS.relative_to(HERE.parent)}"
    )
    parser.add_argument("--runs", type=int, default=3)
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
    rows.append(("`pack()` (tar + zstd -3, multi-threaded, + sha256)", t_pack, len(packed.data)))

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
