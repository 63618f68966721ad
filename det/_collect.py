"""What a context folder ships: the files `det experiment create` packs, and their archive names.

What is shipped
    Every regular file under the context folder, except:

    * ``__pycache__/`` and ``.git`` folders, ``*.pyc`` and ``*.pyo`` files (always, even when a
      ``.detignore`` line tries to re-include them; a ``.git`` *file*, as in git worktrees and
      submodules, is left out too);
    * the ``.detignore`` file at the context root itself;
    * whatever ``.detignore`` at the context root excludes. Its lines follow git's ``.gitignore``
      rules exactly (checked against ``git ls-files --others --exclude-from`` by a differential
      test): ``#`` comments, ``!`` negation, a trailing ``/`` for folders only, a ``/`` anywhere but
      at the end anchors the pattern at the root, otherwise it matches a name at any depth, ``*``,
      ``?``, ``[a-z]``, ``**/``, ``/**/``, ``/**``. As in git, a file inside an excluded folder cannot
      be re-included, and excluded folders are never walked (a large ignored ``data/`` costs nothing);
    * sockets, fifos and device nodes (skipped).

    Folders themselves are not archive entries (like git, an empty folder is not shipped).

Includes (``-i PATH``)
    A file or folder outside the context is shipped under its own name at the top of the archive:
    ``-i ../data`` ships ``data/...``. The include itself is always shipped; the always-ignored
    names and the root ``.detignore`` apply below it, matched against the archive path
    (``data/*.bin`` in ``.detignore`` drops ``.bin`` files of the included ``data``). A name that
    is already a top-level entry of the context (or of another include) is a `ContextError`.

Symbolic links (the rule: the archive never holds a link that leaves it)
    ``.detignore`` sees a link to a folder as a folder (``data/`` drops a ``data`` link to a
    dataset), any other link as a file. Then:

    * a link whose target resolves inside the tree it was found in (the context, or the included
      folder) is stored as a symlink, with a relative target; a link to a folder is not walked;
    * a link whose target resolves outside that tree is followed: the file's contents (or the
      folder's files) are shipped under the link's name, as if they were there. A link that
      leads back into a folder being walked (``up -> ..``) is a `ContextError`;
    * a dangling link (or a link loop) is skipped: it could not be used on the other side either
      (editor lock files such as ``.#notes.md`` are dangling links).
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from det._ignore import IgnoreRules
from det.errors import ContextError

DETIGNORE = ".detignore"

_ALWAYS_IGNORED_DIRS = frozenset({"__pycache__", ".git"})
_ALWAYS_IGNORED_FILES = frozenset({".git"})
_ALWAYS_IGNORED_SUFFIXES = (".pyc", ".pyo")


@dataclass(frozen=True, slots=True)
class ContextFile:
    """One archive entry: a regular file, or a symlink when `link_target` is set."""

    name: str
    """The archive name: posix, relative, no ``..``."""
    source: str
    """The file's path on disk, where its contents are read from (for a followed link: the link,
    which `open` follows). A str, not a Path: building 20,000 Path objects costs more than the walk."""
    size: int
    """Bytes of contents; 0 for a symlink."""
    executable: bool = False
    link_target: str | None = None
    """For a symlink: its target, relative to the link's folder, staying inside the archive."""
    stamp: tuple[int, int, int] = (0, 0, 0)
    """(mtime_ns, ctime_ns, inode) of what is read: with the size, what tells an unchanged file (the
    manifest cache of `det._context`); zeros for a symlink, whose target is all it ships."""

    @property
    def is_symlink(self) -> bool:
        return self.link_target is not None


