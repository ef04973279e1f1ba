"""The `meshtune` command through typer's CliRunner: plan, schema, models, profiles.

In this typer (>= 0.29, vendored click) the runner always captures stdout and stderr separately
(``result.stdout`` / ``result.stderr``; ``result.output`` interleaves both).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from meshtune.catalog import catalog_dir, catalog_names, load_profile
from meshtune.cli import app
from meshtune.cli._app import one_line

PLANS = Path(__file__).resolve().parents[1] / "plans"
GPT3_TOML = (catalog_dir("models") / "gpt3.toml").read_text(encoding="utf-8")
TPUV4_TOML = (catalog_dir("profiles") / "tpuv4.toml").read_text(encoding="utf-8")


def invoke(runner: CliRunner, *args: str, **kwargs: Any) -> Result:
    return runner.invoke(app, list(args), **kwargs)


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    assert result.stderr == ""
    return result


def assert_bad_input(result: Result, *needles: str) -> str:
    """Exit code 2, exactly one non-empty `meshtune: error:` line on stderr, no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.exception, result.output)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("meshtune: error: ")
    assert line[len("meshtune: error: ") :].strip()
    assert result.stdout == ""
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def plan_json(result: Result) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(ok(result).stdout)
    return data


def spec_file(folder: Path, name: str = "custom.toml", extra: str = "", **changes: Any) -> Path:
    """The shipped gpt3.toml with ``changes`` (None drops the key) and ``extra`` lines added."""
    lines = []
    for line in GPT3_TOML.splitlines():
        key = line.split("=", 1)[0].strip()
        if key in changes:
            if changes[key] is None:
                continue
            line = f"{key} = {json.dumps(changes[key])}"
        lines.append(line)
    path = folder / name
    path.write_text("\n".join(lines) + "\n" + extra, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- plan


def test_plan_gpt3(runner: CliRunner) -> None:
    result = ok(invoke(runner, "plan", "gpt3", "--chips", "256", "--mesh-only"))
    out = result.stdout
    assert "GPT-3 175B on 256 chips (tpuv4): meshslice on mesh 32x8" in out
    for name in ("qkv", "attn_out", "mlp_up", "mlp_down"):
        assert name in out
    assert "Top 5 mesh shapes" in out
    assert "32x8 ←" in out


def test_plan_json(runner: CliRunner) -> None:
    data = plan_json(invoke(runner, "plan", "gpt3", "--chips", "256", "--mesh-only", "--json"))
    assert (data["mesh"]["rows"], data["mesh"]["cols"]) == (32, 8)
    assert [layer["name"] for layer in data["layers"]] == ["qkv", "attn_out", "mlp_up", "mlp_down"]
    for layer in data["layers"]:
        assert layer["config"] in layer["config_candidates"]
        assert set(layer["dataflows"]) == {"forward", "backward_data", "backward_weight"}
        assert set(layer["dataflows"].values()) == {"OS", "LS", "RS"}
    assert 0 < data["utilization"] <= 1
    assert data["schema_version"] == 2


def test_plan_output_file_and_force(runner: CliRunner, tmp_path: Path) -> None:
    target = tmp_path / "gpt3-256.json"
    first = ok(invoke(runner, "plan", "gpt3", "--chips", "256", "--mesh-only", "-o", str(target)))
    assert f"wrote {target}" in first.stdout.replace("\n", "")
    written = target.read_bytes()
    assert json.loads(written)["mesh"] == {"rows": 32, "cols": 8, "depth": 1}

    again = invoke(runner, "plan", "gpt3", "--chips", "256", "--top", "2", "-o", str(target))
    assert_bad_input(again, str(target), "already exists", "--force")
    assert target.read_bytes() == written

    ok(invoke(runner, "plan", "gpt3", "--chips", "256", "--top", "2", "-o", str(target), "--force"))
    assert len(json.loads(target.read_bytes())["candidates"]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpt3-256.json"]


def test_plan_output_and_json_together(runner: CliRunner, tmp_path: Path) -> None:
    target = tmp_path / "p.json"
    result = ok(
        invoke(runner, "plan", "gpt3", "--chips", "64", "--mesh-only", "--json", "-o", str(target))
    )
    assert result.stdout == target.read_text(encoding="utf-8")


def test_plan_model_file(runner: CliRunner, tmp_path: Path) -> None:
    path = spec_file(tmp_path, "tiny-gpt.toml", display_name="Tiny", blocks=2)
    data = plan_json(invoke(runner, "plan", "--model-file", str(path), "--chips", "16", "--json"))
    model = data["inputs"]["model"]
    assert (model["name"], model["display_name"], model["blocks"]) == ("tiny-gpt", "Tiny", 2)


def test_plan_path_in_place_of_the_name(runner: CliRunner, tmp_path: Path) -> None:
    path = spec_file(tmp_path, "mine.toml", display_name="Mine")
    data = plan_json(invoke(runner, "plan", str(path), "--chips", "16", "--mesh-only", "--json"))
    assert data["inputs"]["model"]["name"] == "mine"


def test_plan_model_file_is_a_file_even_without_suffix(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # --model-file names a file. A local file called `gpt3` (no .toml, no slash) must be read,
    # not silently replaced by the catalog's gpt3.
    spec_file(tmp_path, "gpt3", display_name="Local GPT", hidden=4096, heads=32, kv_heads=32)
    monkeypatch.chdir(tmp_path)
    data = plan_json(
        invoke(runner, "plan", "--model-file", "gpt3", "--chips", "16", "--mesh-only", "--json")
    )
    assert data["inputs"]["model"]["display_name"] == "Local GPT"
    data = plan_json(
        invoke(runner, "plan", "--model-file", "./gpt3", "--chips", "16", "--mesh-only", "--json")
    )
    assert data["inputs"]["model"]["hidden"] == 4096


def test_plan_profile_path(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "mylab.toml"
    path.write_text(TPUV4_TOML, encoding="utf-8")
    data = plan_json(
        invoke(runner, "plan", "gpt3", "--chips", "256", "--profile", str(path), "--json")
    )
    assert data["inputs"]["profile"] == "mylab"
    default = plan_json(invoke(runner, "plan", "gpt3", "--chips", "256", "--json"))
    assert data["inputs"]["profile_hash"] == default["inputs"]["profile_hash"]


def test_plan_shapes(runner: CliRunner) -> None:
    result = ok(invoke(runner, "plan", "gpt3", "--chips", "256", "--shapes", "16x16"))
    assert "mesh 16x16" in result.stdout
    data = plan_json(
        invoke(runner, "plan", "gpt3", "--chips", "256", "--shapes", "16x16,64x4", "--json")
    )
    assert data["inputs"]["shapes"] == ["16x16", "64x4"]
    assert {(c["rows"], c["cols"]) for c in data["candidates"]} == {(16, 16), (64, 4)}


def test_plan_dataflow_ystn(runner: CliRunner) -> None:
    data = plan_json(
        invoke(runner, "plan", "gpt3", "-n", "256", "--mesh-only", "--dataflow", "ystn", "--json")
    )
    assert data["inputs"]["dataflow_mode"] == "ystn"
    assert {layer["stationary"] for layer in data["layers"]} == {"Y"}
    auto = plan_json(invoke(runner, "plan", "gpt3", "--chips", "256", "--mesh-only", "--json"))
    assert auto["layers"][3]["stationary"] == "X"
    assert auto["utilization"] > data["utilization"]


def test_plan_top(runner: CliRunner) -> None:
    data = plan_json(invoke(runner, "plan", "gpt3", "--chips", "256", "--top", "3", "--json"))
    assert len(data["candidates"]) == 3
    result = ok(invoke(runner, "plan", "gpt3", "-n", "256", "-k", "3"))
    assert "Top 3 mesh shapes" in result.stdout


def test_plan_batch_and_seq(runner: CliRunner) -> None:
    data = plan_json(
        invoke(
            runner, "plan", "gpt3", "-n", "64", "--mesh-only", "-b", "8", "--seq", "1024", "--json"
        )
    )
    assert (data["inputs"]["batch"], data["inputs"]["seq_len"]) == (8, 1024)
    assert data["layers"][0]["tokens"] == 8 * 1024


# --------------------------------------------------------------------------- other commands


@pytest.mark.parametrize(
    ("name", "title"), [("plan", "Plan"), ("model", "ModelSpec"), ("profile", "HardwareProfile")]
)
def test_schema(runner: CliRunner, name: str, title: str) -> None:
    schema = json.loads(ok(invoke(runner, "schema", name)).stdout)
    assert schema["title"] == title
    assert "properties" in schema


def test_schema_defaults_to_plan(runner: CliRunner) -> None:
    assert json.loads(ok(invoke(runner, "schema")).stdout)["title"] == "Plan"


def test_models_lists_shipped_names(runner: CliRunner) -> None:
    # an 80-column terminal (the width rich assumes when stdout is a pipe)
    out = ok(invoke(runner, "models", env={"COLUMNS": "80"})).stdout
    for name in catalog_names("models"):
        assert name in out, name


def test_models_lists_shipped_names_on_a_wide_terminal(runner: CliRunner) -> None:
    out = ok(invoke(runner, "models", env={"COLUMNS": "200"})).stdout
    for name in catalog_names("models"):
        assert name in out, name
    assert "GPT-3 175B" in out


def test_profiles_lists_shipped_names(runner: CliRunner) -> None:
    out = ok(invoke(runner, "profiles", env={"COLUMNS": "80"})).stdout
    for name in catalog_names("profiles"):
        assert name in out, name
    assert "272" in out  # peak TFLOP/s of TPUv4


def test_models_show_display_names_literally(runner: CliRunner, tmp_path: Path) -> None:
    # display names are data, not rich markup
    spec_file(tmp_path, "exp.toml", display_name="Llama [experimental] [/draft]")
    result = invoke(runner, "models", env={"MESHTUNE_MODELS_DIR": str(tmp_path), "COLUMNS": "200"})
    assert ok(result).stdout.count("Llama [experimental] [/draft]") == 1


def test_catalog_names_and_folder_are_printed_literally(runner: CliRunner, tmp_path: Path) -> None:
    folder = tmp_path / "[lab]"
    folder.mkdir()
    spec_file(folder, "[v2].toml")
    result = invoke(runner, "models", env={"MESHTUNE_MODELS_DIR": str(folder), "COLUMNS": "200"})
    out = ok(result).stdout
    assert "│ [v2] │" in out
    assert f"Modelsin{folder}" in "".join(out.split())  # the title wraps to the table width


def test_output_path_is_printed_literally(runner: CliRunner, tmp_path: Path) -> None:
    target = tmp_path / "[v1].json"
    result = ok(
        invoke(
            runner,
            "plan",
            "gpt3",
            "-n",
            "8",
            "--mesh-only",
            "-o",
            str(target),
            env={"COLUMNS": "400"},
        )
    )
    assert target.is_file()
    assert f"wrote {target}" in result.stdout


def test_no_arguments_prints_help(runner: CliRunner) -> None:
    result = invoke(runner)
    assert result.exit_code == 0
    assert "plan" in result.stdout and "schema" in result.stdout


# --------------------------------------------------------------------------- bad input

BadCase = Callable[[Path], list[str]]


def _existing_output(tmp: Path) -> list[str]:
    (tmp / "p.json").write_text("{}", encoding="utf-8")
    return ["plan", "gpt3", "--chips", "256", "-o", str(tmp / "p.json")]


def _malformed(tmp: Path) -> list[str]:
    path = tmp / "broken.toml"
    path.write_text('display_name = "x"\nblocks = 96\nhidden = \n', encoding="utf-8")
    return ["plan", "--model-file", str(path), "--chips", "256"]


BAD_INPUTS: dict[str, tuple[BadCase, tuple[str, ...]]] = {
    "unknown-model": (
        lambda t: ["plan", "gpt5", "--chips", "256"],
        ("unknown model 'gpt5'", "known models:", "gpt3", "megatron-nlg"),
    ),
    "unknown-profile": (
        lambda t: ["plan", "gpt3", "--chips", "256", "--profile", "tpuv9"],
        ("unknown profile 'tpuv9'", "tpuv4"),
    ),
    "missing-model-file": (
        lambda t: ["plan", "--model-file", str(t / "nope.toml"), "--chips", "8"],
        ("nope.toml: no such file",),
    ),
    "missing-profile-file": (
        lambda t: ["plan", "gpt3", "--chips", "8", "--profile", str(t / "nope.toml")],
        ("nope.toml: no such file",),
    ),
    "malformed-toml": (_malformed, ("broken.toml:3:", "invalid TOML")),
    "invalid-field": (
        lambda t: ["plan", str(spec_file(t, hidden=-5)), "--chips", "8"],
        ("custom.toml", "field 'hidden': should be greater than 0, got -5"),
    ),
    "unknown-field": (
        lambda t: ["plan", str(spec_file(t, extra="hidden_size = 3\n")), "--chips", "8"],
        ("field 'hidden_size': unknown field; known fields: display_name, source, blocks",),
    ),
    "missing-field": (
        lambda t: ["plan", str(spec_file(t, ffn_hidden=None)), "--chips", "8"],
        ("field 'ffn_hidden': required, but missing",),
    ),
    "kv-heads": (
        lambda t: ["plan", str(spec_file(t, kv_heads=5)), "--chips", "8"],
        ("kv_heads (5) must divide heads (96)",),
    ),
    "chips-zero": (
        lambda t: ["plan", "gpt3", "--chips", "0"],
        ("--chips", "greater than or equal to 1"),
    ),
    "chips-negative": (
        lambda t: ["plan", "gpt3", "--chips", "-4"],
        ("--chips", "greater than or equal to 1"),
    ),
    "chips-not-integer": (
        lambda t: ["plan", "gpt3", "--chips", "abc"],
        ("'--chips' / '-n': should be an integer, got 'abc'",),
    ),
    "chips-float": (
        lambda t: ["plan", "gpt3", "--chips", "2.5"],
        ("'--chips' / '-n': should be an integer, got '2.5'",),
    ),
    "chips-missing": (lambda t: ["plan", "gpt3"], ("Missing option '--chips'",)),
    "chips-infeasible": (
        lambda t: ["plan", "gpt3", "--chips", "7", "--mesh-only"],
        ("no feasible mesh shape for 7 chips", "1x7", "7x1"),
    ),
    "bad-shapes": (
        lambda t: ["plan", "gpt3", "--chips", "256", "--shapes", "16by16"],
        ("mesh shape '16by16' is not of the form ROWSxCOLS",),
    ),
    "shape-superscript": (
        lambda t: ["plan", "gpt3", "--chips", "256", "--shapes", "²x8"],
        ("²x8",),
    ),
    "shape-wrong-chips": (
        lambda t: ["plan", "gpt3", "--chips", "256", "--mesh-only", "--shapes", "16x16,16x8"],
        ("mesh shape 16x8 has 128 chips, not 256",),
    ),
    "existing-output": (_existing_output, ("p.json: already exists", "--force")),
    "output-missing-folder": (
        lambda t: ["plan", "gpt3", "--chips", "256", "-o", str(t / "absent" / "p.json")],
        ("does not exist",),
    ),
    "model-and-model-file": (
        lambda t: ["plan", "gpt3", "--model-file", str(spec_file(t)), "--chips", "8"],
        ("exactly one of MODEL or --model-file",),
    ),
    "neither-model": (
        lambda t: ["plan", "--chips", "8"],
        ("exactly one of MODEL or --model-file",),
    ),
    "bad-dataflow": (
        lambda t: ["plan", "gpt3", "--chips", "8", "--dataflow", "zstn"],
        ("'--dataflow': 'zstn' is not one of 'auto', 'ystn', 'xstn', 'wstn'",),
    ),
    "top-zero": (
        lambda t: ["plan", "gpt3", "--chips", "8", "--top", "0"],
        ("--top", "greater than or equal to 1"),
    ),
    "batch-zero": (
        lambda t: ["plan", "gpt3", "--chips", "8", "--batch", "0"],
        ("--batch", "greater than or equal to 1"),
    ),
    "unknown-option": (
        lambda t: ["plan", "gpt3", "--chips", "8", "--fast"],
        ("No such option: --fast",),
    ),
    "unknown-command": (lambda t: ["tune", "gpt3"], ("No such command 'tune'",)),
    "bad-schema-name": (
        lambda t: ["schema", "plans"],
        ("'plans' is not one of 'plan', 'model', 'profile'",),
    ),
    "seed-float": (
        lambda t: ["verify", "x.json", "--seed", "1.5"],
        ("'--seed': should be an integer, got '1.5'",),
    ),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_and_exit_2(runner: CliRunner, tmp_path: Path, case: str) -> None:
    build, needles = BAD_INPUTS[case]
    result = invoke(runner, *build(tmp_path))
    assert_bad_input(result, *needles)


def test_empty_shape_list_is_explained(runner: CliRunner) -> None:
    # `--shapes ""` leaves nothing to search; the one line must say why, not end in ": ".
    line = assert_bad_input(invoke(runner, "plan", "gpt3", "--chips", "8", "--shapes", ""))
    assert line == "meshtune: error: no mesh shape to search: the shape list is empty"


def test_existing_output_is_left_unchanged(runner: CliRunner, tmp_path: Path) -> None:
    args = _existing_output(tmp_path)
    assert_bad_input(invoke(runner, *args))
    assert (tmp_path / "p.json").read_text(encoding="utf-8") == "{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json"]


# --------------------------------------------------------------------------- conventions


def test_version(runner: CliRunner) -> None:
    from meshtune import __version__

    assert ok(invoke(runner, "--version")).stdout == f"meshtune {__version__}\n"


@pytest.mark.parametrize("command", ["plan", "verify", "calibrate", "schema", "models", "profiles"])
def test_dash_h_is_help_on_every_command(runner: CliRunner, command: str) -> None:
    short = ok(invoke(runner, command, "-h", env={"COLUMNS": "80"})).stdout
    assert short.startswith(f"Usage: meshtune {command}")
    assert short == ok(invoke(runner, command, "--help", env={"COLUMNS": "80"})).stdout


@pytest.mark.parametrize("command", ["plan", "verify", "calibrate", "schema", "models", "profiles"])
def test_help_has_no_python_types_and_fits_80_columns(runner: CliRunner, command: str) -> None:
    text = ok(invoke(runner, command, "--help", env={"COLUMNS": "80"})).stdout
    for python_word in ("<bool>", "<str>", "<int>", "<float>", "list[", "<Path>"):
        assert python_word not in text, (python_word, text)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text


def test_top_level_help_lists_commands_without_cutting_them(runner: CliRunner) -> None:
    text = ok(invoke(runner, "-h", env={"COLUMNS": "80"})).stdout
    commands = text.split("Commands:", 1)[1]
    assert "..." not in commands and "…" not in commands
    words = " ".join(text.split())
    assert "plan Pick each FC layer's dataflow, the mesh shape and the slice counts; print" in words
    assert "--version Print the version and exit." in words


def test_plan_help_shows_defaults_flags_and_whole_choices(runner: CliRunner) -> None:
    text = ok(invoke(runner, "plan", "--help", env={"COLUMNS": "80"})).stdout
    words = " ".join(text.split())  # help wraps at 80 columns
    assert "[default: chips/2, as in §5.1.1]" in words
    assert "[default: tpuv4]" in words and "[default: 5; 1<=x<=1000]" in words
    assert "[default: meshslice]" in words
    assert "<auto|ystn|xstn|wstn>" in text
    assert re.search(r"^  --json  +Print the plan as JSON", text, re.M), text
    assert re.search(r"^  -n, --chips <integer>", text, re.M), text


def test_calibrate_help_keeps_choices_whole(runner: CliRunner) -> None:
    text = ok(invoke(runner, "calibrate", "--help", env={"COLUMNS": "80"})).stdout
    assert "<nccl|osu|artifact|canonical|table|gemm>" in text
    assert re.search(r"^  logs\.\.\. <path>", text, re.M), text


def test_ascii_stdout_does_not_crash(tmp_path: Path) -> None:
    ascii_runner = CliRunner(charset="ascii", env={"COLUMNS": "80", "NO_COLOR": "1"})
    result = ascii_runner.invoke(app, ["plan", "gpt3", "--chips", "256", "--mesh-only"])
    assert result.exit_code == 0, (result.exception, result.stderr)
    out = result.stdout
    assert "mesh 32x8" in out and "32x8 <-" in out and "12288->36864" in out
    assert out.isascii()
    # help goes through click, which writes UTF-8 to a stream it finds misconfigured as ASCII
    help_text = ascii_runner.invoke(app, ["plan", "--help"])
    assert help_text.exit_code == 0 and help_text.exception is None


def test_errors_on_an_ascii_stderr_spell_symbols_in_ascii() -> None:
    ascii_runner = CliRunner(charset="ascii", env={"COLUMNS": "80", "NO_COLOR": "1"})
    result = ascii_runner.invoke(app, ["plan", "gpt→µ", "--chips", "256"])
    assert result.exit_code == 2
    assert result.stderr.startswith("meshtune: error: unknown model 'gpt->u'; known models: ")


def test_one_line_escapes_line_breaks_and_control_characters() -> None:
    assert one_line("a\nb\x0bc\u2028d\te") == "a\\nb\\x0bc\\u2028d\\te"
    assert one_line("plain, µs × →") == "plain, µs × →"


def _no_ellipsis(text: str) -> str:
    assert "…" not in text, text
    return text


def test_models_at_80_columns_hide_nothing(runner: CliRunner) -> None:
    out = _no_ellipsis(ok(invoke(runner, "models", env={"COLUMNS": "80"})).stdout)
    assert "megatron-nlg" in out  # the name column is never folded
    assert "Megatron" in out and "530B" in out


def test_profiles_at_80_columns_hide_nothing(runner: CliRunner) -> None:
    out = _no_ellipsis(ok(invoke(runner, "profiles", env={"COLUMNS": "80"})).stdout)
    assert "a100-sxm4-nvswitch" in out
    # one block per profile: every description whole (wrapped at spaces), no line over 80
    assert max(len(line) for line in out.splitlines()) <= 80
    flat = " ".join(out.split())
    for name in catalog_names("profiles"):
        assert " ".join(load_profile(name).description.split()) in flat, name
    wide = ok(invoke(runner, "profiles", env={"COLUMNS": "200"})).stdout
    assert "┃ name" in wide and "calibrated" in wide  # a table where there is room


def test_plan_and_verify_at_80_columns_hide_nothing(runner: CliRunner, tmp_path: Path) -> None:
    env = {"COLUMNS": "80"}
    _no_ellipsis(ok(invoke(runner, "plan", "llama3-405b", "--chips", "65536", env=env)).stdout)
    out = _no_ellipsis(ok(invoke(runner, "verify", str(PLANS / "gpt3-256.json"), env=env)).stdout)
    assert max(len(line) for line in out.splitlines()) <= 80
    for label in ("fwd", "bwd-d", "bwd-w", "attn_out", "mlp_down", "64×16×3072"):
        assert label in out, label


def test_missing_catalog_folder_warns(runner: CliRunner, tmp_path: Path) -> None:
    absent = tmp_path / "nonexistent"
    result = invoke(runner, "models", env={"MESHTUNE_MODELS_DIR": str(absent)})
    assert result.exit_code == 0
    assert result.stdout == ""
    assert result.stderr == (
        f"meshtune: warning: the models folder {absent} (set by $MESHTUNE_MODELS_DIR) "
        "does not exist\n"
    )


def test_one_bad_catalog_file_is_listed_as_invalid(runner: CliRunner, tmp_path: Path) -> None:
    spec_file(tmp_path, "good.toml")
    spec_file(tmp_path, "bad.toml", hidden="8192")
    (tmp_path / "binary.toml").write_bytes(b"\x00\xff" * 10)
    result = invoke(runner, "models", env={"MESHTUNE_MODELS_DIR": str(tmp_path)})
    assert result.exit_code == 0
    assert "good" in result.stdout and "GPT-3 175B" in result.stdout
    rows = [line for line in result.stdout.splitlines() if "INVALID" in line]
    assert len(rows) == 2 and "bad" in rows[0] and "binary" in rows[1]
    assert result.stderr.splitlines() == [
        f"meshtune: warning: {tmp_path / 'bad.toml'}: field 'hidden': should be an integer, "
        "got '8192'",
        f"meshtune: warning: {tmp_path / 'binary.toml'}: not UTF-8 text (byte 1 is 0xff); "
        "expected a TOML file",
    ]


def test_one_bad_profile_is_listed_as_invalid(runner: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "tpuv4.toml").write_text(TPUV4_TOML, encoding="utf-8")
    (tmp_path / "huge.toml").write_text(f"peak_flops_per_s = {'9' * 5000}\n", encoding="utf-8")
    result = invoke(runner, "profiles", env={"MESHTUNE_PROFILES_DIR": str(tmp_path)})
    assert result.exit_code == 0
    assert "tpuv4" in result.stdout and "INVALID" in result.stdout
    assert result.stderr.count("\n") == 1
    assert "huge.toml: invalid TOML: an integer has more than" in result.stderr


@pytest.mark.parametrize("name", ["model", "profile"])
def test_schema_has_no_name_field(runner: CliRunner, name: str) -> None:
    schema = json.loads(ok(invoke(runner, "schema", name)).stdout)
    assert "name" not in schema["properties"]
    assert "name" not in schema["required"]


# --------------------------------------------------------------------------- issue 20


def test_names_and_paths_too_long_for_the_file_system_are_one_line(
    runner: CliRunner, tmp_path: Path
) -> None:
    long = "x" * 300  # over NAME_MAX (255): ENAMETOOLONG from any stat
    assert_bad_input(invoke(runner, "plan", long, "--chips", "16"), f"unknown model '{long}'")
    assert_bad_input(
        invoke(runner, "plan", "gpt3", "--chips", "16", "--profile", long),
        f"unknown profile '{long}'",
    )
    path = str(tmp_path / long)
    for args in (
        ("plan", "--model-file", path, "--chips", "16"),
        ("plan", f"{path}.toml", "--chips", "16"),
        ("plan", "gpt3", "--chips", "16", "--profile", f"{path}.toml"),
        ("models", "import", path),
        ("verify", path),
        ("calibrate", path),
    ):
        assert_bad_input(invoke(runner, *args), "File name too long")


def test_an_empty_output_path_is_one_line(runner: CliRunner) -> None:
    assert_bad_input(
        invoke(runner, "run", str(PLANS / "gpt3-256.json"), "--emit-log", ""),
        ".: cannot write: it is a folder",
    )
    assert_bad_input(
        invoke(runner, "plan", "gpt3", "--chips", "16", "-o", ""), "cannot write: it is a folder"
    )


def test_emit_log_companions_lie_only_beside_a_file(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--emit-log /dev/null` created a regular file /dev/null.gemm.csv, `--emit-log -` one
    named -.gemm.csv: a destination written through (stdout, device, FIFO) has no beside."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "null").symlink_to("/dev/null")
    os.mkfifo(tmp_path / "pipe")
    for given in ("-", "/dev/stdout", "null", "pipe"):
        assert_bad_input(
            invoke(runner, "run", str(PLANS / "gpt3-256.json"), "--emit-log", given),
            f"--emit-log {given}: not a file (standard output, a device or a FIFO)",
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null", "pipe"]


def test_verify_of_a_device_is_refused(runner: CliRunner) -> None:
    assert_bad_input(
        invoke(runner, "verify", "/dev/zero"),
        "/dev/zero: a character device, not a regular file or FIFO; expected a plan JSON file",
    )
