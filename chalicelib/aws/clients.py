"""The one factory for boto3 clients and resources, created lazily (never at import time, so tests can
start moto first).

One session serves every thread: a session is not thread-safe, so clients and resources are made from it
under a lock; clients are thread-safe and shared, resources are not and are kept per thread. A session per
thread would load every service model again in each new thread: the local stack's API serves each
connection in a thread of its own, and that cost the stack 0.3-0.4 s of CPU per `det` command (20-40 ms
with one session: bench/results/api_request_cost.md)."""

from __future__ import annotations

import threading
from typing import Any

import boto3
from botocore.config import Config

from chalicelib.settings import get_settings

_local = threading.local()
_lock = threading.Lock()
_generation = 0
#: (generation, session, clients) of the current generation; replaced under `_lock`.
_shared: tuple[int, boto3.session.Session, dict[tuple[str, str | None], Any]] | None = None

_CONFIG = Config(
    retries={"max_attempts": 5, "mode": "standard"},
    s3={"addressing_style": "path"},
    signature_version="s3v4",
)


def _current() -> tuple[boto3.session.Session, dict[tuple[str, str | None], Any]]:
    """The session and clients of this generation (callers hold `_lock`)."""
    global _shared
    if _shared is None or _shared[0] != _generation:
        _shared = (_generation, boto3.session.Session(region_name=get_settings().region), {})
    return _shared[1], _shared[2]


def client(service: str, region: str | None = None) -> Any:
    """The service's client in the stack's region, or in ``region`` (a service with endpoints in a few
    regions only, such as the Price List API)."""
    with _lock:
        session, cache = _current()
        key = (service, region)
        if key not in cache:
            cache[key] = session.client(
                service, region_name=region, endpoint_url=get_settings().endpoint_url, config=_CONFIG
            )
        return cache[key]


def resource(service: str) -> Any:
    """The service's resource for this thread (resources are not thread-safe)."""
    cache: dict[str, Any] | None = getattr(_local, "resources", None)
    if cache is None or getattr(_local, "generation", -1) != _generation:
        cache = _local.resources = {}
        _local.generation = _generation
    if service not in cache:
        with _lock:
            session, _ = _current()
            cache[service] = session.resource(
                service, endpoint_url=get_settings().endpoint_url, config=_CONFIG
            )
    return cache[service]


def reset() -> None:
    """Drop cached clients in every thread (after the settings or the endpoint changed)."""
    global _generation
    with _lock:
        _generation += 1


def frozen_credentials() -> Any:
    """The credentials the clients sign with, as they are now (to presign what boto3 cannot)."""
    with _lock:
        session, _ = _current()
        credentials = session.get_credentials()
    return credentials.get_frozen_credentials()
