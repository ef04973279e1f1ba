"""Model specs, hardware profiles and their catalogs (meshtune.specs, meshtune._toml)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from meshtune.errors import MeshtuneError, ProfileError, SpecError
from meshtune.specs import (
    CollectiveKind,
    HardwareProfile,
    ModelSpec,
    catalog_dir,
    catalog_names,
    load_model,
    load_profile,
)

GPT3_FIELDS: dict[str, Any] = {
    "display_name": "GPT-3 175B",
    "source": "Brown et al. 2020",
    "blocks": 96,
    "hidden": 12288,
    "heads": 96,
    "head_dim": 128,
    "kv_heads": 96,
    "ffn_hidden": 49152,
    "mlp": "gelu",
    "vocab": 50257,
    "seq_len": 2048,
}


def toml_text(data: dict[str, Any], prefix: str = "") -> str:
    """A minimal TOML writer: scalars and lists first, then tables with dotted headers."""
    lines = [f"{k} = {json.dumps(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for key, value in data.items():
        if isinstance(value, dict):
            header = f"{prefix}{key}"
            lines.append(f"\n[{header}]")
            lines.append(toml_text(value, prefix=f"{header}."))
    return "\n".join(lines) + "\n"


def profile_fields(tpuv4: HardwareProfile, **changes: Any) -> dict[str, Any]:
    data = tpuv4.model_dump(mode="json", exclude={"name", "calibration"}, exclude_none=True)
    data.update(changes)
    return data


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(toml_text(data), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- shipped catalog


def test_catalogs_are_not_empty() -> None:
    assert "gpt3" in catalog_names("models")
    assert "megatron-nlg" in catalog_names("models")
    assert "tpuv4" in catalog_names("profiles")


@pytest.mark.parametrize("name", catalog_names("models"))
def test_every_shipped_model_loads(name: str) -> None:
    spec = load_model(name)
    assert spec.name == name
    assert spec.source.strip()
    assert spec.heads % spec.kv_heads == 0
    # loading by path gives the same spec
    assert load_model(catalog_dir("models") / f"{name}.toml") == spec


@pytest.mark.parametrize("name", catalog_names("profiles"))
def test_every_shipped_profile_loads(name: str) -> None:
    profile = load_profile(name)
    assert profile.name == name
    assert profile.sources
    assert 0 < profile.effective_flops_per_s <= profile.peak_flops_per_s
    for op in CollectiveKind:
        for axis in (0, 1):
            assert profile.link(op, axis).bw_bytes_per_s > 0
    assert load_profile(catalog_dir("profiles") / f"{name}.toml") == profile


def test_gpt3_matches_the_paper(gpt3: ModelSpec) -> None:
    # MeshSlice §5.1.1 / Brown et al. Table 2.1: 96 layers, h = 12288 = 96 heads × 128.
    assert (gpt3.blocks, gpt3.hidden, gpt3.heads, gpt3.head_dim) == (96, 12288, 96, 128)
    assert gpt3.ffn_hidden == 4 * gpt3.hidden
    assert gpt3.seq_len == 2048


# design.md "Facts to build on": (layers, hidden, heads, head_dim, kv_heads, ffn, mlp)
PUBLISHED = {
    "gpt3": (96, 12288, 96, 128, 96, 4 * 12288, "gelu"),
    "megatron-nlg": (105, 20480, 128, 160, 128, 4 * 20480, "gelu"),
    "llama2-70b": (80, 8192, 64, 128, 8, 28672, "swiglu"),
    "llama3-70b": (80, 8192, 64, 128, 8, 28672, "swiglu"),
    "llama3-405b": (126, 16384, 128, 128, 8, 53248, "swiglu"),
    "opt-175b": (96, 12288, 96, 128, 96, 4 * 12288, "gelu"),
    "bloom-176b": (70, 14336, 112, 128, 112, 57344, "gelu"),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_shipped_models_match_published_hyperparameters(name: str) -> None:
    m = load_model(name)
    got = (m.blocks, m.hidden, m.heads, m.head_dim, m.kv_heads, m.ffn_hidden, m.mlp)
    assert got == PUBLISHED[name]
    assert m.heads * m.head_dim == m.hidden


def test_tpuv4_effective_flops_is_242_tebiflops(tpuv4: HardwareProfile) -> None:
    # design.md and the file's own comment: "242 * 1024**4" FLOP/s (the artifact's constant).
    assert tpuv4.effective_flops_per_s == 242 * 1024**4


def test_tpuv4_matches_the_artifact(tpuv4: HardwareProfile) -> None:
    # design.md: constants of the paper's public artifact (Autotuner.py); §5.1.1: 272 TFLOPS peak.
    assert tpuv4.peak_flops_per_s == 272e12
    assert (tpuv4.bytes_per_element, tpuv4.slice_block) == (2, 8)
    ag0 = tpuv4.link(CollectiveKind.ALL_GATHER, 0)
    assert (ag0.t_launch_s, ag0.t_sync_s, ag0.bw_bytes_per_s) == (13e-6, 5e-6, 27.472e9)
    rds1 = tpuv4.link(CollectiveKind.REDUCE_SCATTER, 1)
    assert (rds1.t_launch_s, rds1.t_sync_s, rds1.bw_bytes_per_s) == (26e-6, 5e-6, 63.167e9)


# --------------------------------------------------------------------------- name = stem


def test_name_comes_from_the_stem(tmp_path: Path) -> None:
    path = write(tmp_path / "my-model.toml", GPT3_FIELDS)
    assert load_model(path).name == "my-model"
    assert load_model(str(path)).name == "my-model"


def test_name_key_in_a_model_file_is_rejected(tmp_path: Path) -> None:
    path = write(tmp_path / "m.toml", {"name": "other", **GPT3_FIELDS})
    with pytest.raises(SpecError, match=r"field 'name' is not allowed") as info:
        load_model(path)
    assert str(path) in str(info.value)


def test_name_key_in_a_profile_file_is_rejected(tmp_path: Path, tpuv4: HardwareProfile) -> None:
    path = write(tmp_path / "p.toml", {"name": "other", **profile_fields(tpuv4)})
    with pytest.raises(ProfileError, match=r"field 'name' is not allowed"):
        load_profile(path)


# --------------------------------------------------------------------------- bad files


def test_malformed_toml_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text('display_name = "x"\nblocks = 96\nhidden = \n', encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_model(path)
    message = str(info.value)
    assert message.startswith(str(path))
    assert "invalid TOML" in message
    # Python >= 3.14 (and tomli >= 2.1) give "path:3:", older tomllib "(at line 3, column ...)".
    assert re.search(rf"{re.escape(str(path))}:3:|line 3\b", message), message
    assert "\n" not in message


def test_missing_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.toml"
    with pytest.raises(SpecError, match="no such file") as info:
        load_model(path)
    assert str(path) in str(info.value)


def test_unreadable_encoding_is_a_spec_error(tmp_path: Path) -> None:
    path = tmp_path / "latin.toml"
    path.write_bytes(b'display_name = "caf\xe9"\n')
    with pytest.raises(SpecError, match="cannot read"):
        load_model(path)


@pytest.mark.parametrize(
    ("change", "field", "needle"),
    [
        ({"hiden": 1}, "hiden", "Extra inputs are not permitted"),
        ({"blocks": "ninety-six"}, "blocks", "valid integer"),
        ({"hidden": 0}, "hidden", "greater than 0"),
        ({"mlp": "relu"}, "mlp", "gelu"),
    ],
    ids=["unknown-field", "wrong-type", "not-positive", "bad-literal"],
)
def test_invalid_model_field_is_named(
    tmp_path: Path, change: dict[str, Any], field: str, needle: str
) -> None:
    path = write(tmp_path / "m.toml", {**GPT3_FIELDS, **change})
    with pytest.raises(SpecError) as info:
        load_model(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert f"field '{field}'" in message
    assert needle in message


def test_missing_model_field_is_named(tmp_path: Path) -> None:
    data = dict(GPT3_FIELDS)
    del data["ffn_hidden"]
    path = write(tmp_path / "m.toml", data)
    with pytest.raises(SpecError, match=r"field 'ffn_hidden': Field required"):
        load_model(path)


def test_kv_heads_must_divide_heads(tmp_path: Path) -> None:
    path = write(tmp_path / "m.toml", {**GPT3_FIELDS, "kv_heads": 7})
    with pytest.raises(SpecError, match=r"kv_heads \(7\) must divide heads \(96\)"):
        load_model(path)


def test_gqa_kv_heads_dividing_heads_is_accepted(tmp_path: Path) -> None:
    path = write(tmp_path / "m.toml", {**GPT3_FIELDS, "kv_heads": 8})
    assert load_model(path).kv_heads == 8


def test_profile_nested_field_error_is_named(tmp_path: Path, tpuv4: HardwareProfile) -> None:
    data = profile_fields(tpuv4)
    data["all_gather"]["axis0"]["bw_bytes_per_s"] = "fast"
    path = write(tmp_path / "p.toml", data)
    with pytest.raises(ProfileError, match=r"field 'all_gather\.axis0\.bw_bytes_per_s'"):
        load_profile(path)


def test_profile_negative_sync_is_rejected(tmp_path: Path, tpuv4: HardwareProfile) -> None:
    data = profile_fields(tpuv4)
    data["reduce_scatter"]["axis1"]["t_sync_s"] = -1e-6
    path = write(tmp_path / "p.toml", data)
    with pytest.raises(ProfileError, match=r"field 'reduce_scatter\.axis1\.t_sync_s'"):
        load_profile(path)


def test_profile_missing_table_is_named(tmp_path: Path, tpuv4: HardwareProfile) -> None:
    data = profile_fields(tpuv4)
    del data["send_recv"]
    path = write(tmp_path / "p.toml", data)
    with pytest.raises(ProfileError, match=r"field 'send_recv': Field required"):
        load_profile(path)


def test_effective_above_peak_is_rejected(tmp_path: Path, tpuv4: HardwareProfile) -> None:
    data = profile_fields(tpuv4, effective_flops_per_s=300e12)
    path = write(tmp_path / "p.toml", data)
    with pytest.raises(ProfileError, match=r"effective_flops_per_s .* exceeds peak_flops_per_s"):
        load_profile(path)


def test_effective_equal_to_peak_is_accepted(make_profile: Any) -> None:
    assert make_profile(effective_flops_per_s=2e12).effective_flops_per_s == 2e12


def test_models_are_frozen(gpt3: ModelSpec) -> None:
    with pytest.raises(ValueError, match="frozen"):
        gpt3.hidden = 1  # type: ignore[misc]


# --------------------------------------------------------------------------- catalog lookup


def test_unknown_model_lists_known_ones() -> None:
    with pytest.raises(SpecError) as info:
        load_model("gpt5")
    message = str(info.value)
    assert "unknown model 'gpt5'" in message
    for name in catalog_names("models"):
        assert name in message


def test_unknown_profile_lists_known_ones() -> None:
    with pytest.raises(ProfileError, match=r"unknown profile 'tpuv9'; known profiles: .*tpuv4"):
        load_profile("tpuv9")


def test_errors_are_meshtune_errors() -> None:
    assert issubclass(SpecError, MeshtuneError)
    assert issubclass(ProfileError, MeshtuneError)


def test_profiles_dir_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tpuv4: HardwareProfile
) -> None:
    write(tmp_path / "mylab.toml", profile_fields(tpuv4, description="my lab"))
    monkeypatch.setenv("MESHTUNE_PROFILES_DIR", str(tmp_path))
    assert catalog_dir("profiles") == tmp_path
    assert catalog_names("profiles") == ["mylab"]
    profile = load_profile("mylab")
    assert (profile.name, profile.description) == ("mylab", "my lab")
    with pytest.raises(ProfileError, match=r"unknown profile 'tpuv4'; known profiles: mylab$"):
        load_profile("tpuv4")


def test_models_dir_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "tiny.toml", GPT3_FIELDS)
    monkeypatch.setenv("MESHTUNE_MODELS_DIR", str(tmp_path))
    assert catalog_names("models") == ["tiny"]
    assert load_model("tiny").name == "tiny"


def test_missing_catalog_dir_has_no_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MESHTUNE_PROFILES_DIR", str(tmp_path / "absent"))
    assert catalog_names("profiles") == []
    with pytest.raises(ProfileError, match=r"known profiles: \(none found\)"):
        load_profile("tpuv4")


def test_relative_path_object_without_suffix_is_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A ``Path`` is a file, never a catalog name: `meshtune plan --model-file gpt3` hands the
    # library Path("gpt3") for the local file ./gpt3.
    write(tmp_path / "gpt3", {**GPT3_FIELDS, "display_name": "local file", "hidden": 4096})
    monkeypatch.chdir(tmp_path)
    spec = load_model(Path("gpt3"))
    assert spec.display_name == "local file"


# --------------------------------------------------------------------------- content hash


def test_content_hash_is_stable(tpuv4: HardwareProfile, tmp_path: Path) -> None:
    digest = tpuv4.content_hash()
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest)
    assert load_profile("tpuv4").content_hash() == digest
    assert HardwareProfile.model_validate(tpuv4.model_dump()).content_hash() == digest
    # independent of the name (file stem) and of the TOML layout (key order, comments)
    data = profile_fields(tpuv4)
    reordered = dict(reversed(list(data.items())))
    path = tmp_path / "copy.toml"
    path.write_text("# a comment\n" + toml_text(reordered), encoding="utf-8")
    assert load_profile(path).content_hash() == digest


@pytest.mark.parametrize(
    "change",
    [
        {"effective_flops_per_s": 200e12},
        {"all_gather": {"axis1": {"t_sync_s": 6e-6}}},
        {"description": "another description"},
    ],
    ids=["flops", "nested-link", "description"],
)
def test_content_hash_changes_with_a_value(tpuv4: HardwareProfile, change: dict[str, Any]) -> None:
    data = tpuv4.model_dump()
    for key, value in change.items():
        if isinstance(value, dict):
            for axis, fields in value.items():
                data[key][axis].update(fields)
        else:
            data[key] = value
    assert HardwareProfile.model_validate(data).content_hash() != tpuv4.content_hash()


def test_installed_catalog_is_found_under_sys_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A regular (non-editable) install has no source checkout beside the package; the wheel's
    # data files put the catalogs under <sys.prefix>/share/meshtune/.
    import meshtune.specs as specs_module

    gpt3_text = (catalog_dir("models") / "gpt3.toml").read_text(encoding="utf-8")
    monkeypatch.delenv("MESHTUNE_MODELS_DIR", raising=False)
    monkeypatch.setattr(specs_module, "_REPO_ROOT", tmp_path / "no-checkout")
    monkeypatch.setattr(specs_module.sys, "prefix", str(tmp_path / "prefix"))
    shared = tmp_path / "prefix" / "share" / "meshtune" / "models"
    shared.mkdir(parents=True)
    (shared / "tiny.toml").write_text(gpt3_text, encoding="utf-8")
    assert catalog_dir("models") == shared
    assert catalog_names("models") == ["tiny"]
