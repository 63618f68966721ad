"""The context archive (``.tar.zst``) as every side reads it: `det` writes one, the control plane checks
one a user dropped into the bucket (and packs plain-file submissions into one), the harness extracts it.

The rules on its members are applied twice, on the control plane before the archive is used and on the
compute side before anything is written (`chalicelib/services/context_archives.py`,
`stratus.harness._archive`); the kinds of member they allow and the bound on its unpacked size are
declared here, so that the two checks cannot drift apart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # only the members' type: `det`, which never reads a tar, does not import tarfile
    import tarfile

#: The most bytes an archive may unpack to (the tar stream): a bound against decompression bombs.
MAX_UNPACKED_BYTES = 2 << 30

#: 2020-01-01T00:00:00Z: the modification time of every entry of an archive we write (after 1980, so
#: zip accepts it), so that the same files give the same bytes.
ARCHIVE_MTIME = 1_577_836_800

MemberKind = Literal["file", "dir", "symlink", "hardlink"]


def member_kind(member: tarfile.TarInfo) -> MemberKind | None:
    """What ``member`` is among the kinds a context may hold (regular files, folders, symbolic and hard
    links); None for any other (a device, a fifo), which each side refuses with its own error."""
    if member.issym():
        return "symlink"
    if member.islnk():
        return "hardlink"
    if member.isdir():
        return "dir"
    if member.isreg():
        return "file"
    return None
