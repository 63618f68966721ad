"""The API's URL as the CLI uses it: `-m URL`, else `$DET_MASTER`, else the local stack's default.

Users paste what they have seen elsewhere: API Gateway's `https://ID.execute-api.REGION.amazonaws.com/api`
(the stage is part of the URL there), a trailing slash, or the local stack's address with that `/api`
added. A request to a path the API has no route for answers "Missing Authentication Token" (API
Gateway's answer, which Chalice's local server copies), which says nothing useful; so the URL is
normalised where its meaning is certain (a trailing slash; `/api` on the local stack, which serves at
its root) and refused, naming the value and the URL to use, where it cannot be right.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

from det._runtime import DEFAULT_MASTER
from det.errors import UsageError

#: API Gateway's host; its first path segment is the stage (`api` in Stratus' template).
_GATEWAY_HOST = re.compile(r"^[a-z0-9]+\.execute-api\.[a-z0-9-]+\.amazonaws\.com(\.cn)?$")


def master_url(flag: str | None, environ_value: str | None) -> str:
    """The API's base URL, without a trailing slash; UsageError for one that cannot reach it."""
    given = flag or environ_value
    source = "-m" if flag else "DET_MASTER"
    url = (given or DEFAULT_MASTER).strip()
    if "://" not in url:
        url = f"http://{url}"
    parts = urlsplit(url)
    if not parts.hostname:
        raise UsageError(f"{source} {given!r} names no host; pass the API's URL, e.g. {DEFAULT_MASTER}")
    path = re.sub(r"/+", "/", parts.path).rstrip("/")
    root = urlunsplit((parts.scheme, parts.netloc, "", "", ""))
    if is_local_stack(url):
        if path not in ("", "/api"):
            raise UsageError(
                f"{source} {given} has the path {path}, and the local stack serves its API at its root; "
                f"use {root}"
            )
        path = ""  # `/api` is API Gateway's stage: the local stack has none
    elif _GATEWAY_HOST.match(parts.hostname) and path.count("/") != 1:
        stage = path.split("/")[1] if path else "api"
        what = "with more than its stage" if path else "without its stage"
        raise UsageError(
            f"{source} {given} is an API Gateway URL {what}; use {root}/{stage} (the ApiUrl that "
            "`det deploy aws up` prints)"
        )
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def is_local_stack(master: str) -> bool:
    """Whether `master` is the embedded local stack, whose AWS is moto: it serves plain HTTP (API
    Gateway, the only API of a stack in AWS, serves HTTPS only), or on this machine's loopback."""
    parts = urlsplit(master)
    host = (parts.hostname or "").lower()
    return parts.scheme == "http" or host == "localhost" or host.startswith("127.") or host == "::1"
