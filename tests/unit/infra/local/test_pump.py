"""How the local pump reads a handler's answer, as Lambda reads a partial batch response
(`ReportBatchItemFailures`): which messages to leave on the queue, or the whole batch."""

from __future__ import annotations

from typing import Any

import pytest

from infra.local.pump import failed_ids

BATCH = {"m0", "m1", "m2"}


@pytest.mark.parametrize(
    ("answer", "failed"),
    [
        (None, set()),
        ({}, set()),
        ({"batchItemFailures": None}, set()),
        ({"batchItemFailures": []}, set()),
        ({"batchItemFailures": [{"itemIdentifier": "m1"}]}, {"m1"}),
        ({"batchItemFailures": [{"itemIdentifier": "m0"}, {"itemIdentifier": "m2"}]}, {"m0", "m2"}),
    ],
    ids=["none", "empty-answer", "null-list", "empty-list", "one", "two"],
)
def test_the_messages_an_answer_reports_failed(answer: Any, failed: set[str]) -> None:
    assert failed_ids(answer, BATCH) == failed


@pytest.mark.parametrize(
    "answer",
    [
        {"batchItemFailures": [{"itemIdentifier": "m9"}]},
        {"batchItemFailures": [{"itemIdentifier": ""}]},
        {"batchItemFailures": [{"itemIdentifier": None}]},
        {"batchItemFailures": [{"id": "m1"}]},
        {"batchItemFailures": ["m1"]},
        {"batchItemFailures": {"itemIdentifier": "m1"}},
    ],
    ids=["not-of-the-batch", "empty-id", "null-id", "bad-key", "not-an-object", "not-a-list"],
)
def test_an_answer_lambda_refuses_fails_the_whole_batch(answer: Any) -> None:
    assert failed_ids(answer, BATCH) is None
