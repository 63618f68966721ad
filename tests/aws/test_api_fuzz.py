"""schemathesis against the API as it serves itself: the document from `GET /openapi.json`, every operation
in it, valid and invalid inputs, over real HTTP to the Chalice app on a moto stack holding real records (the
`api` fixture of tests/aws/conftest.py), each route called with the credential its kind takes (a user's
unsigned call, the stack's agent token, the live run token of the trial the examples name). No answer is
a 5xx; each 200 and each error matches the schema the document declares for it.

Bounded and repeatable: a fixed number of examples per operation and mode, derandomized (Hypothesis derives
its seed from the test), no example database. `STRATUS_FUZZ_EXAMPLES` raises the count for a longer run.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from chalicelib.api.routing import ROUTES

pytestmark = [pytest.mark.aws, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

EXAMPLES = int(os.environ.get("STRATUS_FUZZ_EXAMPLES", "6"))


class Fuzz:
    """The requests of one run and what they found."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.counts: Counter[str] = Counter()
        self.server_errors: list[str] = []
        self.nonconforming: list[str] = []

    def operation(self, operation: Any, mode: GenerationMode, headers: dict[str, str]) -> None:
        @settings(
            max_examples=EXAMPLES,
            derandomize=True,
            database=None,
            deadline=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy(generation_mode=mode))
        def call(case: schemathesis.Case) -> None:
            self.one(case, f"{case.method} {case.formatted_path} ({mode.value})", headers)

        try:
            call()
        except Unsatisfiable:
            assert mode == GenerationMode.NEGATIVE, f"{operation.method} {operation.path}: no valid input"
            self.counts["operations with nothing to make invalid"] += 1

    def one(self, case: schemathesis.Case, where: str, headers: dict[str, str]) -> None:
        response = case.call(base_url=self.base_url, headers=headers)
        self.counts["requests"] += 1
        self.counts[f"{response.status_code // 100}xx"] += 1
        if response.status_code >= 500:
            self.server_errors.append(f"{where}: {response.status_code} {response.text[:300]}")
            return
        try:
            case.validate_response(
                response,
                checks=[status_code_conformance, content_type_conformance, response_schema_conformance],
            )
        except AssertionError as error:  # schemathesis reports a failed check as an AssertionError
            self.nonconforming.append(f"{where}: {response.status_code}: {str(error)[:300]}")


# Every operation, every mode, over real HTTP: about 4 minutes on 2 cores, more than the suite's 300 s
# guard against hangs when the machine is busy (it ran out of it once, beside a benchmark).
@pytest.mark.timeout(900)
def test_no_operation_answers_a_5xx_and_every_answer_matches_the_document(api) -> None:
    document = httpx.get(f"{api.url}/openapi.json", timeout=30).json()
    schema = schemathesis.openapi.from_dict(document)
    auth = {(r.method, r.path): r.auth for r in ROUTES}
    credentials = {"none": None, "iam": None, "agent": api.tokens["agent"], "run": api.tokens["run"]}
    fuzz = Fuzz(api.url)

    for result in schema.get_all_operations():
        operation = result.ok()
        credential = credentials[auth[(operation.method.upper(), operation.path)]]
        fuzz.counts["operations"] += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            fuzz.operation(operation, mode, {"Authorization": credential} if credential else {})

    print(f"\nfuzz: {dict(fuzz.counts)}")
    assert fuzz.counts["operations"] == len(ROUTES)
    assert fuzz.server_errors == []
    assert fuzz.nonconforming == []
