"""Agents' doorbells on a real moto server (`chalicelib.aws.bells`): the heartbeat answer gives the agent a
presigned SQS long-poll URL; a launch, a kill or a stop request rings it, and a poll waiting on the URL
returns with the ring; another agent's queue hears nothing; an agent's last beat deletes its queue."""

from __future__ import annotations

import threading

import httpx
import pytest

from chalicelib.aws.bells import queue_name
from chalicelib.services import pausing, runs

pytestmark = pytest.mark.aws

WAIT_S = 15.0


def _poll(url: str) -> str:
    return httpx.get(url, timeout=40).raise_for_status().text


def _rings(text: str) -> int:
    """Messages in a ReceiveMessage answer (SQS's query protocol answers XML, moto JSON)."""
    return text.count("<ReceiptHandle>") + text.count('"ReceiptHandle"')


def test_a_launch_and_a_pause_ring_the_agent_and_its_long_poll_hears_them(stack):
    stack.submit_experiment()
    answer = runs.heartbeat(stack.ports, "agent-1", "default", 1, [])
    bell = answer["bell"]
    assert (
        bell["wait_s"] == 20 and "X-Amz-Signature=" in bell["url"] and "Action=ReceiveMessage" in bell["url"]
    )
    assert answer["heartbeat_interval_s"] == stack.ports.settings.agent_heartbeat_s
    other = runs.heartbeat(stack.ports, "agent-2", "default", 0, [])["bell"]
    assert other["url"] != bell["url"]

    spec = stack.launch_on_agent("agent-1")
    assert _rings(_poll(bell["url"])) >= 1  # the launch rang while nobody was polling: it waited

    # A poll waiting on the URL returns once the control plane rings (a pause here), not after 20 s.
    heard: list[str] = []
    poll = threading.Thread(target=lambda: heard.append(_poll(bell["url"])))
    poll.start()
    runs.started(stack.ports, "agent-1", spec["run_id"], 42)
    pausing.pause_experiment(stack.ports, spec["experiment_id"])
    poll.join(WAIT_S)
    assert not poll.is_alive() and _rings(heard[0]) == 1

    sqs = stack.client("sqs")
    url = sqs.get_queue_url(QueueName=queue_name(stack.names.stack, "agent-2"))["QueueUrl"]
    assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0).get("Messages", []) == []


def test_an_agents_last_beat_deletes_its_bell_and_rings_to_it_are_dropped(stack):
    runs.heartbeat(stack.ports, "agent-1", "default", 1, [])
    name = queue_name(stack.names.stack, "agent-1")
    sqs = stack.client("sqs")
    assert sqs.get_queue_url(QueueName=name)["QueueUrl"]

    runs.heartbeat(stack.ports, "agent-1", "default", 1, [], stopping=True)

    assert name not in " ".join(sqs.list_queues(QueueNamePrefix=name).get("QueueUrls", []))
    stack.ports.bells.ring("agent-1")  # no queue: nothing to wake, and no error


@pytest.mark.parametrize(
    ("agent_id", "expected"),
    [("local-0", "s-agent-local-0"), ("i-0abc_DEF", "s-agent-i-0abc_DEF")],
)
def test_a_queue_is_named_after_its_agent(agent_id, expected):
    assert queue_name("s", agent_id) == expected


def test_an_agent_id_sqs_would_not_take_is_hashed():
    odd = queue_name("s", "node/7:gpu")
    assert odd.startswith("s-agent-") and len(odd) == len("s-agent-") + 32
    assert odd != queue_name("s", "node/8:gpu")
    assert len(queue_name("s", "x" * 200)) <= 80
