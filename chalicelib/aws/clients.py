"""The one factory for boto3 clients and resources, created lazily (never at import time, so tests can
start moto first) and cached per thread (boto3 clients are thread-safe, sessions are not)."""

from __future__ import annotations

import threading
from typing import Any

import boto3
from botocore.config import Config

from chalicelib.settings import get_settings

_local = threading.local()
_generation = 0

_CONFIG = Config(
    retries={"max_attempts": 5, "mode": "standard"},
    s3={"addressing_style": "path"},
    signature_version="s3v4",
)


def _session() -> boto3.session.Session:
    session = getattr(_local, "session", None)
    if session is None or getattr(_local, "generation", -1) != _generation:
        session = boto3.session.Session(region_name=get_settings().region)
        _local.session = session
        _local.cache = {}
        _local.generation = _generation
    return session


def client(service: str, region: str | None = None) -> Any:
    """The service's client in the stack's region, or in ``region`` (a service with endpoints in a few
    regions only, such as the Price List API)."""
    session = _session()
    key = ("client", service, region)
    if key not in _local.cache:
        _local.cache[key] = session.client(
            service, region_name=region, endpoint_url=get_settings().endpoint_url, config=_CONFIG
        )
    return _local.cache[key]


def resource(service: str) -> Any:
    session = _session()
    key = ("resource", service)
    if key not in _local.cache:
        _local.cache[key] = session.resource(
            service, endpoint_url=get_settings().endpoint_url, config=_CONFIG
        )
    return _local.cache[key]


def reset() -> None:
    """Drop cached clients in every thread (after the settings or the endpoint changed)."""
    global _generation
    _generation += 1


def frozen_credentials() -> Any:
    """The credentials the clients sign with, as they are now (to presign what boto3 cannot)."""
    return _session().get_credentials().get_frozen_credentials()
