"""What moto's server needs in front of it to answer the requests Stratus makes the way AWS does, and
the stack's request counts (what the control plane would cost on AWS).

moto finds the service of a request from its `Authorization` header (or, unsigned, from its body). A
presigned query-protocol request (an agent's doorbell poll, `chalicelib.aws.bells`) carries its
signature in the URL instead, so moto cannot route it; `QueryAuthRouting` copies the URL's credential
scope into the header moto reads, and marks it a query-protocol request (moto reads the parameters of a
form only). Signatures are not checked (moto checks none).
"""

from __future__ import annotations

import io
import json
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


#: The path on the moto server where the stack's request counts are read (GET) and zeroed (DELETE).
COUNTS_PATH = "/stratus/request-counts"
_NUMBER = re.compile(r"/\d+(?=/|$)")


class RequestCounts:
    """What the stack asked of AWS and what its API was asked, by service and operation: what each costs
    on AWS is priced per request (bench/control_plane_cost.py). One per process, thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()

    def add(self, service: str, operation: str) -> None:
        with self._lock:
            self._counts[(service, operation)] += 1

    def add_api(self, method: str, path: str) -> None:
        """An API request, by route: numbers in the path become `{n}`, other segments of ids are kept."""
        route = _NUMBER.sub("/{n}", path.split("?", 1)[0])
        self.add("api", f"{method} {route}")

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return [{"service": s, "operation": o, "count": n} for (s, o), n in sorted(self._counts.items())]

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()


COUNTS = RequestCounts()


def _operation(environ: dict[str, Any]) -> tuple[str, str]:
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target:
        prefix, _, operation = target.partition(".")
        service = {
            "DynamoDB_20120810": "dynamodb",
            "AmazonSQS": "sqs",
            "AWSStepFunctions": "stepfunctions",
        }.get(prefix, "logs" if prefix.startswith("Logs_") else prefix.lower())
        return service, operation
    action = (parse_qs(environ.get("QUERY_STRING", "")).get("Action") or [""])[0]
    if action:
        return "sqs", action
    return "s3", environ.get("REQUEST_METHOD", "GET")


class CountingApp:
    """Counts every request by service and operation, and answers `COUNTS_PATH` itself."""

    def __init__(self, app: WsgiApp, counts: RequestCounts = COUNTS) -> None:
        self._app = app
        self._counts = counts

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == COUNTS_PATH:
            if environ.get("REQUEST_METHOD") == "DELETE":
                self._counts.reset()
            body = json.dumps(self._counts.snapshot()).encode()
            start_response(
                "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
            )
            return [body]
        if not environ.get("PATH_INFO", "").startswith("/moto-api"):
            service, operation = _operation(environ)
            if service == "sqs" and _to_a_bell(environ):
                operation += " (agent bell)"
            self._counts.add(service, operation)
            if service == "dynamodb":  # also by table: the trial's own metrics and checkpoints apart
                table = _table_of(environ)
                self._counts.add("dynamodb by table", f"{operation} {table.rsplit('-', 1)[-1]}")
                # And by the table's whole name: one stack's requests apart from another's on one server.
                self._counts.add("dynamodb by stack table", f"{operation} {table}")
        return self._app(environ, start_response)


def _table_of(environ: dict[str, Any]) -> str:
    """The table a DynamoDB request names (the first, for a batch or transaction; `stratus-metrics`); "?"
    when it names none."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    found = re.search(rb'"TableName"\s*:\s*"([^"]+)"', body) or re.search(
        rb'"RequestItems"\s*:\s*\{\s*"([^"]+)"', body
    )
    return found.group(1).decode() if found else "?"


def _to_a_bell(environ: dict[str, Any]) -> bool:
    """The SQS request is to an agent's doorbell queue (`<stack>-agent-<id>`), by URL or JSON body."""
    if "-agent-" in environ.get("PATH_INFO", ""):
        return True
    length = int(environ.get("CONTENT_LENGTH") or 0)
    if not length:
        return False
    body = environ["wsgi.input"].read(length)
    environ["wsgi.input"] = io.BytesIO(body)
    return b"-agent-" in body


class DynamoDbStrictness:
    """Refuses what DynamoDB refuses and moto accepts, as DynamoDB does (a ValidationException), so the
    tests and the local stack catch it before AWS: an empty `ExpressionAttributeNames` or
    `ExpressionAttributeValues` map, in a request or in any item of a transaction or batch."""

    MAPS = ("ExpressionAttributeNames", "ExpressionAttributeValues")

    def __init__(self, app: WsgiApp) -> None:
        self._app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if not environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
            return self._app(environ, start_response)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            return self._app(environ, start_response)
        empty = self._empty_map(request)
        if empty is None:
            return self._app(environ, start_response)
        answer = json.dumps(
            {
                "__type": "com.amazon.coral.validation#ValidationException",
                "message": f"{empty} must not be empty",
            }
        ).encode()
        headers = [("Content-Type", "application/x-amz-json-1.0"), ("Content-Length", str(len(answer)))]
        start_response("400 Bad Request", headers)
        return [answer]

    def _empty_map(self, request: Any) -> str | None:
        """The name of an empty map anywhere in the request (a transaction nests one per item)."""
        if isinstance(request, dict):
            for key, value in request.items():
                if key in self.MAPS and value == {}:
                    return str(key)
                found = self._empty_map(value)
                if found is not None:
                    return found
        elif isinstance(request, list):
            for value in request:
                found = self._empty_map(value)
                if found is not None:
                    return found
        return None


class QueryAuthRouting:
    def __init__(self, app: WsgiApp) -> None:
        self._app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        query = environ.get("QUERY_STRING", "")
        if "X-Amz-Credential=" in query and not environ.get("HTTP_AUTHORIZATION"):
            credential = (parse_qs(query).get("X-Amz-Credential") or [""])[0]
            if credential.count("/") == 4 and credential.split("/")[3] == "sqs":
                environ["HTTP_AUTHORIZATION"] = (
                    f"AWS4-HMAC-SHA256 Credential={credential}, SignedHeaders=host, Signature=presigned"
                )
                # A query-protocol request (its parameters in the URL): moto reads them only as a form.
                environ.setdefault("CONTENT_TYPE", "application/x-www-form-urlencoded")
        return self._app(environ, start_response)


def moto_server(host: str, port: int, wrap: Callable[[WsgiApp], WsgiApp] = lambda app: app) -> Any:
    """moto's threaded server with `QueryAuthRouting`, `DynamoDbStrictness`, then `wrap`, then
    `CountingApp` in front of its app."""
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    from infra.local.moto_cfn import patch_rest_api_body

    patch_rest_api_body()  # the stack's REST API is made from its Body, as in API Gateway

    class Server(ThreadedMotoServer):
        def _server_entry(self) -> None:
            moto = DomainDispatcherApplication(create_backend_app)
            app = CountingApp(wrap(DynamoDbStrictness(QueryAuthRouting(moto))))
            self._server = make_server(host, port, app, True, request_handler=MotoRequestHandler)
            self._server_ready_event.set()
            self._server.serve_forever()

    return Server(ip_address=host, port=port, verbose=False)
