"""The counts the search and the replay walk one by one (blocks, experts, a token's experts) have
limits of their own far below MAX_DIMENSION (meshtune.model.spec; issue 38 item 3): a model
TOML, a config.json or a plan file over one is refused at once, naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from meshtune.catalog import catalog_dir, catalog_names, load_model
from meshtune.cli import app
from meshtune.errors import SpecError
from meshtune.model.hf import spec_from_config
from meshtune.model.spec import MAX_BLOCKS, MAX_EXPERTS, MAX_TOKEN_EXPERTS
from test_specs import GPT3_FIELDS, write

HF_CONFIGS = Path(__file__).resolve().parent / "hf" / "configs"
MIXTRAL_MOE: dict[str, Any] = {"experts": 8, "top_k": 2, "expert_ffn_hidden": 14336}


def _moe(**changes: int) -> dict[str, Any]:
    return {**GPT3_FIELDS, "moe": {**MIXTRAL_MOE, **changes}}


@pytest.mark.parametrize(
    ("fields", "field", "limit"),
    [
        ({**GPT3_FIELDS, "blocks": MAX_BLOCKS + 1}, "blocks", MAX_BLOCKS),
        (_moe(experts=MAX_EXPERTS + 1), "moe.experts", MAX_EXPERTS),
        (_moe(top_k=MAX_TOKEN_EXPERTS + 1), "moe.top_k", MAX_TOKEN_EXPERTS),
        (_moe(shared_experts=MAX_TOKEN_EXPERTS + 1), "moe.shared_experts", MAX_TOKEN_EXPERTS),
        (_moe(dense_blocks_first=MAX_BLOCKS + 1), "moe.dense_blocks_first", MAX_BLOCKS),
        (_moe(every=MAX_BLOCKS + 1), "moe.every", MAX_BLOCKS),
    ],
    ids=["blocks", "experts", "top_k", "shared_experts", "dense_blocks_first", "every"],
)
def test_a_count_over_its_limit_is_named(
    tmp_path: Path, fields: dict[str, Any], field: str, limit: int
) -> None:
    path = write(tmp_path / "m.toml", fields)
    with pytest.raises(SpecError) as info:
        load_model(path)
    assert f"field '{field}': should be less than or equal to {limit}," in str(info.value)


def test_the_limits_are_the_largest_published_models_times_a_margin(tmp_path: Path) -> None:
    at_limit = {**GPT3_FIELDS, "blocks": MAX_BLOCKS, "moe": {**MIXTRAL_MOE, "experts": MAX_EXPERTS}}
    spec = load_model(write(tmp_path / "m.toml", at_limit))
    assert (spec.blocks, spec.moe is not None and spec.moe.experts) == (2**14, 2**14)
    shipped = [load_model(catalog_dir("models") / f"{n}.toml") for n in catalog_names("models")]
    assert max(s.blocks for s in shipped) * 100 < MAX_BLOCKS
    assert max(s.moe.experts for s in shipped if s.moe) * 50 < MAX_EXPERTS


def test_a_config_json_over_a_limit_names_the_field() -> None:
    config = json.loads((HF_CONFIGS / "mistral-7b" / "config.json").read_text(encoding="utf-8"))
    config["num_hidden_layers"] = 2**24
    with pytest.raises(SpecError, match=r"field 'blocks': should be less than or equal to 16384"):
        spec_from_config(config, name="x", source="x.json")


@pytest.mark.parametrize(
    ("fields", "field"),
    [({**GPT3_FIELDS, "blocks": 2**24}, "blocks"), (_moe(experts=2**20), "moe.experts")],
    ids=["2**24-blocks", "2**20-experts"],
)
def test_plan_of_a_huge_count_is_refused_at_once(
    runner: CliRunner, tmp_path: Path, fields: dict[str, Any], field: str
) -> None:
    path = write(tmp_path / "huge.toml", fields)
    got = runner.invoke(app, ["plan", str(path), "--chips", "4096"])
    assert got.exit_code == 2
    assert got.stderr.count("\n") == 1
    assert got.stderr.startswith(f"meshtune: error: {path}: field '{field}': ")


def test_a_plan_file_recording_a_huge_count_is_refused(runner: CliRunner, tmp_path: Path) -> None:
    plan = tmp_path / "p.json"
    made = runner.invoke(app, ["plan", "mixtral-8x7b", "--chips", "64", "-o", str(plan)])
    assert made.exit_code == 0, made.output
    data = json.loads(plan.read_text(encoding="utf-8"))
    data["inputs"]["model"]["moe"]["experts"] = 2**20
    plan.write_text(json.dumps(data), encoding="utf-8")
    for command in (["verify", str(plan)], ["timeline", str(plan)], ["export", str(plan)]):
        got = runner.invoke(app, command)
        assert got.exit_code == 2, command
        assert "field 'inputs.model.moe.experts': should be less than or equal to 16384" in (
            got.stderr
        )
