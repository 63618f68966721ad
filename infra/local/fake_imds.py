"""A fake EC2 instance metadata service (IMDSv2) for many instances, on one loopback port; moto's IMDS is
one static answer for every caller, without spot notices (docs/architecture.md, "The local stack plays AWS with moto").

An instance's ``--imds-url`` is ``http://127.0.0.1:PORT/<instance-id>``: its agent PUTs
``/<instance-id>/latest/api/token`` (400 without ``X-aws-ec2-metadata-token-ttl-seconds``, 1 to 21600)
and GETs ``/<instance-id>/latest/meta-data/...`` with that instance's live token in
``X-aws-ec2-metadata-token`` (else 401); ``spot/instance-action`` answers 404 until `interrupt`. Each
instance has an instance profile's role (`FAKE_ROLE` unless `add` names another, or None: no profile):
``iam/security-credentials/`` lists it and ``iam/security-credentials/<role>`` gives fake temporary keys
in AWS's shape (new ones after `rotate_keys`), for the agent's SigV4 call (`stratus.harness.agent._iam`).
`answer` is the whole behaviour, wire-free (`handle` serves it to an `InMemoryTransport`); the server is
a thin stdlib wire in daemon threads.

    imds = FakeImds().start()
    imds.add("i-0abc", life_cycle="spot")  # its agent: --aws --imds-url imds.url_for("i-0abc")
    imds.interrupt("i-0abc", at=datetime.now(UTC) + timedelta(seconds=20))
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from stratus.contract.transport import Request, Response

TTL_HEADER = "x-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "x-aws-ec2-metadata-token"
MAX_TTL_S = 21600  # six hours: the longest token IMDS grants
_TOKEN_PATH = "latest/api/token"
_META = "latest/meta-data/"
#: The role of an instance's profile unless `FakeImds.add` names another.
FAKE_ROLE = "stratus-fake-AgentRole"
_KEYS_LIFE = timedelta(hours=6)  # as EC2's: rotated well before they expire
_CREDENTIALS = "iam/security-credentials/"


def fake_keys(now: datetime) -> dict[str, str]:
    """Temporary keys in the shape of IMDS's ``iam/security-credentials/<role>`` answer (random values)."""
    return {
        "Code": "Success",
        "LastUpdated": f"{now:%Y-%m-%dT%H:%M:%SZ}",
        "Type": "AWS-HMAC",
        "AccessKeyId": "ASIA" + secrets.token_hex(8).upper(),
        "SecretAccessKey": secrets.token_urlsafe(30),
        "Token": secrets.token_urlsafe(96),
        "Expiration": f"{now + _KEYS_LIFE:%Y-%m-%dT%H:%M:%SZ}",
    }


@dataclass
class _Instance:
    instance_id: str
    life_cycle: str
    availability_zone: str
    role: str | None = FAKE_ROLE
    instance_type: str = ""
    local_ipv4: str = "127.0.0.1"
    action: str = ""  # the planned interruption ("terminate", "stop", "hibernate") at ``action_at``
    action_at: datetime | None = None
    keys: dict[str, str] = field(default_factory=lambda: fake_keys(datetime.now(UTC)))

    def meta(self, name: str) -> str | None:
        """``meta-data/<name>``, or None (404)."""
        at = self.action_at
        notice = json.dumps({"action": self.action, "time": f"{at:%Y-%m-%dT%H:%M:%SZ}"}) if at else None
        values = {
            "spot/instance-action": notice,
            "instance-id": self.instance_id,
            "local-ipv4": self.local_ipv4,
            "instance-life-cycle": self.life_cycle,
            "instance-type": self.instance_type or None,
            "placement/availability-zone": self.availability_zone,
            "placement/region": self.availability_zone[:-1],  # us-east-1a -> us-east-1
        }
        if self.role is not None:
            values[_CREDENTIALS] = self.role
            values[_CREDENTIALS + self.role] = json.dumps(self.keys)
        return values.get(name)


