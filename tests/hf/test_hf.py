"""Hugging Face config.json files as model specs (meshtune.model.hf; issue 9 item 5, issue 6 item
9).

The configs under tests/hf/configs/ are written by hand from public hyperparameters (see the
README there). Those of shipped models must give exactly the shipped TOMLs' FC layers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from meshtune.catalog import load_model
from meshtune.cli import app
from meshtune.errors import SpecError, printable
from meshtune.model.hf import MAX_CONFIG_BYTES, read_hf_config, spec_from_config, spec_toml
from meshtune.model.layers import fc_layers

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

CONFIGS = Path(__file__).resolve().parent / "configs"

# config folder -> shipped catalog model with the same FC layers
SHIPPED = {
    "llama2-70b": "llama2-70b",
    "llama3-70b": "llama3-70b",
    "llama3.1-405b": "llama3-405b",
    "gpt3-175b": "gpt3",
    "mt-nlg-530b": "megatron-nlg",
    "opt-175b": "opt-175b",
    "bloom-176b": "bloom-176b",
}

# config folder -> (family, layers, hidden, heads, head_dim, kv_heads, ffn_hidden, mlp, seq_len),
# worked by hand from the public hyperparameters.
EXPECTED = {
    "mistral-7b": ("Mistral", 32, 4096, 32, 128, 8, 14336, "swiglu", 32768),
    "qwen2-7b": ("Qwen2", 28, 3584, 28, 128, 4, 18944, "swiglu", 131072),
    "gemma-7b": ("Gemma", 28, 3072, 16, 256, 16, 24576, "swiglu", 8192),
    "gpt2": ("GPT-2", 12, 768, 12, 64, 12, 3072, "gelu", 1024),
    "gpt-neox-20b": ("GPT-NeoX", 44, 6144, 64, 96, 64, 24576, "gelu", 2048),
    "falcon-40b": ("Falcon", 60, 8192, 128, 64, 8, 32768, "gelu", 2048),
    "falcon-7b-rw": ("Falcon", 32, 4544, 71, 64, 1, 18176, "gelu", 2048),
    "bloom-176b": ("BLOOM", 70, 14336, 112, 128, 112, 57344, "gelu", 2048),
    "opt-175b": ("OPT", 96, 12288, 96, 128, 96, 49152, "gelu", 2048),
    "llama2-70b": ("Llama", 80, 8192, 64, 128, 8, 28672, "swiglu", 4096),
}


def test_every_config_folder_is_covered() -> None:
    folders = {p.name for p in CONFIGS.iterdir() if p.is_dir()}
    dense = {f for f in folders if read_hf_config(CONFIGS / f).spec.moe is None}
    assert dense == set(SHIPPED) | set(EXPECTED)  # MoE configs: test_hf_moe.py
    families = {read_hf_config(CONFIGS / f).family for f in dense}
    assert len(families) >= 6, families


@pytest.mark.parametrize("folder", sorted(EXPECTED))
def test_config_gives_the_hand_worked_spec(folder: str) -> None:
    got = read_hf_config(CONFIGS / folder)
    spec = got.spec
    values = (
        got.family,
        spec.blocks,
        spec.hidden,
        spec.heads,
        spec.head_dim,
        spec.kv_heads,
        spec.ffn_hidden,
        spec.mlp,
        spec.seq_len,
    )
    assert values == EXPECTED[folder]
    assert spec.name == folder


@pytest.mark.parametrize("folder", sorted(SHIPPED))
def test_config_of_a_shipped_model_gives_its_fc_layers(folder: str) -> None:
    imported = load_model(CONFIGS / folder / "config.json")
    shipped = load_model(SHIPPED[folder])
    assert imported.blocks == shipped.blocks
    for batch, seq in ((1, 2048), (128, 4096)):
        assert fc_layers(imported, batch, seq) == fc_layers(shipped, batch, seq)


def test_provenance_names_the_key_of_every_field() -> None:
    got = read_hf_config(CONFIGS / "gpt3-175b")
    assert got.provenance["blocks"] == "config key 'n_layer'"
    assert got.provenance["hidden"] == "config key 'n_embd'"
    assert got.provenance["seq_len"] == "config key 'n_positions'"
    assert got.provenance["ffn_hidden"] == "derived: 4 × hidden (the family's MLP ratio)"
    assert got.provenance["head_dim"] == "derived: hidden / heads"
    assert got.provenance["mlp"].startswith("GPT-2 family: one up projection")
    llama = read_hf_config(CONFIGS / "llama2-70b")
    assert llama.provenance["kv_heads"] == "config key 'num_key_value_heads'"
    assert llama.spec.display_name == "meta-llama/Llama-2-70b-hf"
    assert llama.provenance["display_name"] == "config key '_name_or_path'"
    falcon = read_hf_config(CONFIGS / "falcon-7b-rw")
    assert falcon.provenance["kv_heads"] == "derived: 1 (multi_query: true)"


def test_architectures_name_the_family_when_model_type_is_absent() -> None:
    config = {"architectures": ["OPTForCausalLM"], "num_hidden_layers": 2, "hidden_size": 64}
    config |= {"num_attention_heads": 4, "ffn_dim": 256, "vocab_size": 100}
    config |= {"max_position_embeddings": 128}
    got = spec_from_config(config, name="tiny", source="tiny.json")
    assert (got.family, got.spec.ffn_hidden, got.spec.head_dim) == ("OPT", 256, 16)


def _error(config: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as info:
        spec_from_config(config, name="x", source="x.json")
    return str(info.value)


def test_unknown_architecture_names_the_supported_ones() -> None:
    message = _error({"model_type": "mamba", "hidden_size": 768})
    assert message.startswith("x.json: unknown architecture model_type 'mamba'; supported")
    assert "llama" in message
    assert "gpt_neox" in message
    message = _error({"architectures": ["MambaForCausalLM"]})
    assert "unknown architecture architectures ['MambaForCausalLM']" in message


def test_missing_keys_are_all_named_in_one_line() -> None:
    message = _error({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32})
    assert message == (
        "x.json: Llama config is missing 'num_hidden_layers' (blocks), "
        "'intermediate_size' (ffn_hidden), 'vocab_size' (vocab), "
        "'max_position_embeddings' (seq_len)"
    )
    message = _error({"model_type": "bloom", "hidden_size": 64, "vocab_size": 9})
    assert (
        message == "x.json: BLOOM config is missing 'n_layer' or 'num_hidden_layers' (blocks), "
        "'n_head' or 'num_attention_heads' (heads)"
    )


@pytest.mark.parametrize("bad", ["8192", 8192.0, True])
def test_integers_must_be_integers(bad: object) -> None:
    config = json.loads((CONFIGS / "mistral-7b" / "config.json").read_text())
    config["hidden_size"] = bad
    assert _error(config) == f"x.json: 'hidden_size' must be an integer, got {json.dumps(bad)}"


def test_a_spec_that_does_not_validate_names_the_field() -> None:
    config = json.loads((CONFIGS / "mistral-7b" / "config.json").read_text())
    config["num_key_value_heads"] = 5
    assert "kv_heads (5) must divide heads (32)" in _error(config)
    config["num_key_value_heads"] = 0
    assert "field 'kv_heads'" in _error(config)


def test_hidden_not_divisible_by_heads_without_head_dim() -> None:
    config = json.loads((CONFIGS / "gpt2" / "config.json").read_text())
    config["n_head"] = 7
    assert "hidden size 768 is not a multiple of 7 heads" in _error(config)


def test_falcon_new_decoder_needs_num_kv_heads() -> None:
    config = json.loads((CONFIGS / "falcon-40b" / "config.json").read_text())
    del config["num_kv_heads"]
    assert "needs 'num_kv_heads'" in _error(config)


def test_spec_toml_round_trips(tmp_path: Path) -> None:
    got = read_hf_config(CONFIGS / "qwen2-7b")
    path = tmp_path / "qwen2-7b.toml"
    path.write_text(spec_toml(got.spec, got.provenance), encoding="utf-8")
    text = path.read_text(encoding="utf-8")
    assert "#   kv_heads      <- config key 'num_key_value_heads'" in text
    assert load_model(path) == got.spec


# ---------------------------------------------------------------- load_model on paths


def test_load_model_reads_a_folder_and_a_file() -> None:
    folder = load_model(CONFIGS / "gemma-7b")
    file = load_model(str(CONFIGS / "gemma-7b" / "config.json"))
    assert folder.model_dump(exclude={"source"}) == file.model_dump(exclude={"source"})
    assert folder.name == "gemma-7b"
    assert folder.source == (
        f"Hugging Face config.json (model_type gemma) {CONFIGS / 'gemma-7b'}: "
        "blocks<-num_hidden_layers, hidden<-hidden_size, heads<-num_attention_heads, "
        "head_dim<-head_dim, kv_heads<-num_key_value_heads, ffn_hidden<-intermediate_size, "
        "vocab<-vocab_size, seq_len<-max_position_embeddings; mlp swiglu (Gemma family)"
    )


def test_load_model_bare_json_name_is_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.json").write_text(
        (CONFIGS / "gpt2" / "config.json").read_text(), encoding="utf-8"
    )
    assert load_model("tiny.json").name == "tiny"
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt2" / "config.json").write_text(
        (CONFIGS / "gpt2" / "config.json").read_text(), encoding="utf-8"
    )
    assert load_model("gpt2").name == "gpt2"  # a folder with the name of no catalog model


def test_a_key_given_twice_is_refused_naming_it(tmp_path: Path) -> None:
    text = (Path(__file__).parent / "configs" / "bloom-176b" / "config.json").read_text()
    path = tmp_path / "config.json"
    path.write_text(text.replace("{", '{"n_layer": 7, ', 1), encoding="utf-8")
    for command in (["models", "import", str(path)], ["plan", str(path), "-n", "64"]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2, result.output
        assert result.output == (
            f"meshtune: error: {path}: invalid JSON (key 'n_layer' appears twice in one object); "
            "expected a Hugging Face config.json\n"
        )


def test_load_model_errors_say_what_was_expected(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"folder has no config\.json; expected a model TOML"):
        load_model(tmp_path)
    plan = Path(__file__).resolve().parents[2] / "plans" / "gpt3-256.json"
    with pytest.raises(SpecError, match="neither 'model_type' nor 'architectures'"):
        load_model(plan)
    binary = tmp_path / "model.toml"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(SpecError, match=r"model\.toml: not UTF-8 text \(byte 0 is 0x89\)"):
        load_model(binary)
    latin = tmp_path / "latin.toml"
    latin.write_bytes("display_name = 'caf\xe9'\n".encode("latin-1"))
    with pytest.raises(SpecError, match=r"latin\.toml: not UTF-8 text"):
        load_model(latin)
    (tmp_path / "list.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(SpecError, match="top level is not a JSON object; expected a Hugging"):
        load_model(tmp_path / "list.json")
    (tmp_path / "bad.json").write_text('{"model_type": ', encoding="utf-8")
    with pytest.raises(SpecError, match=r"bad.json:1: invalid JSON"):
        load_model(tmp_path / "bad.json")
    (tmp_path / "huge.json").write_text('{"n": ' + "9" * 5000 + "}", encoding="utf-8")
    with pytest.raises(SpecError, match="out-of-range values or nesting"):
        load_model(tmp_path / "huge.json")
    (tmp_path / "deep.json").write_text("[" * 100_000, encoding="utf-8")
    with pytest.raises(SpecError, match=r"deep\.json"):
        load_model(tmp_path / "deep.json")


# ---------------------------------------------------------------- CLI


def test_plan_accepts_a_config_json(runner: CliRunner) -> None:
    config = str(CONFIGS / "gpt3-175b" / "config.json")
    got = runner.invoke(app, ["plan", config, "--chips", "256", "--json"])
    assert got.exit_code == 0, got.output
    shipped = runner.invoke(app, ["plan", "gpt3", "--chips", "256", "--json"])
    a, b = json.loads(got.stdout), json.loads(shipped.stdout)
    assert a["layers"] == b["layers"]
    assert a["inputs"]["model"]["name"] == "gpt3-175b"
    assert "blocks<-n_layer, hidden<-n_embd" in a["inputs"]["model"]["source"]  # provenance


def test_plan_of_a_folder_without_config_is_one_line(runner: CliRunner, tmp_path: Path) -> None:
    got = runner.invoke(app, ["plan", str(tmp_path), "--chips", "16"])
    assert got.exit_code == 2
    assert got.stderr.count("\n") == 1
    assert "folder has no config.json" in got.stderr


def test_import_model_writes_a_toml_that_loads(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "falcon40.toml"
    got = runner.invoke(app, ["models", "import", str(CONFIGS / "falcon-40b"), "-o", str(out)])
    assert got.exit_code == 0, got.output
    assert "num_kv_heads" in got.stdout
    assert f"wrote {out}" in got.stdout
    spec = load_model(out)
    assert (spec.name, spec.kv_heads, spec.ffn_hidden) == ("falcon40", 8, 32768)
    again = runner.invoke(app, ["models", "import", str(CONFIGS / "falcon-40b"), "-o", str(out)])
    assert again.exit_code == 2
    assert "already exists" in again.stderr


def test_import_model_to_stdout(runner: CliRunner) -> None:
    got = runner.invoke(app, ["models", "import", str(CONFIGS / "gpt2" / "config.json")])
    assert got.exit_code == 0, got.output
    assert got.stdout.startswith("# gpt2: written by meshtune")
    assert "hidden = 768\n" in got.stdout
    assert "config key 'n_embd'" in got.stderr


def test_import_model_unknown_architecture_is_one_line(runner: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "t5"}', encoding="utf-8")
    got = runner.invoke(app, ["models", "import", str(tmp_path)])
    assert got.exit_code == 2
    lines = got.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("meshtune: error: ")
    assert "unknown architecture model_type 't5'" in lines[0]


HOSTILE_NAME = 'evil"\n[extra]\nkey = 1\r\x00\x1b[31m\ud800 \u2028 ×'


def test_hostile_name_or_path_writes_a_toml_that_loads_and_round_trips(
    runner: CliRunner, tmp_path: Path
) -> None:
    config = json.loads((CONFIGS / "gpt2" / "config.json").read_text(encoding="utf-8"))
    config["_name_or_path"] = HOSTILE_NAME
    folder = tmp_path / "hostile\nfolder"  # the path lands in the header comment too
    folder.mkdir()
    # JSON escapes the surrogate: "\ud800" in the file, a lone surrogate once parsed
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    out = tmp_path / "hostile.toml"
    got = runner.invoke(app, ["models", "import", str(folder), "-o", str(out)])
    assert got.exit_code == 0, got.output
    text = out.read_text(encoding="utf-8")
    assert all(line.startswith("# ") for line in text.splitlines()[:3])
    data = tomllib.loads(text)
    assert "extra" not in data and "key" not in data
    assert data["display_name"] == printable(HOSTILE_NAME)
    spec = load_model(out)
    assert spec == read_hf_config(folder, name="hostile").spec
    assert spec_toml(spec) == spec_toml(load_model(out))  # round trips
    assert "\x1b" not in got.stdout and "\\x1b[31m" in got.stdout  # the table shows it escaped


def test_import_model_dash_o_is_stdout_with_the_table_on_stderr(runner: CliRunner) -> None:
    got = runner.invoke(app, ["models", "import", str(CONFIGS / "gpt2"), "-o", "-"])
    assert got.exit_code == 0, got.output
    assert tomllib.loads(got.stdout)["hidden"] == 768  # the TOML alone: no table, no "wrote -"
    assert "config key 'n_embd'" in got.stderr and "wrote" not in got.output


def test_config_over_the_cap_is_one_line(tmp_path: Path) -> None:
    big = tmp_path / "config.json"
    with big.open("wb") as handle:
        handle.truncate(MAX_CONFIG_BYTES + 1)
    with pytest.raises(SpecError) as info:
        load_model(big)
    assert str(info.value) == (
        f"{big}: larger than the 4 MiB input limit; expected a Hugging Face config.json"
    )
