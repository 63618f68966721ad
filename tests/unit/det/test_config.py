"""Reading experiment configs and `--config KEY=VALUE` overrides (det/_config.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from det._config import load_config, parse_override, read_config_file, set_nested
from det.errors import ConfigFileError, UsageError


@pytest.mark.parametrize(
    ("text", "keys", "value"),
    [
        ("resources.slots_per_trial=2", ["resources", "slots_per_trial"], 2),
        ("hyperparameters.lr=0.01", ["hyperparameters", "lr"], 0.01),
        ("searcher.smaller_is_better=false", ["searcher", "smaller_is_better"], False),
        ("name=my experiment", ["name"], "my experiment"),
        ("description='42'", ["description"], "42"),
        ("labels=[a, b]", ["labels"], ["a", "b"]),
        ("environment.environment_variables={A: 1}", ["environment", "environment_variables"], {"A": 1}),
        ("entrypoint=python3 train.py --x=1", ["entrypoint"], "python3 train.py --x=1"),
        ("max_restarts=", ["max_restarts"], None),
    ],
)
def test_parse_override_reads_values_as_yaml(text: str, keys: list[str], value: Any) -> None:
    assert parse_override(text) == (keys, value)


@pytest.mark.parametrize("text", ["novalue", "=3", "a..b=1", ".a=1", "a.=1"])
def test_parse_override_rejects_malformed_keys(text: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_override(text)
    assert text.split("=")[0] in str(info.value) or "KEY=VALUE" in str(info.value)


def test_set_nested_creates_maps_and_replaces_scalars_on_the_way() -> None:
    config: dict[str, Any] = {"searcher": {"name": "single", "max_length": 100}}

    set_nested(config, ["searcher", "max_length", "batches"], 300)
    set_nested(config, ["resources", "slots_per_trial"], 2)

    assert config == {
        "searcher": {"name": "single", "max_length": {"batches": 300}},
        "resources": {"slots_per_trial": 2},
    }


def test_load_config_applies_overrides_in_order(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("name: a\nsearcher:\n  name: single\n  max_length:\n    batches: 10\n")

    config = load_config(path, ["searcher.max_length.batches=100", "name=b", "name=c"])

    assert config == {"name": "c", "searcher": {"name": "single", "max_length": {"batches": 100}}}


def test_yaml_errors_name_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("name: a\nsearcher:\n  name: single\n   metric: x\n")

    with pytest.raises(ConfigFileError) as info:
        read_config_file(path)

    message = str(info.value)
    assert message.startswith(f"{path}, line 4, column ")
    assert message.endswith("; fix the YAML syntax")
    assert "\n" not in message


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigFileError, match=r"config file .*nope\.yaml does not exist"):
        read_config_file(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    ("text", "words"),
    [("- a\n- b\n", "holds a list at the top level"), ("just text\n", "holds a string"), ("", "is empty")],
)
def test_the_top_level_must_be_a_mapping(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)

    with pytest.raises(ConfigFileError, match=words):
        read_config_file(path)


def test_a_folder_is_not_a_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigFileError, match="is a folder"):
        read_config_file(tmp_path)


def _alias_bomb(levels: int = 9) -> str:
    lines = ["a: &a [" + ", ".join(['"lol"'] * 9) + "]"]
    previous = "a"
    for name in "bcdefghijk"[: levels - 1]:
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{previous}"] * 9) + "]")
        previous = name
    return "\n".join([*lines, "name: bomb", ""])


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("name: x\nseed: 2024-01-01\n", "seed: 2024-01-01 is read as a YAML date; quote it ('2024-01-01')"),
        ("name: x\ndata: !!binary aGVsbG8=\n", "data: !!binary values cannot be sent"),
        ("name: x\nhyperparameters: {lr: [1, !!set {a: null}]}\n", "hyperparameters.lr[1]: a YAML set"),
        ("2024-01-01: x\n", "the key datetime.date(2024, 1, 1) is read as a YAML date"),
    ],
)
def test_yaml_values_json_cannot_carry_are_one_clear_error(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigFileError) as info:
        read_config_file(path)
    assert words in str(info.value) and str(path) in str(info.value)


def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_bomb())  # 9 ** 9 = 387,420,489 strings once written out as JSON
    with pytest.raises(ConfigFileError, match=r"expands to more than 100,000 values through YAML aliases"):
        read_config_file(path)


def test_an_override_is_checked_like_the_file() -> None:
    with pytest.raises(ConfigFileError, match="--config seed: .*2024-01-01 is read as a YAML date"):
        parse_override("seed=2024-01-01")
