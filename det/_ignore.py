"""`.detignore` rules, evaluated exactly as git evaluates `.gitignore` (a differential test checks it
against `git ls-files --others --exclude-from`).

Written here rather than taken from pathspec: pathspec re-includes files below an excluded folder
(git never does), raises on some bracket patterns git accepts, and changed its regexes across versions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from det.errors import ContextError


@dataclass(frozen=True, slots=True)
class _Rule:
    regex: re.Pattern[str] | None
    """Full-match regex; None for a pattern that never matches (git drops malformed brackets)."""
    negative: bool
    dir_only: bool
    basename: bool
    """A pattern without a slash (but for a trailing one) matches the last path component."""


_POSIX_CLASSES = {
    "alnum": "a-zA-Z0-9",
    "alpha": "a-zA-Z",
    "blank": " \\t",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "\\x21-\\x7e",
    "lower": "a-z",
    "print": "\\x20-\\x7e",
    "punct": "!-/:-@\\[-`{-~",
    "space": " \\t\\n\\r\\f\\v",
    "upper": "A-Z",
    "xdigit": "0-9a-fA-F",
}


class _BadPattern(Exception):
    pass


def _bracket(glob: str, i: int) -> tuple[str, int]:
    """Translate the bracket expression opening at glob[i] (as git's wildmatch reads it)."""
    n = len(glob)
    i += 1
    if i < n and glob[i] in "!^":
        negated = True
        i += 1
    else:
        negated = False
    items: list[str] = []
    prev: str | None = None
    first = True
    while True:
        if i >= n:
            raise _BadPattern("unterminated [")
        c = glob[i]
        if c == "]" and not first:
            i += 1
            break
        first = False
        if c == "\\":
            i += 1
            if i >= n:
                raise _BadPattern("trailing backslash")
            c = glob[i]
            items.append(re.escape(c))
            prev = c
        elif c == "-" and prev is not None and i + 1 < n and glob[i + 1] != "]":
            i += 1
            hi = glob[i]
            if hi == "\\":
                i += 1
                if i >= n:
                    raise _BadPattern("trailing backslash")
                hi = glob[i]
            # wildmatch has already matched the range's start as a literal: keep it
            if prev <= hi:
                items.append(f"{re.escape(prev)}-{re.escape(hi)}")
            prev = None
        elif c == "[" and i + 1 < n and glob[i + 1] == ":":
            end = glob.find("]", i + 2)
            if end < 0:
                raise _BadPattern("unterminated [")
            if end - 1 < i + 2 or glob[end - 1] != ":":
                items.append(re.escape("["))  # not a [:class:], a plain "["
                prev = "["
            else:
                cls = glob[i + 2 : end - 1]
                if cls not in _POSIX_CLASSES:
                    raise _BadPattern(f"unknown class [:{cls}:]")
                items.append(_POSIX_CLASSES[cls])
                prev = None
                i = end
        else:
            items.append(re.escape(c))
            prev = c
        i += 1
    body = "".join(items)
    if negated:
        return f"[^/{body}]", i
    if not body:
        return "(?!)", i
    return f"(?!/)[{body}]", i


def _translate(glob: str) -> str:
    """Translate a wildmatch pattern (WM_PATHNAME) into a regex for `re.fullmatch`."""
    out: list[str] = []
    i, n = 0, len(glob)
    while i < n:
        c = glob[i]
        if c == "*":
            j = i
            while j < n and glob[j] == "*":
                j += 1
            at_start = i == 0 or glob[i - 1] == "/"
            at_end = j == n or glob[j] == "/"
            if j - i >= 2 and at_start and at_end:
                if j == n:
                    out.append(".*")
                else:
                    out.append("(?:.*/)?")  # "**/": zero or more folders
                    j += 1
            else:
                out.append("[^/]*")
            i = j
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            part, i = _bracket(glob, i)
            out.append(part)
        elif c == "\\":
            if i + 1 >= n:
                raise _BadPattern("trailing backslash")
            out.append(re.escape(glob[i + 1]))
            i += 2
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def _trim_trailing_spaces(line: str) -> str:
    """Drop trailing spaces that are not escaped with a backslash (git's trim_trailing_spaces)."""
    last_space: int | None = None
    i = 0
    while i < len(line):
        c = line[i]
        if c == " ":
            if last_space is None:
                last_space = i
        elif c == "\\":
            i += 1
            if i >= len(line):
                return line
            last_space = None
        else:
            last_space = None
        i += 1
    return line if last_space is None else line[:last_space]


class IgnoreRules:
    """The rules of one ``.detignore`` file, answering for one path at a time as git does.

    `excluded` is asked about a path only when no folder above it is excluded; the walk in
    `collect` guarantees that by never entering an excluded folder.
    """

    def __init__(self, lines: Sequence[str]) -> None:
        rules: list[_Rule] = []
        for raw in lines:
            line = raw[:-1] if raw.endswith("\r") else raw
            if not line or line.startswith("#"):
                continue
            line = _trim_trailing_spaces(line)
            negative = line.startswith("!")
            if negative:
                line = line[1:]
            dir_only = line.endswith("/")
            if dir_only:
                line = line[:-1]
            basename = "/" not in line
            if not basename and line.startswith("/"):
                line = line[1:]
            if not line:
                continue
            try:
                regex: re.Pattern[str] | None = re.compile(_translate(line), re.DOTALL)
            except _BadPattern:
                regex = None
            rules.append(_Rule(regex, negative, dir_only, basename))
        self._rules = tuple(reversed(rules))

    def __bool__(self) -> bool:
        return bool(self._rules)

    def excluded(self, path: str, is_dir: bool) -> bool:
        """Whether `path` (posix, relative to the context root) is excluded by the last rule matching it."""
        base = path.rpartition("/")[2]
        for rule in self._rules:
            if rule.regex is None or (rule.dir_only and not is_dir):
                continue
            if rule.regex.fullmatch(base if rule.basename else path):
                return not rule.negative
        return False

    @classmethod
    def from_file(cls, path: Path) -> IgnoreRules:
        try:
            text = path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            return cls(())
        except (OSError, UnicodeDecodeError) as exc:
            raise ContextError(f"cannot read {path}: {exc}; make it a UTF-8 text file") from exc
        return cls(text.removeprefix("\ufeff").split("\n"))
