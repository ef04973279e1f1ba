"""Model specs, hardware profiles and their catalogs (meshtune.units, meshtune._toml)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from meshtune.catalog import (
    catalog_dir,
    catalog_names,
    catalog_problem,
    file_json_schema,
    load_model,
    load_profile,
)
from meshtune.errors import MeshtuneError, ProfileError, SpecError
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.spec import ModelSpec

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
    with pytest.raises(SpecError) as info:
        load_model(path)
    assert str(info.value) == f"{path}: not UTF-8 text (byte 19 is 0xe9); expected a TOML file"


def test_binary_file_is_one_line_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "blob.toml"
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(SpecError) as info:
        load_model(path)
    message = str(info.value)
    assert message.startswith(f"{path}: not UTF-8 text"), message
    assert "\n" not in message and "codec" not in message


def test_a_5000_digit_integer_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "huge.toml"
    path.write_text(f"hidden = {'9' * 5000}\n", encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_model(path)
    limit = sys.get_int_max_str_digits()
    assert str(info.value) == f"{path}: invalid TOML: an integer has more than {limit} digits"


def test_deeply_nested_toml_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "deep.toml"
    path.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n", encoding="utf-8")
    with pytest.raises(SpecError, match=r"deep\.toml: invalid TOML"):
        load_model(path)


def test_json_given_as_a_model_is_read_as_a_hugging_face_config(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"hidden_size": 4096}', encoding="utf-8")
    with pytest.raises(SpecError, match=r"config\.json: .*neither 'model_type' nor"):
        load_model(path)


def test_json_text_in_a_toml_file_says_toml_was_expected(tmp_path: Path) -> None:
    path = tmp_path / "model.toml"
    path.write_text('{"hidden_size": 4096}', encoding="utf-8")
    with pytest.raises(SpecError, match=r"invalid TOML: .*this looks like JSON; expected TOML"):
        load_model(path)


def test_a_folder_given_as_a_model_is_named_a_folder(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"folder has no config\.json; expected a model TOML"):
        load_model(tmp_path)


@pytest.mark.parametrize(
    ("change", "field", "needle"),
    [
        ({"hiden": 1}, "hiden", "unknown field; known fields: display_name, source, blocks"),
        ({"blocks": "ninety-six"}, "blocks", "should be an integer, got 'ninety-six'"),
        ({"hidden": "8192"}, "hidden", "should be an integer, got '8192'"),
        ({"hidden": 8192.0}, "hidden", "should be an integer, got 8192.0"),
        ({"hidden": True}, "hidden", "should be an integer, got True"),
        ({"hidden": 0}, "hidden", "should be greater than 0, got 0"),
        ({"hidden": 2**40 + 1}, "hidden", "less than or equal to 1099511627776, got"),
        ({"seq_len": 10**30}, "seq_len", "got an integer of 31 digits"),
        ({"mlp": "relu"}, "mlp", "should be 'gelu' or 'swiglu', got 'relu'"),
    ],
    ids=[
        "unknown-field",
        "wrong-type",
        "string-integer",
        "float-integer",
        "bool-integer",
        "not-positive",
        "above-bound",
        "huge",
        "bad-literal",
    ],
)
def test_invalid_model_field_is_named(
    tmp_path: Path, change: dict[str, Any], field: str, needle: str
) -> None:
    path = write(tmp_path / "m.toml", {**GPT3_FIELDS, **change})
    with pytest.raises(SpecError) as info:
        load_model(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert f"field '{field}': " in message
    assert needle in message
    assert "Value error" not in message and "Input should" not in message


def test_missing_model_field_is_named(tmp_path: Path) -> None:
    data = dict(GPT3_FIELDS)
    del data["ffn_hidden"]
    path = write(tmp_path / "m.toml", data)
    with pytest.raises(SpecError, match=r"field 'ffn_hidden': required, but missing$"):
        load_model(path)


def test_kv_heads_must_divide_heads(tmp_path: Path) -> None:
    path = write(tmp_path / "m.toml", {**GPT3_FIELDS, "kv_heads": 7})
    with pytest.raises(SpecError) as info:
        load_model(path)
    assert str(info.value) == (
        f"{path}: kv_heads (7) must divide heads (96) for grouped-query attention"
    )


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


@pytest.mark.parametrize(
    ("where", "value", "needle"),
    [
        (("all_gather", "axis0", "t_sync_s"), 1e300, "less than or equal to 1, got 1e+300"),
        (("send_recv", "axis1", "t_launch_s"), 2.0, "less than or equal to 1, got 2.0"),
        (("reduce_scatter", "axis0", "bw_bytes_per_s"), 1e-300, "greater than or equal to 1000"),
        (("all_gather", "axis1", "bw_bytes_per_s"), 1e16, "less than or equal to 1000000000000000"),
        (("peak_flops_per_s",), 1e19, "less than or equal to 1000000000000000000"),
        (("effective_flops_per_s",), 5e-324, "greater than or equal to 1000000"),
        (("hbm_bytes_per_s",), 1e300, "less than or equal to 1000000000000000"),
        (("memory_bytes",), 1e300, "less than or equal to 1000000000000000"),
    ],
)
def test_profile_values_out_of_plausible_range_are_named(
    tmp_path: Path, tpuv4: HardwareProfile, where: tuple[str, ...], value: float, needle: str
) -> None:
    # Issue 20 finding 8: values that validated gave inf / NaN times and "nan %" plans.
    data = profile_fields(tpuv4)
    table = data
    for key in where[:-1]:
        table = table[key]
    table[where[-1]] = value
    path = write(tmp_path / "p.toml", data)
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    message = str(info.value)
    assert message.startswith(f"{path}: field '{'.'.join(where)}': should be {needle}")
    assert "\n" not in message


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        (
            "[gemm_efficiency]\ncurve = [{flops = 5e-324, efficiency = 0.5}]",
            "field 'gemm_efficiency.curve.0.flops': should be greater than or equal to 1, "
            "got 5e-324",
        ),
        (
            "[gemm_efficiency]\ncurve = [{flops = 1e9, efficiency = 1e-9}]",
            "field 'gemm_efficiency.curve.0.efficiency': should be greater than 0.000001, "
            "got 1e-09",
        ),
        (
            "[gemm_efficiency]\noverhead_s = inf",
            "field 'gemm_efficiency.overhead_s': should be a finite number, got inf",
        ),
        (
            "[[tiers]]\nname = 'x'\nall_gather = {t_launch_s = 0.0, t_sync_s = nan, "
            "bw_bytes_per_s = 1e9}",
            "field 'tiers.0.all_gather.t_sync_s': should be a finite number, got nan",
        ),
    ],
)
def test_profile_nested_nonsense_is_named(
    tmp_path: Path, tpuv4: HardwareProfile, table: str, needle: str
) -> None:
    path = write(tmp_path / "p.toml", profile_fields(tpuv4))
    path.write_text(path.read_text(encoding="utf-8") + "\n" + table + "\n", encoding="utf-8")
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert needle in str(info.value)


def test_profile_plausible_extremes_are_accepted(make_profile: Any) -> None:
    profile = make_profile(
        peak_flops_per_s=1e18, effective_flops_per_s=1e6, hbm_bytes_per_s=1e3, memory_bytes=1e15
    )
    assert profile.effective_flops_per_s == 1e6


def test_model_widths_above_the_bound_are_one_line(tmp_path: Path) -> None:
    # Issue 20 finding 8: (heads + 2·kv_heads)·head_dim = 3·2**40 failed later, as a traceback.
    path = write(
        tmp_path / "m.toml", {**GPT3_FIELDS, "heads": 2**20, "kv_heads": 2**20, "head_dim": 2**20}
    )
    with pytest.raises(SpecError) as info:
        load_model(path)
    assert str(info.value) == (
        f"{path}: the QKV width (heads + 2·kv_heads)·head_dim is 3,298,534,883,328, above the "
        "largest model dimension 1,099,511,627,776 (2**40)"
    )
    swiglu = write(tmp_path / "s.toml", {**GPT3_FIELDS, "mlp": "swiglu", "ffn_hidden": 2**40})
    with pytest.raises(SpecError, match="the MLP up width ffn_hidden"):
        load_model(swiglu)
    fits = write(tmp_path / "f.toml", {**GPT3_FIELDS, "mlp": "swiglu", "ffn_hidden": 2**39})
    assert load_model(fits).mlp_up_width == 2**40


def test_profile_missing_table_is_named(tmp_path: Path, tpuv4: HardwareProfile) -> None:
    data = profile_fields(tpuv4)
    del data["send_recv"]
    path = write(tmp_path / "p.toml", data)
    with pytest.raises(ProfileError, match=r"field 'send_recv': required, but missing"):
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
    assert catalog_problem("profiles") == (
        f"the profiles folder {tmp_path / 'absent'} (set by $MESHTUNE_PROFILES_DIR) does not exist"
    )
    with pytest.raises(ProfileError) as info:
        load_profile("tpuv4")
    assert str(info.value) == f"unknown profile 'tpuv4': {catalog_problem('profiles')}"


def test_empty_catalog_dir_says_none_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MESHTUNE_PROFILES_DIR", str(tmp_path))
    assert catalog_problem("profiles") is None
    with pytest.raises(ProfileError, match=r"known profiles: \(none found\)$"):
        load_profile("tpuv4")


# --------------------------------------------------------------------------- int strictness


def test_integer_fields_reject_strings_floats_and_booleans(gpt3: ModelSpec) -> None:
    data = gpt3.model_dump()
    for bad in ("8192", 8192.0, True):
        with pytest.raises(ValidationError):
            ModelSpec.model_validate({**data, "hidden": bad})
    assert ModelSpec.model_validate({**data, "hidden": 8192}).hidden == 8192


def test_profile_integers_are_strict_and_bounded(make_profile: Any) -> None:
    for field, bad in [
        ("bytes_per_element", "2"),
        ("bytes_per_element", 2.0),
        ("bytes_per_element", 65),
        ("slice_block", 8.0),
        ("slice_block", 2**20 + 1),
        ("peak_flops_per_s", float("inf")),
        ("effective_flops_per_s", float("nan")),
    ]:
        with pytest.raises(ValidationError):
            make_profile(**{field: bad})


# --------------------------------------------------------------------------- schema


@pytest.mark.parametrize("doc", [ModelSpec, HardwareProfile])
def test_file_schema_describes_what_the_loader_accepts(
    doc: type[ModelSpec] | type[HardwareProfile], tmp_path: Path
) -> None:
    schema = file_json_schema(doc)
    assert "name" not in schema["properties"]
    assert "name" not in schema["required"]
    # A file built only from the schema's required fields, with values of the schema's types.
    data = {field: _example(schema, schema["properties"][field]) for field in schema["required"]}
    path = write(tmp_path / "minimal.toml", data)
    loaded = load_model(path) if doc is ModelSpec else load_profile(path)
    assert loaded.name == "minimal"
    assert set(schema["properties"]) == set(doc.model_fields) - {"name"}


def _example(schema: dict[str, Any], prop: dict[str, Any]) -> Any:
    """A value valid for the JSON-Schema property ``prop`` (its $refs resolved in ``schema``)."""
    if "$ref" in prop:
        prop = schema["$defs"][prop["$ref"].rsplit("/", 1)[-1]]
    if "enum" in prop:
        return prop["enum"][0]
    if "const" in prop:
        return prop["const"]
    kind = prop.get("type")
    if kind == "object":
        return {f: _example(schema, prop["properties"][f]) for f in prop.get("required", [])}
    if kind == "array":
        return [_example(schema, prop["items"])] * max(prop.get("minItems", 0), 1)
    if kind == "string":
        return "x" * max(prop.get("minLength", 1), 1)
    if kind in ("integer", "number"):
        low = prop.get("exclusiveMinimum", prop.get("minimum", 0))
        value = low + 1 if "exclusiveMinimum" in prop else max(low, 1)
        return int(value) if kind == "integer" else float(value)
    raise AssertionError(f"no example for {prop}")


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
    import meshtune.catalog as catalog_module

    gpt3_text = (catalog_dir("models") / "gpt3.toml").read_text(encoding="utf-8")
    monkeypatch.delenv("MESHTUNE_MODELS_DIR", raising=False)
    monkeypatch.setattr(catalog_module, "_REPO_ROOT", tmp_path / "no-checkout")
    monkeypatch.setattr(catalog_module.sys, "prefix", str(tmp_path / "prefix"))
    shared = tmp_path / "prefix" / "share" / "meshtune" / "models"
    shared.mkdir(parents=True)
    (shared / "tiny.toml").write_text(gpt3_text, encoding="utf-8")
    assert catalog_dir("models") == shared
    assert catalog_names("models") == ["tiny"]
