"""Builds the services' ports from the AWS adapters, once per thread (boto3 resources are not
thread-safe; in Lambda there is one thread, on the local stack the server and the pump have several)."""

from __future__ import annotations

import threading

from chalicelib.aws import aws_ports, clients
from chalicelib.aws.secrets import read_secret
from chalicelib.services.ports import Ports
from chalicelib.settings import read_secrets_with, reset_settings

# Every entry point (the API's routes, each queue's handler: separate Lambda functions) comes through
# here, so here the settings learn to read the tokens from Secrets Manager where *_ARN names them.
read_secrets_with(read_secret)

_local = threading.local()
_generation = 0


def ports() -> Ports:
    if getattr(_local, "generation", -1) != _generation:
        _local.ports = aws_ports()
        _local.generation = _generation
    built: Ports = _local.ports
    return built


def reset() -> None:
    """Forget settings, clients and ports (tests and the local stack change the environment)."""
    global _generation
    reset_settings()
    clients.reset()
    _generation += 1