class FakeImds:
    """The fake service's state (instances, live tokens) and its server. Thread-safe.

    ``counts[(instance_id, "PUT latest/api/token", status)]`` counts the requests answered by kind
    (bounded: one key per kind), for tests that check how a client used the service."""

    def __init__(self, *, host: str = "127.0.0.1", clock: Callable[[], float] = time.monotonic) -> None:
        self._host = host
        self._clock = clock
        self._lock = threading.Lock()
        self._instances: dict[str, _Instance] = {}
        self._tokens: dict[str, tuple[str, float]] = {}  # token -> (instance id, expiry on the clock)
        self.counts: Counter[tuple[str, str, int]] = Counter()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- instances -----------------------------------------------------------------------------------

    def add(
        self,
        instance_id: str,
        life_cycle: str = "spot",
        availability_zone: str = "us-east-1a",
        role: str | None = FAKE_ROLE,
        instance_type: str = "",
    ) -> None:
        """Register an instance (its ``--imds-url`` is `url_for` it); ``role``: its instance profile's
        role (None: it has no profile, so no keys); ``instance_type``: what ``instance-type`` answers
        (404 when empty)."""
        if not instance_id or "/" in instance_id:
            raise ValueError(f"instance id {instance_id!r} cannot be a path prefix; use one like 'i-0abc'")
        with self._lock:
            self._instances[instance_id] = _Instance(
                instance_id, life_cycle, availability_zone, role, instance_type
            )

    def keys(self, instance_id: str) -> dict[str, str]:
        """The role keys the instance's ``iam/security-credentials/<role>`` answers now."""
        with self._lock:
            return dict(self._instance(instance_id).keys)

    def rotate_keys(self, instance_id: str) -> None:
        """New role keys for the instance, as EC2 rotates them."""
        with self._lock:
            self._instance(instance_id).keys = fake_keys(datetime.now(UTC))

    def _instance(self, instance_id: str) -> _Instance:
        instance = self._instances.get(instance_id)
        if instance is None:
            raise KeyError(f"no instance {instance_id!r} in the fake IMDS; add() it first")
        return instance

    def interrupt(self, instance_id: str, at: datetime, action: str = "terminate") -> None:
        """Plan an interruption: ``spot/instance-action`` answers it from now on (``at`` in any zone)."""
        if at.tzinfo is None:
            raise ValueError(f"interruption time {at} has no time zone; pass an aware datetime (UTC)")
        with self._lock:
            instance = self._instance(instance_id)
            instance.action, instance.action_at = action, at.astimezone(UTC)

    def revoke_tokens(self, instance_id: str | None = None) -> None:
        """Forget the live tokens (of one instance, or all): their next GET answers 401."""
        with self._lock:
            self._tokens = {t: v for t, v in self._tokens.items() if instance_id not in (None, v[0])}

    def remove(self, instance_id: str) -> None:
        with self._lock:
            self._instances.pop(instance_id, None)
        self.revoke_tokens(instance_id)

    # ---- the service, wire-free ----------------------------------------------------------------------

    def answer(self, method: str, path: str, headers: Mapping[str, str]) -> tuple[int, str]:
        """(status, body) of one request; ``headers`` with lower-case names."""
        instance_id, _, rest = path.lstrip("/").partition("/")
        rest = rest.split("?", 1)[0]
        status, body = self._answer(method, instance_id, rest, headers)
        with self._lock:
            self.counts[(instance_id, f"{method} {rest}", status)] += 1
        return status, body

    def _answer(
        self, method: str, instance_id: str, rest: str, headers: Mapping[str, str]
    ) -> tuple[int, str]:
        now = self._clock()
        with self._lock:
            instance = self._instances.get(instance_id)
            if instance is None:
                return 404, "Not Found"
            if rest == _TOKEN_PATH:
                if method != "PUT":
                    return 405, "Method Not Allowed"
                ttl = headers.get(TTL_HEADER, "")
                if not ttl.isdigit() or not 1 <= int(ttl) <= MAX_TTL_S:
                    return 400, "Bad Request"
                token = secrets.token_urlsafe(32)
                self._tokens = {t: v for t, v in self._tokens.items() if v[1] > now}  # drop the expired
                self._tokens[token] = (instance_id, now + int(ttl))
                return 200, token
            owner, expiry = self._tokens.get(headers.get(TOKEN_HEADER, ""), ("", 0.0))
            if owner != instance_id or expiry <= now:
                return 401, "Unauthorized"
            if method != "GET":
                return 405, "Method Not Allowed"
            value = instance.meta(rest[len(_META) :]) if rest.startswith(_META) else None
        return (404, "Not Found") if value is None else (200, value)

    def handle(self, request: Request) -> Response:
        """The service as an `stratus.contract.http.InMemoryTransport` handler (no socket)."""
        path = request.url.split("://", 1)[-1].partition("/")[2]
        status, body = self.answer(request.method, "/" + path, request.headers)
        return Response(status, text=body)

    # ---- the server ----------------------------------------------------------------------------------

    def start(self) -> FakeImds:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, body = fake.answer(self.command, self.path, headers)
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = _serve

        server = ThreadingHTTPServer((self._host, 0), Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, args=(0.1,), name="fake-imds", daemon=True
        )
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the fake IMDS is not started; call start() first")
        return f"http://{self._host}:{self._server.server_address[1]}"

    def url_for(self, instance_id: str) -> str:
        """The ``--imds-url`` of an instance."""
        return f"{self.url}/{instance_id}"

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
