"""Stratus's version and how the CLI's and the agents' versions stand against the API's, decided once.

    VERSION                                     # this code's version: pyproject's `[project] version`
    compare(Side.CLI, "0.1.0", api_version="0.2.0", oldest="0.1.0").message
        # "the version of the CLI (0.1.0) is older than the API's (0.2.0): upgrade the CLI: pip install ..."

Every side carries the code it was built from: the CLI the installed distribution, the API its Lambda
package (or the local stack's process), an agent the compute package its machine installed. Each says its
version: the CLI and the compute side send `VERSION_HEADER` with every call, the API answers its own in
`GET /info` (with the oldest CLI and agent it still answers), and `det version` shows them all. A caller
older than the oldest the API accepts (`OLDEST_CLIENT`, `OLDEST_AGENT`: raised by the release that
changes the protocol in a way older callers would misread) is refused with `compare(...).message` rather
than answered wrongly. A caller that sends no version predates this header: it is `UNREPORTED` or older.

A version is PEP 440's release segment (`0.10.2`) with an optional pre-release or development suffix
(`0.2.0rc1`, `0.2.0.dev3`: before `0.2.0`; the pre-releases of one release are not ordered among
themselves); anything else (`unknown`, an empty header) cannot be compared, and is said so, never guessed.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

#: This code's version. pyproject.toml's `[project] version` says the same (a unit test checks it): the
#: Lambda package and the compute package carry no distribution metadata, so the code says it itself.
VERSION = "0.1.0"
#: The distribution `pip install` fetches (PyPI's `stratus` is another project).
DISTRIBUTION = "stratus-dl"
#: The request header a CLI or the compute side names its version in.
VERSION_HEADER = "X-Stratus-Version"
#: The oldest CLI the API answers; raise it with a change a CLI of an older version would misread.
OLDEST_CLIENT = "0.1.0"
#: The oldest agent (compute package) the API accepts heartbeats from; raise it as `OLDEST_CLIENT`.
OLDEST_AGENT = "0.1.0"
#: What a caller that sends no `VERSION_HEADER` is taken for: every version that sends none is this or older.
UNREPORTED = "0.1.0"

_VERSION = re.compile(r"^v?(\d+(?:\.\d+)*)(?:[.-]?(a|b|rc|dev|alpha|beta|pre)\.?(\d*))?(?:\+[\w.]+)?$", re.I)


def parse(version: str) -> tuple[tuple[int, ...], int] | None:
    """The ordering key of ``version`` (its release numbers, trailing zeros dropped, and whether it is a
    pre-release, which sorts first); None for text that is not a version."""
    match = _VERSION.match(version.strip())
    if match is None:
        return None
    release = [int(part) for part in match[1].split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    return tuple(release), 0 if match[2] else 1


class Side(enum.Enum):
    """Who calls the API, and how each is upgraded."""

    CLI = "CLI"
    AGENT = "agent"


class Standing(enum.Enum):
    SAME = "same"
    BEHIND = "behind"  # older than the API, still answered
    TOO_OLD = "too old"  # older than the oldest the API answers: refused
    AHEAD = "ahead"  # newer than the API: the stack is behind
    UNKNOWN = "unknown"  # a version that cannot be read


@dataclass(frozen=True)
class Comparison:
    """How a CLI's or an agent's ``version`` stands against the API's (``api_version``), which answers
    that side from version ``oldest`` on; ``name`` says who in the message ("agent i-0abc", "agents a, b";
    empty: "the CLI", "the agent"); ``reported``: False when the caller sent no version (``version`` is
    then `UNREPORTED`, meaning that or older)."""

    side: Side
    version: str
    api_version: str
    oldest: str
    standing: Standing
    name: str = ""
    reported: bool = True

    @property
    def behind(self) -> str:
        """Which one is behind: "CLI", "agent", "API" (the stack), or "" (the same, or not known)."""
        if self.standing in (Standing.BEHIND, Standing.TOO_OLD):
            return self.side.value
        return "API" if self.standing is Standing.AHEAD else ""

    @property
    def message(self) -> str:
        """One sentence naming both versions and the fix; "" when the versions are the same."""
        who = self.name or f"the {self.side.value}"
        shown = self.version if self.reported else f"none sent, so {self.version} or older"
        whose = f"the version of {who} ({shown or 'empty'})"
        if self.standing is Standing.SAME:
            return ""
        if self.standing is Standing.UNKNOWN:
            return (
                f"{whose} and the API's ({self.api_version or 'empty'}) cannot be compared; {self._upgrade()}"
            )
        if self.standing is Standing.AHEAD:
            return (
                f"the API's version ({self.api_version}) is older than that of {who} ({shown}): upgrade "
                f"the stack with `det deploy aws up` run by a CLI of version {self.version} (it deploys its "
                "own version; a local stack: stop it and start `det deploy local up` again)"
            )
        refused = (
            f", and older than the oldest it answers ({self.oldest}), so the API refuses it"
            if self.standing is Standing.TOO_OLD
            else ""
        )
        return f"{whose} is older than the API's ({self.api_version}){refused}: {self._upgrade()}"

    def _upgrade(self) -> str:
        pinned = f"=={self.api_version}" if parse(self.api_version) is not None else ""
        if self.side is Side.CLI:
            return f"upgrade the CLI: pip install --upgrade '{DISTRIBUTION}{pinned}'"
        return (
            "its machine installed an older compute package; `det deploy aws up` uploads the stack's, which "
            "new instances install, and `det agent disable AGENT_ID` moves an agent's runs off it (they "
            "checkpoint and resume elsewhere) so that its instance is let go once idle (an agent started "
            f"by hand: pip install --upgrade '{DISTRIBUTION}{pinned}' and start it again)"
        )


def compare(side: Side, version: str | None, *, api_version: str, oldest: str, name: str = "") -> Comparison:
    """How ``version`` (None: the caller sent none, so it is `UNREPORTED` or older) stands against
    ``api_version``, the API answering that side from ``oldest`` on. A version older than ``oldest`` is
    TOO_OLD even when the API's own version cannot be read."""
    reported = UNREPORTED if version is None else version
    ours, theirs, floor = parse(reported), parse(api_version), parse(oldest)
    if ours is not None and floor is not None and ours < floor:
        standing = Standing.TOO_OLD
    elif ours is None or theirs is None:
        standing = Standing.UNKNOWN
    elif ours < theirs:
        standing = Standing.BEHIND
    elif ours > theirs:
        standing = Standing.AHEAD
    else:
        standing = Standing.SAME
    return Comparison(side, reported, api_version, oldest, standing, name, reported=version is not None)


def api_health() -> dict[str, str]:
    """What `GET /health` answers."""
    return {"status": "ok", "version": VERSION}


def api_info(stack: str, region: str) -> dict[str, str]:
    """What `GET /info` answers (Determined's master info): this code's version, the oldest CLI and agent
    it answers, and the stack it belongs to. The local stack's view and API Gateway's own answer in the
    template (no function runs for it on AWS) both come from here."""
    return {
        "version": VERSION,
        "cluster_id": stack,
        "region": region,
        "oldest_client_version": OLDEST_CLIENT,
        "oldest_agent_version": OLDEST_AGENT,
    }
