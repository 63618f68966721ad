"""`det example list | copy NAME [DIR]`: the examples that come with the CLI, copied out to be run.

The README's first commands use an example, and a user who ran `pip install` has no checkout: the
repository's `examples/` folders are installed with the CLI (pyproject's data-files put them under
`<prefix>/share/stratus-dl/examples/`, wherever the installer's prefix is), and `det example copy digits`
copies one into the current folder and prints the command that runs it. From a checkout (an editable
install, `python -m det` in the repository) the checkout's own `examples/` is used, as it is newer.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import re
import shlex
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from det import _distribution
from det._commands import Subcommands
from det._render import plural, table
from det._runtime import Runtime
from det.errors import UsageError

#: Where pyproject's data-files install the examples, below the installer's prefix.
INSTALLED = f"share/{_distribution.DISTRIBUTION}/examples"
#: Modules a trial gets from Stratus itself (the harness, the Determined and NNI stand-ins).
PROVIDED = {"stratus", "determined", "nni"}
#: Module names that are not their distribution's name.
DISTRIBUTIONS = {"sklearn": "scikit-learn"}
#: The `examples` extra's requirements when the CLI is not installed (a checkout).
EXAMPLES_EXTRA = ("torch==2.13.0", "scikit-learn>=1.5")
#: The repository this `det` runs from, when it runs from one (an editable install, `python -m det`).
CHECKOUT = Path(__file__).resolve().parents[1]
#: The widest description `det example list` shows.
SUMMARY_WIDTH = 90


@dataclass(frozen=True)
class Example:
    name: str
    #: Each file's path inside the example (`train.py`, `.detignore`) and where it lies now.
    files: Mapping[str, Path]

    @property
    def summary(self) -> str:
        """The first sentence of its README's first paragraph, cut at a clause to fit a table."""
        readme = self.files.get("README.md")
        text = readme.read_text(errors="replace") if readme else ""
        paragraph = " ".join(next((p for p in _paragraphs(text) if not p.startswith("#")), "").split())
        sentence = re.split(r"(?<=\.)\s", paragraph, maxsplit=1)[0].rstrip(".")
        return _shorten(sentence, SUMMARY_WIDTH)

    @property
    def config(self) -> str | None:
        """The config its README creates it with (`det experiment create const.yaml .`), else its first
        YAML file."""
        readme = self.files.get("README.md")
        found = re.search(r"det experiment create (\S+\.ya?ml) \.", readme.read_text()) if readme else None
        if found and found.group(1) in self.files:
            return found.group(1)
        configs = sorted(n for n in self.files if "/" not in n and n.endswith((".yaml", ".yml")))
        return configs[0] if configs else None

    def imports(self) -> set[str]:
        """The top-level modules its Python files import, but its own."""
        names: set[str] = set()
        for name, path in self.files.items():
            if not name.endswith(".py"):
                continue
            for node in ast.walk(ast.parse(path.read_bytes(), name)):
                if isinstance(node, ast.Import):
                    names |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
        own = {name.split("/")[0].removesuffix(".py") for name in self.files}
        return names - own


Finder = Callable[[], dict[str, Example]]


def add_parsers(commands: Subcommands) -> None:
    example = commands.add_parser(
        "example", aliases=["examples"], help="the examples that come with Stratus: list them, copy one"
    )
    sub = example.add_subparsers(title="example commands", metavar="COMMAND")
    example.set_defaults(command=list_examples)  # `det example` alone lists them
    sub.add_parser("list", aliases=["ls"], help="list the examples").set_defaults(command=list_examples)
    copy = sub.add_parser("copy", aliases=["cp"], help="copy an example into a folder, to run or change it")
    copy.add_argument("name", metavar="NAME", help="the example (`det example list` names them)")
    copy.add_argument("directory", nargs="?", type=Path, metavar="DIR", help="where to (default: ./NAME)")
    copy.set_defaults(command=copy_example)


