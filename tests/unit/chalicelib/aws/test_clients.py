"""`chalicelib.aws.clients`: one session for every thread, clients shared (thread-safe), resources per
thread (not thread-safe), everything made again after `reset`."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from chalicelib import wiring
from chalicelib.aws import clients


def in_thread(make: Callable[[], Any]) -> Any:
    made: list[Any] = []
    thread = threading.Thread(target=lambda: made.append(make()))
    thread.start()
    thread.join()
    return made[0]


def test_a_client_is_made_once_and_shared_by_every_thread(aws) -> None:
    here = clients.client("s3")

    assert in_thread(lambda: clients.client("s3")) is here
    assert clients.client("s3", region="us-east-1") is not here
    assert clients.client("s3").meta.region_name == "us-west-2"


def test_a_resource_is_kept_per_thread(aws) -> None:
    here = clients.resource("dynamodb")

    assert clients.resource("dynamodb") is here
    assert in_thread(lambda: clients.resource("dynamodb")) is not here


def test_reset_makes_new_clients_and_resources_from_a_new_session(
    aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, resource = clients.client("sqs"), clients.resource("dynamodb")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")

    wiring.reset()

    assert clients.client("sqs") is not client and clients.client("sqs").meta.region_name == "eu-west-1"
    assert clients.resource("dynamodb") is not resource


def test_many_threads_asking_at_once_get_one_client(aws) -> None:
    barrier = threading.Barrier(8)
    made: list[Any] = []

    def ask() -> None:
        barrier.wait()
        made.append(clients.client("dynamodb"))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(made) == 8 and len({id(c) for c in made}) == 1