def _always_ignored(name: str, is_dir: bool) -> bool:
    if is_dir:
        return name in _ALWAYS_IGNORED_DIRS or name.endswith(_ALWAYS_IGNORED_SUFFIXES)
    return name in _ALWAYS_IGNORED_FILES or name.endswith(_ALWAYS_IGNORED_SUFFIXES)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class _Walker:
    def __init__(self, rules: IgnoreRules, out: list[ContextFile]) -> None:
        self.rules = rules
        self.out = out

    def walk(self, folder: str, prefix: str, tree: str, tree_name: str, stack: tuple[str, ...]) -> None:
        """Walk real folder `folder`, whose archive name is `prefix` (``""`` or ending in ``/``).

        `tree` is the real path of the context (or include) the folder belongs to and
        `tree_name` its archive name; `stack` the real folders being walked, for loop detection.
        """
        try:
            entries = list(os.scandir(folder))
        except OSError as exc:
            raise ContextError(
                f"cannot list {folder}: {exc.strerror}; fix its permissions or add it to {DETIGNORE}"
            ) from exc
        rules = self.rules
        for entry in entries:
            name = entry.name
            rel = prefix + name
            if entry.is_symlink():
                self._link(entry, rel, tree, tree_name, stack)
            elif entry.is_dir(follow_symlinks=False):
                if _always_ignored(name, True) or (rules and rules.excluded(rel, True)):
                    continue
                self.walk(entry.path, rel + "/", tree, tree_name, (*stack, entry.path))
            elif entry.is_file(follow_symlinks=False):
                if _always_ignored(name, False) or (rules and rules.excluded(rel, False)):
                    continue
                st = entry.stat(follow_symlinks=False)
                self.out.append(
                    ContextFile(rel, entry.path, st.st_size, bool(st.st_mode & 0o111), stamp=_stamp(st))
                )

    def _link(
        self, entry: os.DirEntry[str], rel: str, tree: str, tree_name: str, stack: tuple[str, ...]
    ) -> None:
        try:
            real = os.path.realpath(entry.path, strict=True)
            st = os.stat(real)
        except (OSError, RuntimeError):
            return  # dangling, or a loop: skipped
        is_dir = stat.S_ISDIR(st.st_mode)
        name = entry.name
        # A link to a folder is matched as a folder ("data/" drops a "data" link to a dataset).
        if _always_ignored(name, is_dir) or (self.rules and self.rules.excluded(rel, is_dir)):
            return
        if _inside(real, tree):
            target = os.path.relpath(real, tree)
            target_name = tree_name if target == "." else posixpath.join(tree_name, *target.split(os.sep))
            link_dir = posixpath.dirname(rel)
            link_target = posixpath.relpath(target_name or ".", link_dir or ".")
            self.out.append(ContextFile(rel, entry.path, 0, False, link_target))
        elif is_dir:
            if any(_inside(folder, real) for folder in stack):
                raise ContextError(
                    f"the symbolic link {entry.path} points to {real}, which contains the folder being packed; "
                    f"remove the link or add '{rel}' to {DETIGNORE}"
                )
            self.walk(real, rel + "/", real, rel, (*stack, real))
        elif stat.S_ISREG(st.st_mode):
            self.out.append(
                ContextFile(rel, entry.path, st.st_size, bool(st.st_mode & 0o111), stamp=_stamp(st))
            )


def _stamp(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def _include_name(include: Path) -> str:
    name = Path(os.path.abspath(include)).name
    if not name:
        raise ContextError(
            f"cannot include {include}: it has no name to ship it under; include a folder below it"
        )
    return name


def collect(root: Path, includes: Sequence[Path] = ()) -> list[ContextFile]:
    """The files to ship from context folder `root` plus `includes`, sorted by archive name.

    See the module docstring for the rules (``.detignore``, includes, symbolic links).
    """
    root = Path(root)
    if not root.is_dir():
        what = "is not a folder" if root.exists() else "does not exist"
        raise ContextError(f"the context folder {root} {what}; pass the folder that holds your model code")
    rules = IgnoreRules.from_file(root / DETIGNORE)
    out: list[ContextFile] = []
    walker = _Walker(rules, out)
    real_root = os.path.realpath(root)
    walker.walk(real_root, "", real_root, "", (real_root,))
    out[:] = [f for f in out if f.name != DETIGNORE]

    owners = {top: str(root / top) for top in {f.name.partition("/")[0] for f in out}}
    for include in includes:
        include = Path(include)
        name = _include_name(include)
        if name in owners:
            raise ContextError(
                f"-i {include} would be shipped as '{name}', which {owners[name]} already is; "
                f"rename one of them or add '/{name}' to {root / DETIGNORE}"
            )
        try:
            real = os.path.realpath(include, strict=True)
            st = os.stat(real)
        except (OSError, RuntimeError) as exc:
            raise ContextError(
                f"cannot include {include}: it does not exist or cannot be read; check the path"
            ) from exc
        owners[name] = str(include)
        if stat.S_ISDIR(st.st_mode):
            walker.walk(real, name + "/", real, name, (real,))
        elif stat.S_ISREG(st.st_mode):
            out.append(
                ContextFile(name, os.fspath(include), st.st_size, bool(st.st_mode & 0o111), stamp=_stamp(st))
            )
        else:
            raise ContextError(f"cannot include {include}: it is neither a file nor a folder")
    out.sort(key=lambda f: f.name)
    return out