def find_examples(
    checkout: Path | None = CHECKOUT, dist: metadata.Distribution | None = None
) -> dict[str, Example]:
    """The examples by name: those of `checkout` (the repository `det` runs from, if it does), else
    the copies installed with the distribution (`dist`, else the installed one); empty if neither."""
    if checkout is not None and (checkout / "pyproject.toml").is_file() and (checkout / "examples").is_dir():
        found = [
            (p.relative_to(checkout / "examples").as_posix(), p)
            for p in sorted((checkout / "examples").rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
        ]
    else:
        found = [(name, Path(path)) for name, path in _distribution.installed_files(INSTALLED, dist)]
    examples: dict[str, dict[str, Path]] = {}
    for relative, path in found:
        name, _, inside = relative.partition("/")
        if inside:
            examples.setdefault(name, {})[inside] = path
    return {name: Example(name, dict(sorted(files.items()))) for name, files in sorted(examples.items())}


def list_examples(args: argparse.Namespace, rt: Runtime, *, find: Finder = find_examples) -> int:
    examples = _all(find)
    rows = [[e.name, e.config or "", e.summary] for e in examples.values()]
    rt.say(table(["Name", "Config", "Description"], rows))
    rt.note("Copy one with `det example copy NAME [DIR]`; it prints the command that runs it.")
    return 0


def copy_example(args: argparse.Namespace, rt: Runtime, *, find: Finder = find_examples) -> int:
    examples = _all(find)
    example = examples.get(args.name)
    if example is None:
        raise UsageError(
            f"there is no example named {args.name!r}; pass one of {', '.join(examples)} "
            "(`det example list` describes them)"
        )
    target: Path = args.directory if args.directory is not None else Path(example.name)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UsageError(
            f"{target} already exists and is not an empty folder; name another one: "
            f"det example copy {example.name} DIR"
        )
    for inside, source in example.files.items():
        place = target.joinpath(*inside.split("/"))
        place.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, place)
    rt.say(f"Copied example {example.name} into {_shown(target)}/ ({plural(len(example.files), 'file')})")
    _next_steps(rt, example, target)
    return 0


def _next_steps(rt: Runtime, example: Example, target: Path) -> None:
    folder = shlex.quote(_shown(target))
    rt.say("Run it on the local stack (`det deploy local up` starts one, unless it runs already):")
    if example.config is None:
        rt.say(f"  det experiment create CONFIG {folder} -f")
    else:
        rt.say(f"  det experiment create {shlex.quote(_shown(target / example.config))} {folder} -f")
    missing = sorted(
        m
        for m in example.imports() - PROVIDED - set(sys.stdlib_module_names) - {"__future__"}
        if importlib.util.find_spec(m) is None
    )
    if missing:
        wanted = _requirements(missing)
        rt.note(
            f"Its trials import {', '.join(missing)}, which this Python ({sys.executable}) lacks, and the "
            f"local stack runs them here: {shlex.quote(sys.executable)} -m pip install "
            + " ".join(shlex.quote(r) for r in wanted)
        )


def _requirements(modules: list[str]) -> list[str]:
    """What to pip install for `modules`: the `examples` extra's pin where it names one (torch is
    pinned), else the module's distribution."""
    declared = _distribution.extra_requirements("examples", EXAMPLES_EXTRA)
    wanted = []
    for module in modules:
        distribution = DISTRIBUTIONS.get(module, module)
        pinned = [
            r for r in declared if _norm(re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0]) == _norm(distribution)
        ]
        wanted.append(pinned[0] if pinned else distribution)
    return wanted


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _all(find: Finder) -> dict[str, Example]:
    examples = find()
    if not examples:
        raise UsageError(
            f"no examples are installed with this CLI (looked for {INSTALLED} of the distribution "
            f"{_distribution.DISTRIBUTION}); reinstall it with `pip install` from the Stratus repository"
        )
    return examples


def _shown(path: Path) -> str:
    """`path` relative to the current folder when it lies below it, else absolute."""
    relative = os.path.relpath(path.absolute())
    return relative if not relative.startswith("..") else str(path.absolute())


def _shorten(text: str, width: int) -> str:
    """`text`, or its head up to the last clause break (`: `, `, `, ` (`) outside backquotes and
    parentheses that fits `width`, else up to a word, with `…`."""
    if len(text) <= width:
        return text
    breaks = [m.start() for m in re.finditer(r": |, | \(", text[:width]) if _closed(text[: m.start()])]
    if breaks and breaks[-1] > width // 3:
        return text[: breaks[-1]]
    return text[: width - 1].rsplit(" ", 1)[0] + "…"


def _closed(head: str) -> bool:
    """No backquote or parenthesis left open in `head`."""
    return head.count("`") % 2 == 0 and head.count("(") == head.count(")")


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
