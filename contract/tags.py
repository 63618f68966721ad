"""The user's tags (`det deploy aws up --add-tag KEY=VALUE`, for cost allocation): AWS's rules for them, and
how they reach the control plane, which tags the jobs it starts with them.

    tags = user_tags({"team": "vision"})        # checked and sorted; InvalidTagError naming a bad one
    text = tags_to_json(tags)                   # `STRATUS_TAGS` in the functions' environment (template)
    tags = tags_from_json(environ[TAGS_ENV])    # read back by the control plane (`chalicelib.settings`)

`det` checks them as it reads its flags, the template renders them onto the pools' resources (the EC2
pools' instances, volumes and groups, the Batch pools' compute environments and their instances, queues,
scheduling policies and job definitions), and the control plane adds them, with `CLUSTER_TAG`, to every
Batch job and SageMaker training job it starts. Every service involved takes a key of 1 to 128 and a value
of 0 to 256 characters of the set below; keys starting with `aws:` are AWS's, and those starting with
`stratus:` and `Name` are the ones Stratus sets itself (`Name` names each pool's instances). At most
`MAX_USER_TAGS`: Batch's compute resources take 50 tags, three of them Stratus's.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping

from stratus.contract.errors import InvalidTagError

#: The tag that names a resource's stack (its cluster id): every Stratus stack, its pools' resources and jobs.
CLUSTER_TAG = "stratus:cluster-id"
#: The functions' environment variable of the user's tags (a JSON object; absent without any).
TAGS_ENV = "STRATUS_TAGS"
MAX_USER_TAGS = 40
MAX_KEY_CHARS = 128
MAX_VALUE_CHARS = 256
#: Key prefixes the user may not set: AWS's own, then Stratus's (`stratus:cluster-id`, `stratus:pool`).
RESERVED_PREFIXES = ("aws:", "stratus:")
#: Keys Stratus sets on the pools' resources itself.
RESERVED_KEYS = ("Name",)
#: Besides letters, digits and spaces (Unicode), what every service's tags take (SageMaker's, Batch's, EC2's).
PUNCTUATION = "+-=._:/@"


def _bad_character(text: str) -> str | None:
    for char in text:
        if char not in PUNCTUATION and unicodedata.category(char)[0] not in "LNZ":
            return char
    return None


def check_tag(key: str, value: str) -> None:
    """InvalidTagError, naming the tag and the rule it breaks, for a tag AWS or Stratus would refuse."""
    tag = f"tag {key}={value}"
    if not key or len(key) > MAX_KEY_CHARS:
        raise InvalidTagError(f"{tag}: a key has 1 to {MAX_KEY_CHARS} characters (this one {len(key)})")
    if len(value) > MAX_VALUE_CHARS:
        raise InvalidTagError(
            f"{tag}: a value has at most {MAX_VALUE_CHARS} characters (this one {len(value)})"
        )
    for prefix in RESERVED_PREFIXES:
        if key.lower().startswith(prefix):
            owner = "AWS" if prefix == "aws:" else "Stratus"
            raise InvalidTagError(f"{tag}: keys starting with {prefix!r} are {owner}'s own; use another key")
    if key in RESERVED_KEYS:
        raise InvalidTagError(f"{tag}: Stratus names each pool's instances with {key!r}; use another key")
    for part, text in (("key", key), ("value", value)):
        if (char := _bad_character(text)) is not None:
            raise InvalidTagError(
                f"{tag}: its {part} has {char!r}; AWS tags take letters, digits, spaces and {' '.join(PUNCTUATION)}"
            )


def user_tags(tags: Mapping[str, str]) -> dict[str, str]:
    """The tags, each checked (`check_tag`), sorted by key; InvalidTagError for a bad one or too many."""
    for key, value in tags.items():
        check_tag(key, value)
    if len(tags) > MAX_USER_TAGS:
        raise InvalidTagError(
            f"{len(tags)} tags: at most {MAX_USER_TAGS} (AWS Batch takes 50 on its instances, Stratus sets 3)"
        )
    return dict(sorted(tags.items()))


def tags_to_json(tags: Mapping[str, str]) -> str:
    """`STRATUS_TAGS`: compact (Lambda's environment has 4 KB in all)."""
    return json.dumps(dict(sorted(tags.items())), separators=(",", ":"), ensure_ascii=False)


def tags_from_json(text: str) -> dict[str, str]:
    """The tags of `STRATUS_TAGS` (empty text: none), checked; InvalidTagError if they are not an object of
    strings or break a rule."""
    if not text.strip():
        return {}
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidTagError(f"not JSON ({e}); it is an object of tag keys to values") from e
    if not isinstance(loaded, dict) or not all(isinstance(v, str) for v in loaded.values()):
        raise InvalidTagError(f"{text[:80]!r} is not an object of tag keys to string values")
    return user_tags(loaded)
