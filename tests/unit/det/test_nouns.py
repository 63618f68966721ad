"""`det`'s commands come from its noun modules (`det.cli.NOUNS`, each adding its own through
`det._commands`): the order `det --help` lists them, and a noun given without its verb."""

from __future__ import annotations

import argparse

import pytest

from det import cli


def _commands(parser: argparse.ArgumentParser) -> list[str]:
    """The commands of a parser, aliases left out, in the order its help lists them."""
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [choice.dest for choice in sub._choices_actions]


def test_the_noun_modules_give_dets_commands_in_determineds_order() -> None:
    parser = cli.build_parser()

    assert _commands(parser) == [
        "experiment",
        "trial",
        "job",
        "checkpoint",
        "resource-pool",
        "agent",
        "slot",
        "version",
        "master",
        "example",
        "deploy",
    ]


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["t"], "usage: det trial [-h] COMMAND ..."),
        (["checkpoint"], "usage: det checkpoint [-h] COMMAND ..."),
        (["d"], "usage: det deploy [-h] TARGET ..."),
        (["deploy", "local"], "usage: det deploy local [-h] COMMAND ..."),
        (["d", "aws"], "usage: det deploy aws [-h] COMMAND ..."),
    ],
)
def test_a_noun_without_its_verb_prints_its_help_and_exits_2(api, argv: list[str], usage: str) -> None:
    result = api.run(*argv)

    assert result.code == 2
    assert result.out == ""
    assert result.err.splitlines()[0] == usage
    assert api.requests == []


def test_every_experiment_verb_joins_in_the_help_order() -> None:
    (experiment,) = (a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    commands = _commands(experiment.choices["experiment"])

    assert commands[:9] == [
        "create",
        "list",
        "describe",
        "activate",
        "archive",
        "unarchive",
        "pause",
        "cancel",
        "kill",
    ]
    assert commands[-3:] == ["config", "logs", "download"]
    assert len(commands) == len(set(commands)) == 20
