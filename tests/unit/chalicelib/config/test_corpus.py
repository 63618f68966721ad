"""The config corpus (tests/data/config_corpus/{determined,nni}: configs written in Determined's and NNI's
shapes, each with its expectation in the folder's `expectations.yaml`) swept through the path
`det experiment create` and `POST /experiments` take: the CLI reads the file (inlining an NNI search
space file), then `services.experiments.validate` (what the API runs, `validate_only` or not).

Every config either validates (and its searcher then starts, creating trials) or is refused with a 400
whose message names the refused feature; no config may end in any other exception, which the API would
answer with a 500.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from chalicelib.config import ConfigInvalidError, parse_experiment_config
from chalicelib.domain import searchers
from chalicelib.errors import StratusError
from chalicelib.services import experiments, searching
from det._config import load_config
from stratus.contract.nni import canonical_nni_keys

CORPUS = Path(__file__).resolve().parents[3] / "data" / "config_corpus"
PROJECTS = ("determined", "nni")
CONFIG_SUFFIXES = (".yaml", ".yml")
EXPECTATIONS = "expectations.yaml"


def expectations(project: str) -> dict[str, dict[str, Any]]:
    loaded = yaml.safe_load((CORPUS / project / EXPECTATIONS).read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def corpus() -> list[Any]:
    return [
        pytest.param(CORPUS / project / name, expectation, id=f"{project}/{name}")
        for project in PROJECTS
        for name, expectation in expectations(project).items()
    ]


@pytest.mark.parametrize("project", PROJECTS)
def test_every_corpus_config_has_one_expectation_with_its_feature(project: str) -> None:
    folder = CORPUS / project
    configs = {p.name for p in folder.iterdir() if p.suffix in CONFIG_SUFFIXES and p.name != EXPECTATIONS}
    expected = expectations(project)

    assert configs == set(expected)
    for name, expectation in expected.items():
        assert expectation["feature"], name
        assert expectation["expect"] in ("valid", "refused"), name
        assert (expectation["expect"] == "refused") == bool(expectation.get("refusal")), name


@pytest.mark.parametrize(("path", "expectation"), corpus())
def test_a_corpus_config_validates_or_is_refused_naming_the_feature(
    path: Path, expectation: dict[str, Any]
) -> None:
    raw = load_config(path)

    try:
        parsed = experiments.validate(raw)
    except StratusError as error:
        assert error.status == 400 and isinstance(error, ConfigInvalidError), f"{path.name}: {error!r}"
        assert expectation["expect"] == "refused", f"{path.name} ({expectation['feature']}) refused: {error}"
        assert expectation["refusal"] in str(error), f"{path.name}: {error}"
        return

    assert expectation["expect"] == "valid", f"{path.name} ({expectation['feature']}) validated"
    config = parsed.config
    stored = config.with_service_defaults(experiment_id=7, experiment_seed=11).model_dump(mode="json")
    assert parse_experiment_config(stored).config.searcher == config.searcher  # what the service reads back
    first_trials = searchers.new_searcher(searching.search_spec(config)).initial_operations()
    assert any(isinstance(op, searchers.CreateTrial) for op in first_trials), path.name
    nni_name = canonical_nni_keys(raw).get("experimentName")
    if nni_name is not None:
        assert config.name == nni_name  # NNI's experiment name is the experiment's
