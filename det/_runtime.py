"""What a command needs from the outside world, in one object that tests replace piece by piece."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TextIO

import httpx

from det._client import ApiClient

DEFAULT_MASTER = "http://127.0.0.1:8080"


class PackedContext(Protocol):
    """What `det._context.pack` returns."""

    @property
    def sha256(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def num_files(self) -> int: ...
    @property
    def file_bytes(self) -> int: ...
    @property
    def reused(self) -> bool: ...
    def pieces(self) -> Iterator[bytes]: ...
    def discard(self) -> None: ...


class ContextCache(Protocol):
    """`det._context.ManifestCache`."""


PackFn = Callable[[Path, Sequence[Path], "ContextCache | None"], PackedContext]


def _default_pack(root: Path, includes: Sequence[Path], cache: ContextCache | None = None) -> PackedContext:
    from det import _context  # imported late: packing pulls in zstandard

    packed: PackedContext = _context.pack(root, includes, cache)  # type: ignore[arg-type]
    return packed


@dataclass
class Runtime:
    master: str = DEFAULT_MASTER
    environ: Mapping[str, str] = field(default_factory=dict)
    transport: httpx.BaseTransport | None = None
    sleep: Callable[[float], None] = time.sleep
    #: Seconds since the epoch (how old what the API shows is: `det trial describe`'s hints).
    now: Callable[[], float] = time.time
    pack: PackFn = _default_pack
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    #: Where a confirmation is read (`det experiment delete` without --yes).
    inp: TextIO = field(default_factory=lambda: sys.stdin)

    def client(self) -> ApiClient:
        from det._sigv4 import auth_for

        auth = auth_for(self.master, self.environ)
        return ApiClient(self.master, transport=self.transport, user=self.user_name(), auth=auth)

    def user_name(self) -> str | None:
        """The OS user running the CLI, as `getpass.getuser` finds it (the environment first): the API
        records it as the owner of the experiments this user creates (a label, never a credential)."""
        for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
            if self.environ.get(name):
                return self.environ[name]
        try:
            import pwd  # POSIX only

            return pwd.getpwuid(os.getuid()).pw_name
        except (ImportError, KeyError, OSError):
            return None

    def context_cache(self) -> ContextCache | None:
        """The manifest cache of packed contexts (`det._context`), in the user's cache folder; None
        where the environment names no home (or `STRATUS_CONTEXT_CACHE=off`)."""
        env = self.environ
        if env.get("STRATUS_CONTEXT_CACHE", "").lower() in ("off", "0", "false", "no"):
            return None
        if not (env.get("STRATUS_HOME") or env.get("XDG_CACHE_HOME") or env.get("HOME")):
            return None
        from det import _context

        return _context.ManifestCache(_context.cache_folder(env))

    def err_is_tty(self) -> bool:
        return _isatty(self.err)

    def confirm(self, question: str) -> bool:
        """Ask on stderr, read a line from `inp`: True for y or yes. Only where `inp` is a terminal."""
        print(f"{question} [y/N] ", end="", file=self.err, flush=True)
        return self.inp.readline().strip().lower() in ("y", "yes")

    def inp_is_tty(self) -> bool:
        return _isatty(self.inp)

    def say(self, text: str) -> None:
        """A result: stdout."""
        print(text, file=self.out, flush=True)

    def note(self, text: str) -> None:
        """Progress and hints: stderr, so that stdout stays clean for pipes."""
        print(text, file=self.err, flush=True)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
