"""Follow `det deploy aws up --dry-run --pools-file FILE` through the code: which of the project's files it
runs code in, and how often control comes back into a file it had left (a measure of how much a reader
must jump around to follow one command).

    .venv/bin/python bench/deploy_trace.py [--repo DIR] [--write]

`--repo DIR` traces another checkout (e.g. a `git worktree` of an older commit) with this script: its
`det` is imported from DIR. The run is real: a moto server plays the account (STS, S3, EC2, SSM, Service
Quotas), the pools file has an ec2, a batch and a sagemaker pool, and the Lambda package is a stand-in
(`--package`), as in tests/aws/test_deploy_aws.py. From the command's function on (`up`: parsing the command line is every
command's), a profiler records every function call into a file of the product packages, leaving out what
runs while a module is imported (contract, chalicelib, harness, launchers, det, infra, app.py); every call from one
file into another gives the figures:

- files: the distinct files code ran in;
- hops: the distinct calls from one file into another (caller's file, callee's file): the jumps a reader
  follows, each counted once however often the code makes it;
- returns: the hops that call back into a file first entered before the caller's (the reader goes back up
  to a file already left, as `compute_batch` calling `template_app.group_name` did);
- calls across files: every such call, repeats included (loops make it large; shown, not compared).
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import socket
import sys
import tempfile
import zipfile
from pathlib import Path
from types import FrameType
from typing import Any

PRODUCT = ("contract", "chalicelib", "harness", "launchers", "det", "infra", "app.py")
POOLS = """
resource_pools:
  - pool_name: default
    provider: {type: ec2, instance_type: g5.xlarge, max_instances: 2, spot: true}
  - pool_name: cpu
    scheduler: {type: fair_share}
    provider: {type: batch, instance_type: c6i.large, image: python:3.11}
  - pool_name: jobs
    provider: {type: sagemaker, instance_type: ml.g5.xlarge, image: my/image}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def trace(repo: Path) -> dict[str, Any]:
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    os.environ.update(
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
    )
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    import boto3

    ami = boto3.client("ec2").describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    sys.path.insert(0, str(repo))
    roots = tuple(str(repo / name) for name in PRODUCT)
    entered: list[str] = []

    state = {"started": False, "importing": 0}
    calls: list[tuple[str, str]] = []  # (caller's file, callee's file), in order

    def profile(frame: FrameType, event: str, arg: object) -> None:
        code = frame.f_code
        if code.co_name == "<module>":  # a module body runs on import: loading, not the command's path
            state["importing"] += 1 if event == "call" else -1 if event == "return" else 0
            return
        if event != "call" or state["importing"]:
            return
        name = code.co_filename
        if not state["started"]:
            # From the command's own function on: parsing the command line is every command's.
            state["started"] = code.co_name == "up" and name.endswith(("deploy/aws.py", "_deploy_aws.py"))
            if state["started"]:
                entered.append(os.path.relpath(name, repo))
            return
        caller = frame.f_back.f_code.co_filename if frame.f_back is not None else ""
        if name.startswith(roots) and caller.startswith(roots) and caller != name:
            calls.append((os.path.relpath(caller, repo), os.path.relpath(name, repo)))

    from det.cli import main

    with tempfile.TemporaryDirectory() as folder:
        pools, package = Path(folder) / "pools.yaml", Path(folder) / "stratus.zip"
        pools.write_text(POOLS)
        with zipfile.ZipFile(package, "w") as archive:
            archive.writestr("app.py", "app = None\n")
        argv = ["deploy", "aws", "up", "--cluster-id", "trace", "--dry-run", "--region", "us-east-1"]
        argv += ["--pools-file", str(pools), "--package", str(package), "--agent-ami", ami]
        argv += ["--template-out", str(Path(folder) / "template.json")]
        out, err = io.StringIO(), io.StringIO()
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = out, err
        sys.setprofile(profile)
        try:
            code = main(argv)
        finally:
            sys.setprofile(None)
            sys.stdout, sys.stderr = saved
    server.stop()
    if code != 0:
        raise SystemExit(f"det deploy aws up --dry-run exited {code}:\n{out.getvalue()}\n{err.getvalue()}")
    order: dict[str, int] = {entered[0]: 0} if entered else {}
    for caller, callee in calls:
        order.setdefault(caller, len(order))
        order.setdefault(callee, len(order))
    edges = set(calls)
    back = {(a, b) for a, b in edges if order[b] < order[a]}  # a call up into a file entered earlier
    into: dict[str, int] = {}
    for _, callee in calls:
        into[callee] = into.get(callee, 0) + 1
    return {
        "files": sorted(order),
        "calls": len(calls),
        "hops": len(edges),
        "returns": len(back),
        "back": back,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--list", action="store_true", help="print the files too")
    args = parser.parse_args()
    found = trace(args.repo.resolve())
    by_package: dict[str, int] = {}
    for name in found["files"]:
        top = name.split(os.sep)[0]
        by_package[top] = by_package.get(top, 0) + 1
    print(f"repo: {args.repo}")
    print(
        f"files: {len(found['files'])}  hops: {found['hops']}  returns: {found['returns']}  "
        f"(calls across files: {found['calls']})"
    )
    print("files by package: " + ", ".join(f"{k} {v}" for k, v in sorted(by_package.items())))
    if args.list:
        print("\n".join(found["files"]))
        print("returns:")
        print("\n".join(f"  {a} -> {b}" for a, b in sorted(found["back"])))


if __name__ == "__main__":
    main()
