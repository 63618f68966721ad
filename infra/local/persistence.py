"""The embedded stack's state on disk, so that `det deploy local down`/`up` and a kill -9 of the stack lose
nothing: its DynamoDB tables, its CloudWatch log events and its S3 objects (contexts, checkpoints).

moto keeps everything in memory. The stack serves moto through `JournalingApp`, a WSGI layer in front
of it that writes every change through to the state folder before it answers:

    <state>/db/journal.<n>.jsonl   each successful DynamoDB or CloudWatch Logs write, one JSON line
                                   (the request as sent), appended and flushed before the answer
    <state>/db/snapshot.json       every table's items and every log stream's events, and the first
                                   journal not folded into it
    <state>/s3/<bucket>/<key>.obj  each object as stored, rewritten after each successful write

A write through the Step Functions integrations reaches moto over HTTP too (moto's executor calls its
own server at MOTO_PORT), so it is journaled like the control plane's own.

On start (`restore`) the fresh resources are refilled: the snapshot's items and events, then the
journals after it replayed in order, then the objects; a snapshot of the result replaces them all
(`compact`, also run at a clean stop). Writes to one table are journaled in the order moto applied them
(`JournalingApp` applies and journals each under one lock), so a replay reaches the same items even for
conditional writes and counters. A kill -9 loses no answered write; what it loses is what lives only in
moto's memory and is not state: queued SQS messages and running Step Functions executions. The
control plane's recovery (`chalicelib.services.recovery`) rebuilds those from the records.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import logging
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote

from botocore import xform_name

from stratus.contract.local_state import DATABASE_DIR, OBJECTS_DIR

log = logging.getLogger("stratus.local.state")

#: The DynamoDB and CloudWatch Logs operations that change state (X-Amz-Target's operation).
JOURNALED = {
    "DynamoDB_20120810": {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"},
    "Logs_20140328": {"CreateLogStream", "PutLogEvents", "DeleteLogStream", "PutRetentionPolicy"},
}
OBJECT_SUFFIX = ".obj"
SNAPSHOT = "snapshot.json"
#: Journaled writes after which the journal is folded into a new snapshot while the stack runs.
COMPACT_AFTER = 10_000

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class StateFolder:
    """The files of one stack's state (`<state-dir>/db`, `<state-dir>/s3`)."""

    def __init__(self, root: Path, *, compact_after: int = COMPACT_AFTER) -> None:
        self.compact_after = compact_after
        self.db = root / DATABASE_DIR
        self.s3 = root / OBJECTS_DIR
        self._journal: io.TextIOWrapper | None = None
        self.journal_number = 0
        #: Off while the state is being loaded back (what is loaded is on disk already).
        self.recording = False
        #: Held by every journaled write; `compact` holds it to cut a consistent snapshot.
        self.write_lock = threading.Lock()
        #: Set once the journal holds `COMPACT_AFTER` writes: the stack then folds it into a snapshot, so
        #: that a long-lived stack's next start replays a bounded journal.
        self.compaction_due = threading.Event()
        self._journaled = 0

    def exists(self) -> bool:
        return (self.db / SNAPSHOT).exists() or any(self.db.glob("journal.*.jsonl")) or self.s3.exists()

    def delete(self) -> None:
        """`det deploy local down --delete-db`: forget everything."""
        shutil.rmtree(self.db, ignore_errors=True)
        shutil.rmtree(self.s3, ignore_errors=True)

    # ---- the journal ------------------------------------------------------------------------------

    def open_journal(self, number: int) -> None:
        self.db.mkdir(parents=True, exist_ok=True)
        self.journal_number = number
        self._journaled = 0
        self.compaction_due.clear()
        self._journal = (self.db / f"journal.{number}.jsonl").open("a", encoding="utf-8")

    def append(self, target: str, body: str) -> None:
        """One write, on disk (in the OS's hands: it survives the process) before the caller answers."""
        if self._journal is None:
            return
        self._journal.write(json.dumps({"target": target, "body": body}) + "\n")
        self._journal.flush()
        self._journaled += 1
        if self._journaled >= self.compact_after:
            self.compaction_due.set()

    def journals(self, first: int) -> list[tuple[int, Path]]:
        numbered = []
        for path in self.db.glob("journal.*.jsonl"):
            try:
                numbered.append((int(path.name.split(".")[1]), path))
            except ValueError:
                continue
        return sorted(item for item in numbered if item[0] >= first)

    def close(self) -> None:
        self.recording = False
        if self._journal is not None:
            self._journal.close()
            self._journal = None

    # ---- objects ----------------------------------------------------------------------------------

    def object_path(self, bucket: str, key: str) -> Path:
        # The suffix keeps an object `a` and the objects under `a/` apart (a file and a folder).
        return self.s3 / quote(bucket, safe="") / (quote(key, safe="/") + OBJECT_SUFFIX)

    def store_object(self, bucket: str, key: str, data: bytes | None) -> None:
        path = self.object_path(bucket, key)
        if data is None:
            path.unlink(missing_ok=True)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)

    def stored_objects(self) -> Iterator[tuple[str, str, Path]]:
        if not self.s3.exists():
            return
        for bucket_dir in sorted(p for p in self.s3.iterdir() if p.is_dir()):
            for path in sorted(bucket_dir.rglob("*" + OBJECT_SUFFIX)):
                key = path.relative_to(bucket_dir).as_posix()[: -len(OBJECT_SUFFIX)]
                yield unquote(bucket_dir.name), unquote(key), path


