"""Reading config YAML: YAML 1.2 scalars (as Determined reads them), syntax errors with positions."""

from __future__ import annotations

import pytest

from chalicelib.config import ConfigInvalidError, load_yaml_config, parse_yaml_config


def yaml_problems(text: str) -> list[str]:
    with pytest.raises(ConfigInvalidError) as info:
        load_yaml_config(text)
    return [str(p) for p in info.value.problems]


def test_syntax_error_names_line_and_column() -> None:
    text = "entrypoint: python3 train.py\nsearcher:\n  name: single\n   metric: loss\n"
    [problem] = yaml_problems(text)
    assert problem.startswith("<yaml>: line 4, column 10: ")
    assert "mapping values are not allowed here" in problem


def test_unclosed_flow_mapping() -> None:
    [problem] = yaml_problems("searcher: {name: single\n")
    assert problem.startswith("<yaml>: line 2, column 1: ")


def test_tab_indentation() -> None:
    [problem] = yaml_problems("searcher:\n\tname: single\n")
    assert problem.startswith("<yaml>: line 2, column 1: ")


def test_top_level_must_be_a_mapping() -> None:
    assert yaml_problems("- a\n- b\n") == [
        "<yaml>: the top level must be a mapping of config fields, got a list"
    ]
    assert yaml_problems("just text") == [
        '<yaml>: the top level must be a mapping of config fields, got "just text"'
    ]


def test_empty_document() -> None:
    assert yaml_problems("") == ["<yaml>: the document is empty; expected a mapping of config fields"]
    assert yaml_problems("# only a comment\n") == [
        "<yaml>: the document is empty; expected a mapping of config fields"
    ]


def test_duplicate_keys_are_errors() -> None:
    text = "searcher: {name: single}\nentrypoint: a\nsearcher: {name: grid}\n"
    assert yaml_problems(text) == ['<yaml>: line 3, column 1: duplicate key "searcher"']


def test_merge_keys_still_work() -> None:
    text = "base: &b {a: 1, b: 2}\ndata:\n  <<: *b\n  b: 3\n"
    assert load_yaml_config(text)["data"] == {"a": 1, "b": 3}


def test_yaml_1_2_scalars() -> None:
    data = load_yaml_config(
        "a: 1e-4\nb: 1.5e3\nc: on\nd: yes\ne: 2024-01-01\nf: 010\ng: 0x1F\nh: 0o17\n"
        "i: true\nj: False\nk: .inf\nl: -7\nm: 3.0\nn: ~\no: '1e-4'\np: 1_000\n"
    )
    assert data == {
        "a": 1e-4,
        "b": 1500.0,
        "c": "on",
        "d": "yes",
        "e": "2024-01-01",
        "f": 10,
        "g": 31,
        "h": 15,
        "i": True,
        "j": False,
        "k": float("inf"),
        "l": -7,
        "m": 3.0,
        "n": None,
        "o": "1e-4",
        "p": "1_000",
    }
    assert isinstance(data["f"], int)
    assert isinstance(data["a"], float)


def test_scientific_notation_hyperparameters_parse() -> None:
    text = """
entrypoint: python3 train.py
hyperparameters:
  lr: {type: double, minval: 1e-5, maxval: 1e-2}
searcher: {name: random, metric: loss, max_trials: 2}
"""
    config = parse_yaml_config(text).config
    assert config.model_dump(mode="json")["hyperparameters"]["lr"]["minval"] == 1e-5


def test_values_json_cannot_hold_are_refused() -> None:
    assert yaml_problems("data:\n  when: !!timestamp 2024-01-01\n") == [
        "data.when: only plain YAML values are supported, got a date"
    ]
    assert yaml_problems("data:\n  blob: !!binary aGVsbG8=\n") == [
        "data.blob: only plain YAML values are supported, got binary data"
    ]


def test_self_referencing_anchor() -> None:
    assert yaml_problems("data: &x\n  - 1\n  - *x\n") == ["data[1]: refers to itself"]


def test_unsafe_tags_are_refused() -> None:
    [problem] = yaml_problems("data: !!python/object/apply:os.system ['true']\n")
    assert problem.startswith("<yaml>: line 1, column 7: ")


def test_parse_yaml_config_reports_schema_problems() -> None:
    with pytest.raises(ConfigInvalidError) as info:
        parse_yaml_config("entrypoint: a\nserhcer: {name: single, metric: m}\n")
    assert [str(p) for p in info.value.problems] == [
        "searcher: required",
        'serhcer: unknown field "serhcer"; did you mean "searcher"?',
    ]


def test_an_alias_bomb_is_refused_with_the_bound() -> None:
    lines = ["a: &a [" + ", ".join(['"lol"'] * 9) + "]"]
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{previous}"] * 9) + "]")
    with pytest.raises(ConfigInvalidError, match="expands to more than 100,000 values through aliases"):
        load_yaml_config("\n".join(lines))
