"""Who created an experiment, as a label shown by `det experiment list` (Determined's "Owner").

The CLI names its user (the OS user running ``det``) in the `USER_HEADER` request header. The control
plane records it as the owner only where no verified identity exists (the local stack, which is open);
under SigV4 the caller's IAM identity names the owner and the header is ignored. The header is never a
credential: nothing is authorized by it.
"""

from __future__ import annotations

USER_HEADER = "X-Stratus-User"
MAX_USER_NAME = 64


def clean_user_name(value: str | None) -> str | None:
    """The user name a header carries, or None when it is absent, empty, too long or not printable."""
    if value is None:
        return None
    name = value.strip()
    if not name or len(name) > MAX_USER_NAME or not name.isprintable():
        return None
    return name