class JournalingApp:
    """WSGI middleware in front of moto's app: writes every successful state change through to `state`.

    DynamoDB and CloudWatch Logs writes are applied and journaled under one lock (so the journal's order
    is the order moto applied them); an S3 write is followed by a copy of the object it changed (or, for
    a multi-object delete, of the bucket's listing) into the state folder, before the answer."""

    def __init__(self, app: WsgiApp, state: StateFolder, s3: Callable[[], Any]) -> None:
        self._app = app
        self._state = state
        self._s3 = s3  # a boto3 S3 client of this moto server, made when first needed

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if not self._state.recording:
            return self._app(environ, start_response)
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        service, _, operation = target.partition(".")
        if operation in JOURNALED.get(service, ()):
            return self._journaled(environ, start_response, target)
        if _is_s3_write(environ):
            return self._mirrored(environ, start_response)
        return self._app(environ, start_response)

    def _journaled(
        self, environ: dict[str, Any], start_response: StartResponse, target: str
    ) -> Iterable[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        status: list[int] = []
        with self._state.write_lock:
            result = list(self._app(environ, _recording(start_response, status)))
            if status and 200 <= status[0] < 300:
                self._state.append(target, body.decode("utf-8"))
        return result

    def _mirrored(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        status: list[int] = []
        result = list(self._app(environ, _recording(start_response, status)))
        if status and 200 <= status[0] < 300:
            bucket, key = _bucket_and_key(environ.get("PATH_INFO", ""))
            query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
            if bucket and "partNumber" not in query and not ("uploads" in query and not key):
                try:
                    self._mirror(environ["REQUEST_METHOD"], bucket, key, query)
                except Exception:  # the write happened; a failed copy must not turn it into an error
                    log.exception("could not copy s3://%s/%s to the state folder", bucket, key)
        return result

    def _mirror(self, method: str, bucket: str, key: str, query: dict[str, list[str]]) -> None:
        if not key or "delete" in query:  # a bucket operation or a multi-object delete: the whole bucket
            self._mirror_bucket(bucket)
        elif method == "DELETE":
            self._state.store_object(bucket, key, None)
        elif "uploads" not in query:  # a PUT, a copy, a completed multipart upload
            self._state.store_object(
                bucket, key, self._s3().get_object(Bucket=bucket, Key=key)["Body"].read()
            )

    def _mirror_bucket(self, bucket: str) -> None:
        client = self._s3()
        present: set[str] = set()
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            present.update(item["Key"] for item in page.get("Contents", []))
        for stored_bucket, key, path in list(self._state.stored_objects()):
            if stored_bucket == bucket and key not in present:
                path.unlink(missing_ok=True)


def _recording(start_response: StartResponse, status: list[int]) -> StartResponse:
    def record(status_line: str, headers: Any, exc_info: Any = None) -> Any:
        status.append(int(status_line.split(" ", 1)[0]))
        return (
            start_response(status_line, headers, exc_info)
            if exc_info
            else start_response(status_line, headers)
        )

    return record


def _is_s3_write(environ: dict[str, Any]) -> bool:
    if environ.get("REQUEST_METHOD") not in ("PUT", "POST", "DELETE"):
        return False
    authorization = environ.get("HTTP_AUTHORIZATION", "")
    query = unquote(environ.get("QUERY_STRING", ""))
    # SigV4 names the service in its credential scope; SigV2 (header or presigned) is S3's alone.
    return (
        "/s3/aws4_request" in authorization
        or "/s3/aws4_request" in query
        or authorization.startswith("AWS ")
        or "AWSAccessKeyId=" in query
    )


def _bucket_and_key(path: str) -> tuple[str, str]:
    # WSGI gives the decoded path as latin-1 text; S3 keys are UTF-8.
    bucket, _, key = path.encode("latin-1").decode("utf-8", "replace").lstrip("/").partition("/")
    return bucket, key


class StateClients:
    """The boto3 clients of the moto server that `restore` and `compact` read and write through."""

    def __init__(
        self, session: Any, endpoint_url: str, region: str, table_prefix: str, log_group: str
    ) -> None:
        kwargs = {"endpoint_url": endpoint_url, "region_name": region}
        self.dynamodb = session.client("dynamodb", **kwargs)
        self.logs = session.client("logs", **kwargs)
        self.s3 = session.client("s3", **kwargs)
        self.table_prefix = table_prefix
        self.log_group = log_group

    def tables(self) -> list[str]:
        names: list[str] = []
        for page in self.dynamodb.get_paginator("list_tables").paginate():
            names += [n for n in page["TableNames"] if n.startswith(self.table_prefix)]
        return names


def restore(state: StateFolder, clients: StateClients) -> dict[str, int]:
    """Load the state folder into the stack's fresh resources; returns what was loaded, by kind."""
    counts = {"items": 0, "log_events": 0, "journaled_writes": 0, "objects": 0, "failed_writes": 0}
    state.recording = False
    snapshot = _read_snapshot(state)
    tables = set(clients.tables())
    for table, items in snapshot.get("tables", {}).items():
        if table not in tables:
            log.warning("the state folder has items of table %s, which this stack has not: skipped", table)
            continue
        for start in range(0, len(items), 25):
            batch = [
                {"PutRequest": {"Item": _binary(item, decode=True)}} for item in items[start : start + 25]
            ]
            _write_batch(clients.dynamodb, table, batch)
        counts["items"] += len(items)
    for stream, events in snapshot.get("logs", {}).items():
        _put_events(clients.logs, clients.log_group, stream, events, create=True)
        counts["log_events"] += len(events)
    for _, path in state.journals(int(snapshot.get("next_journal", 0))):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                log.warning("%s: a torn last line (the stack was killed while writing it): skipped", path)
                continue
            if _replay(clients, entry["target"], entry["body"]):
                counts["journaled_writes"] += 1
            else:
                counts["failed_writes"] += 1
    for bucket, key, path in state.stored_objects():
        clients.s3.put_object(Bucket=bucket, Key=key, Body=path.read_bytes(), ChecksumAlgorithm="SHA256")
        counts["objects"] += 1
    return counts


def compact(state: StateFolder, clients: StateClients) -> None:
    """Fold the journals into a new snapshot and start a new journal. Journaled writes wait meanwhile,
    so every write is in the snapshot or in the new journal, never in both or neither."""
    with state.write_lock:
        first = max([number for number, _ in state.journals(0)], default=state.journal_number) + 1
        snapshot = {
            "next_journal": first,
            "tables": {table: _scan(clients.dynamodb, table) for table in clients.tables()},
            "logs": _log_events(clients.logs, clients.log_group),
        }
        state.db.mkdir(parents=True, exist_ok=True)
        tmp = state.db / (SNAPSHOT + ".tmp")
        tmp.write_text(json.dumps(snapshot), encoding="utf-8")
        tmp.replace(state.db / SNAPSHOT)
        state.close()
        for number, path in state.journals(0):
            if number < first:
                path.unlink(missing_ok=True)
        state.open_journal(first)
        state.recording = True


def _read_snapshot(state: StateFolder) -> dict[str, Any]:
    path = state.db / SNAPSHOT
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def _write_batch(dynamodb: Any, table: str, batch: list[dict[str, Any]]) -> None:
    pending: dict[str, Any] = {table: batch}
    while pending:
        pending = dynamodb.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}


def _scan(dynamodb: Any, table: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for page in dynamodb.get_paginator("scan").paginate(TableName=table):
        items += [_binary(item, decode=False) for item in page["Items"]]
    return items


def _binary(item: dict[str, Any], *, decode: bool) -> dict[str, Any]:
    """An item with its binary values as base64 text (for JSON), or back to bytes (`decode`)."""
    return {name: _binary_value(value, decode) for name, value in item.items()}


def _binary_value(value: dict[str, Any], decode: bool) -> dict[str, Any]:
    convert: Callable[[Any], Any] = base64.b64decode if decode else (lambda b: base64.b64encode(b).decode())
    if "B" in value:
        return {"B": convert(value["B"])}
    if "BS" in value:
        return {"BS": [convert(b) for b in value["BS"]]}
    if "M" in value:
        return {"M": _binary(value["M"], decode=decode)}
    if "L" in value:
        return {"L": [_binary_value(v, decode) for v in value["L"]]}
    return value


def _log_events(logs: Any, group: str) -> dict[str, list[dict[str, Any]]]:
    streams: dict[str, list[dict[str, Any]]] = {}
    for page in logs.get_paginator("describe_log_streams").paginate(logGroupName=group):
        for stream in page["logStreams"]:
            name = stream["logStreamName"]
            events: list[dict[str, Any]] = []
            token = None
            while True:
                kwargs: dict[str, str] = {"nextToken": token} if token else {}
                answer = logs.get_log_events(
                    logGroupName=group, logStreamName=name, startFromHead=True, **kwargs
                )
                events += [{"timestamp": e["timestamp"], "message": e["message"]} for e in answer["events"]]
                if not answer["events"] or answer.get("nextForwardToken") in (None, token):
                    break
                token = answer["nextForwardToken"]
            streams[name] = events
    return streams


def _put_events(logs: Any, group: str, stream: str, events: list[dict[str, Any]], *, create: bool) -> None:
    if create:
        with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
            logs.create_log_stream(logGroupName=group, logStreamName=stream)
    ordered = sorted(events, key=lambda e: e["timestamp"])
    for start in range(0, len(ordered), 1000):
        logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=ordered[start : start + 1000])


def _replay(clients: StateClients, target: str, body: str) -> bool:
    """Send one journaled write again, as it was sent (the JSON protocols' bodies are the API's
    parameters). False, logged, when it fails: a write that succeeded once fails again only if the
    state differs, which the journal's order is there to prevent."""
    service, _, operation = target.partition(".")
    client = clients.dynamodb if service.startswith("DynamoDB") else clients.logs
    method = getattr(client, xform_name(operation))
    try:
        method(**_wire_binary_to_bytes(json.loads(body)))
    except Exception as error:
        log.warning("replaying %s failed: %s", operation, error)
        return False
    return True


def journaling_moto_server(state: StateFolder, host: str, port: int) -> Any:
    """moto's threaded server (`infra.local.moto_compat`) with `JournalingApp` in front of its application."""
    from infra.local.moto_compat import moto_server

    clients: list[Any] = []

    def s3() -> Any:
        if not clients:
            import boto3

            clients.append(boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1"))
        return clients[0]

    return moto_server(host, port, lambda app: JournalingApp(app, state, s3))


def _wire_binary_to_bytes(node: Any) -> Any:
    """Request parameters as sent on the wire, for boto3: its binary attribute values (base64 text on the
    wire, `{"B": "..."}`) as bytes again, which boto3 encodes itself."""
    if isinstance(node, list):
        return [_wire_binary_to_bytes(item) for item in node]
    if not isinstance(node, dict):
        return node
    if len(node) == 1 and isinstance(node.get("B"), str):
        return {"B": base64.b64decode(node["B"])}
    if len(node) == 1 and isinstance(node.get("BS"), list) and all(isinstance(b, str) for b in node["BS"]):
        return {"BS": [base64.b64decode(b) for b in node["BS"]]}
    return {key: _wire_binary_to_bytes(value) for key, value in node.items()}
