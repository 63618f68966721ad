"""`.detignore` against git itself: for random trees and random ignore files, the files `collect`
ships are the files `git ls-files --others --exclude-from=.detignore` lists."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from det._context import collect

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

# Names with dots, dashes, leading dots, glob-special characters and spaces; none of the names
# that are always ignored (__pycache__, .git, *.pyc, *.pyo) nor .detignore itself.
NAMES = [
    "a", "b", "x", "d", "foo", "build", "data", "sub", "dir-1", "c.d", "k.txt", "keep.log",
    "top.txt", "x.log", "y.bin", "z.tmp", ".hidden", "e-f.g.txt", "1x", "!x", "#c", "a-b",
    "K.TXT", "-x", "]z", "x ",
]  # fmt: skip

PATTERNS = [
    "*.log", "build/", "/top.txt", "!keep.log", "a/**/b", "data/*.bin", "foo/*", "foo/**",
    "!foo/keep.log", "d/", "!d/k.txt", "*.tmp", "!a/b", "**/x", "x/**/", "/a", "a", "b/", "!b/",
    "*.bin", "!*.bin", "**/data", "sub/*.txt", "!sub/", "dir-1/", ".hidden", "*/", "!top.txt",
    "a/b/", "/*", "!/a", "!*/", "c.d/", "[a-c]*", "k.tx?", "[!k]*.txt", "*.[bl][io][gn]", "\\!x",
    "x\\ ", "[[:digit:]]*", "a/**", "**/b/**", "*.log  ", "d*/", "[z-a]*", "[]]*", "[a-]*",
    "[[:alpha:]]?", "[abc", "a[!/]b", "**/", "/**/k.txt", "a/**/", "***", "!**/b", "*.TXT",
    "x/**/y/**", "# comment", "\\#c", "!x", "", "sub/", "!sub/k.txt", "/sub/*", "!/sub/d",
]  # fmt: skip

paths = st.lists(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4), min_size=1, max_size=16)
ignore_files = st.lists(st.sampled_from(PATTERNS), min_size=0, max_size=6)

GIT_ENV = {
    **os.environ,
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CEILING_DIRECTORIES": tempfile.gettempdir(),
}


def build_tree(root: Path, tree: list[list[str]]) -> None:
    for parts in tree:
        path = root.joinpath(*parts)
        # a name cannot be both a file and a folder: skip paths that collide with earlier ones
        if any(root.joinpath(*parts[:i]).is_file() for i in range(1, len(parts))) or path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("/".join(parts))


def git_lists(root: Path) -> set[str]:
    subprocess.run(["git", "init", "-q", str(root)], check=True, env=GIT_ENV)
    out = subprocess.run(
        ["git", "ls-files", "-z", "--others", "--exclude-from=.detignore"],
        cwd=root,
        capture_output=True,
        check=True,
        env=GIT_ENV,
    ).stdout
    return {name for name in out.decode().split("\0") if name} - {".detignore"}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=paths, lines=ignore_files)
@example(tree=[["data", "keep.log"], ["data", "x.bin"], ["top.txt"]], lines=["data/", "!data/keep.log"])
@example(tree=[["foo", "keep.log"], ["foo", "a"]], lines=["foo/**", "!foo/keep.log"])
@example(tree=[["z.tmp"], ["a", "z.tmp"]], lines=["[z-a]*"])
@example(tree=[["sub", "d", "k.txt"], ["sub", "x"]], lines=["/sub/*", "!/sub/d"])
@example(tree=[["a", "build"], ["build", "x"]], lines=["build/"])
@example(tree=[["b"], ["d"], ["c.d"], ["]z"]], lines=["[a-c]*", "[]]*"])
def test_detignore_matches_git(tree: list[list[str]], lines: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ctx"
        root.mkdir()
        build_tree(root, tree)
        (root / ".detignore").write_text("\n".join(lines) + "\n")
        ours = {f.name for f in collect(root)}
        assert ours == git_lists(root), f".detignore: {lines!r}"
