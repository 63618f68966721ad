"""Errors raised while reading an experiment config.

A config is checked as a whole: every problem found is reported at once, each with the dotted path of
the offending field (`hyperparameters.lr.minval`, `entrypoint[1]`) and a short human phrase. The HTTP
API returns the problems as `{"path": ..., "message": ...}` objects; the CLI prints `render()`.

These errors are a branch of the control plane's one tree (`chalicelib.errors`): a config error is a
400 `ConfigInvalid` answer wherever it is raised, with no translation on the way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from chalicelib.errors import BadRequestError

__all__ = ["ConfigError", "ConfigInvalidError", "ConfigProblem"]


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with a config: where (`path`) and what (`message`)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


class ConfigError(BadRequestError):
    """Base class of every error of the config package."""


class ConfigInvalidError(ConfigError):
    """The config (or its YAML text) has one or more problems; `problems` lists all of them."""

    code = "ConfigInvalid"

    def __init__(self, problems: Iterable[ConfigProblem]) -> None:
        self.problems: list[ConfigProblem] = list(problems)
        if not self.problems:
            raise ValueError("ConfigInvalidError needs at least one problem")
        super().__init__(self.summary(), problems=self.to_dicts())

    def summary(self) -> str:
        """One line: `config has 2 problems: a.b: required; c: must be ≥ 1`."""
        count = len(self.problems)
        noun = "problem" if count == 1 else "problems"
        return f"config has {count} {noun}: " + "; ".join(str(p) for p in self.problems)

    def __str__(self) -> str:
        return self.summary()

    def render(self) -> str:
        """One line per problem, `path: message`."""
        return "\n".join(str(p) for p in self.problems)

    def to_dicts(self) -> list[dict[str, str]]:
        """The problems as the HTTP API's `problems` list."""
        return [p.to_dict() for p in self.problems]
