"""The command line every launcher takes, and how it becomes the wrapped program's command line.

    python3 -m launchers.<name> [OVERRIDES... --] (--trial module:Class | COMMAND [ARGS...])

- OVERRIDES are flags of the wrapped program (torchrun, horovodrun, deepspeed). They are recognised only
  when the first argument is a flag other than ``--trial`` and must end with ``--``, so a command's own
  ``--`` (``python3 train.py -- x``) is never taken for the end of the overrides. An override replaces
  the launcher's flag of the same name in place, whatever its spelling (``--flag value``,
  ``--flag=value``, ``--flag_name`` / ``--flag-name``, a short alias); any other override is added after
  the launcher's flags.
- ``--trial module:Class`` runs the legacy trial class: ``python3 -m stratus.harness.exec.run_trial module:Class``.
- COMMAND runs as written (``python3 train.py``, ``./run.sh``), except that a first word ending in
  ``.py`` is run with Python, as torchrun runs its training script.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from stratus.launchers.errors import LaunchConfigError

_NUMBER = re.compile(r"-?\d+(\.\d+)?")


@dataclass(frozen=True)
class Trial:
    """A legacy trial class, ``module:Class``."""

    spec: str


@dataclass(frozen=True)
class Script:
    """A command (or a ``.py`` file) and its arguments."""

    argv: tuple[str, ...]


Target = Trial | Script


def parse_launch_args(argv: Sequence[str], usage: str) -> tuple[list[str], Target]:
    """``(overrides, target)`` of a launcher's arguments; ``usage`` goes into the error messages."""
    args = list(argv)
    overrides: list[str] = []
    if args and args[0].startswith("-") and args[0] != "--trial" and not args[0].startswith("--trial="):
        if "--" not in args:
            raise LaunchConfigError(
                f"overrides {' '.join(args)!r} do not end with '--'; write them before '--' and the "
                f"command after it. Usage: {usage}"
            )
        end = args.index("--")
        overrides, args = args[:end], args[end + 1 :]
    if args and (args[0] == "--trial" or args[0].startswith("--trial=")):
        spec = args[0].partition("=")[2] if "=" in args[0] else (args[1] if len(args) > 1 else "")
        extra = args[1:] if "=" in args[0] else args[2:]
        if not spec or extra:
            raise LaunchConfigError(
                f"--trial takes exactly one module:Class and nothing after it (got {args[1:]!r}). Usage: {usage}"
            )
        return overrides, Trial(spec)
    if not args:
        raise LaunchConfigError(f"no command to launch. Usage: {usage}")
    return overrides, Script(tuple(args))


def worker_command(target: Target, python: str = "python3") -> list[str]:
    """What each worker runs."""
    if isinstance(target, Trial):
        return [python, "-m", "stratus.harness.exec.run_trial", target.spec]
    if target.argv[0].endswith(".py"):
        return [python, *target.argv]
    return list(target.argv)


# ---- overrides ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlagSpec:
    """What a wrapped program's flags look like.

    Names are compared after ``_`` → ``-`` and ``aliases`` (spelling → name). ``switches`` never take a
    value and ``valued`` flags always do; any other flag takes the next argument as its value unless that
    argument looks like a flag. An override of a flag in ``replaces`` also drops the launcher's flags
    listed for it (DeepSpeed refuses ``--num_gpus`` together with ``--include``). The ``refused`` flags
    say how the command runs (torchrun's ``--module``), which is the launcher's to decide: an override of
    one is refused.
    """

    aliases: Mapping[str, str] = field(default_factory=dict)
    switches: frozenset[str] = frozenset()
    valued: frozenset[str] = frozenset()
    replaces: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    refused: frozenset[str] = frozenset()

    def name(self, flag: str) -> str:
        normal = flag.replace("_", "-")
        return self.aliases.get(normal, normal)


@dataclass(frozen=True)
class _Flag:
    name: str
    tokens: tuple[str, ...]


def parse_flags(tokens: Sequence[str], spec: FlagSpec) -> list[_Flag]:
    flags: list[_Flag] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("-") or tok == "-":
            raise LaunchConfigError(
                f"override {tok!r} is not a flag; overrides are the wrapped program's flags (with their "
                "values), before '--'."
            )
        if tok.startswith("--") and "=" in tok:
            flags.append(_Flag(spec.name(tok.partition("=")[0]), (tok,)))
            i += 1
            continue
        name = spec.name(tok)
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        takes_value = name not in spec.switches and (
            (name in spec.valued and nxt is not None)
            or (nxt is not None and (not nxt.startswith("-") or bool(_NUMBER.fullmatch(nxt))))
        )
        if takes_value:
            assert nxt is not None
            flags.append(_Flag(name, (tok, nxt)))
            i += 2
        else:
            flags.append(_Flag(name, (tok,)))
            i += 1
    return flags


def override_names(overrides: Sequence[str], spec: FlagSpec) -> dict[str, str | None]:
    """``{name: value}`` of the overrides (None for a switch); the last of a repeated flag wins."""
    out: dict[str, str | None] = {}
    for flag in parse_flags(overrides, spec):
        if len(flag.tokens) == 2:
            out[flag.name] = flag.tokens[1]
        elif "=" in flag.tokens[0] and flag.tokens[0].startswith("--"):
            out[flag.name] = flag.tokens[0].partition("=")[2]
        else:
            out[flag.name] = None
    return out


def merge_flags(
    base: Sequence[tuple[str, str | None]], overrides: Sequence[str], spec: FlagSpec
) -> list[str]:
    """The launcher's ``base`` flags (``(flag, value)``, None for a switch) with ``overrides`` applied;
    an override of a ``spec.refused`` flag is refused."""
    flags = parse_flags(overrides, spec)
    refused = sorted({flag.name for flag in flags} & spec.refused)
    if refused:
        raise LaunchConfigError(
            f"{', '.join(refused)} cannot be overridden: the launcher decides how the command runs; write "
            "the command itself after '--' (e.g. 'python3 -m my.module')."
        )
    merged = [_Flag(spec.name(f), (f,) if v is None else (f, v)) for f, v in base]
    for flag in flags:
        dropped = set(spec.replaces.get(flag.name, ()))
        merged = [m for m in merged if m.name not in dropped]
        at = next((k for k, m in enumerate(merged) if m.name == flag.name), None)
        if at is None:
            merged.append(flag)
        else:
            merged[at] = flag
    return [tok for flag in merged for tok in flag.tokens]
