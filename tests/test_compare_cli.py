"""`meshtune gemm` and `meshtune compare` through typer's CliRunner."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshtune.algorithms.registry import REGISTRY
from meshtune.catalog import load_model, load_profile
from meshtune.cli import app
from meshtune.compare.gemm import GemmStudy, gemm_study
from meshtune.compare.model import compare_models
from meshtune.compare.records import VIEWS, Comparison
from meshtune.hardware.mesh import Mesh
from test_cli import assert_bad_input, invoke, ok

NARROW = {"COLUMNS": "80", "NO_COLOR": "1"}


def test_gemm_table(runner: CliRunner) -> None:
    out = ok(invoke(runner, "gemm", "262144", "36864", "12288", "--chips", "256")).stdout
    assert "on 256 chips (tpuv4)" in out
    for name in REGISTRY:
        assert name in out
    assert "FLOP utilization" in out and "bytes/link" in out


def test_gemm_json_round_trip(runner: CliRunner) -> None:
    args = ("gemm", "16384", "12288", "4096", "--chips", "16", "--mesh", "4x4", "--json")
    study = GemmStudy.model_validate_json(ok(invoke(runner, *args)).stdout)
    expected = gemm_study(16384, 12288, 4096, 16, load_profile("tpuv4"), mesh=Mesh(4, 4))
    assert study == expected


def test_gemm_dataflows_and_algorithms(runner: CliRunner) -> None:
    args = ("gemm", "4096", "4096", "4096", "-n", "16", "--dataflows", "rs", "-a", "collective")
    data = json.loads(ok(invoke(runner, *args, "--json")).stdout)
    assert [e["algorithm"] for e in data["entries"]] == ["collective"]
    assert data["entries"][0]["dataflow"] == "RS"


def test_compare_json_round_trip(runner: CliRunner) -> None:
    args = ("compare", "gpt3", "--chips", "16,64", "--view", "all", "--json")
    result = Comparison.model_validate_json(ok(invoke(runner, *args)).stdout)
    views = list(VIEWS)  # --view all includes the cluster view
    assert result == compare_models(
        load_model("gpt3"), load_profile("tpuv4"), [16, 64], views=views
    )


def test_compare_strong_scaling(runner: CliRunner) -> None:
    base = ("compare", "gpt3", "--chips", "16,32,64,128,256", "--json")
    strong = json.loads(ok(invoke(runner, *base, "--strong")).stdout)
    assert strong["scaling"] == "strong" and strong["batch"] == 32  # §5.1.3: the 64-chip batch
    fixed = json.loads(ok(invoke(runner, *base, "--batch", "8")).stdout)
    assert fixed["batch"] == 8 and {p["batch"] for p in fixed["scaling_points"]} == {8}
    weak = json.loads(ok(invoke(runner, *base)).stdout)
    assert weak["scaling"] == "weak" and weak["batch"] is None


@pytest.mark.parametrize("command", ["compare", "gemm"])
def test_narrow_pipe_hides_nothing(command: str) -> None:
    runner = CliRunner(env=NARROW)
    args = (
        ("compare", "megatron-nlg", "--chips", "7,16,256", "--view", "all")
        if command == "compare"
        else ("gemm", "262144", "20480", "81920", "--chips", "256")
    )
    out = ok(runner.invoke(app, list(args))).stdout
    assert "…" not in out and "..." not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    if command == "compare":
        assert "at 7 chips infeasible" in out  # the reason is printed, not cut


def test_ascii_terminal_bars(monkeypatch: pytest.MonkeyPatch, runner: CliRunner) -> None:
    from meshtune.cli import compare as cli_compare

    monkeypatch.setattr(cli_compare, "ascii_terminal", lambda: True)
    out = ok(invoke(runner, "compare", "gpt3", "--chips", "16")).stdout
    assert "#" in out and "█" not in out


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("compare", "gpt3", "--chips", "16,x"), ["--chips '16,x'"]),
        (("compare", "gpt3", "--chips", "0"), ["between 1 and"]),
        (("compare", "gpt3", "--chips", ","), ["--chips"]),
        (("compare", "gpt5", "--chips", "16"), ["unknown model 'gpt5'"]),
        (("compare", "gpt3", "--chips", "16", "-a", "fast"), ["unknown algorithm 'fast'"]),
        (("compare", "gpt3", "--chips", "16", "-a", ","), ["--algorithms"]),
        (("compare", "gpt3", "--chips", "16", "--view", "pies"), ["--view"]),
        (("compare", "gpt3", "--chips", "16,32", "--mesh", "4x4"), ["4x4 has 16 chips, not 32"]),
        (("compare", "gpt3", "--chips", "16", "--reference", "x"), ["unknown algorithm 'x'"]),
        (("gemm", "1", "2", "3", "--chips", "4", "--mesh", "9"), ["mesh shape '9'"]),
        (("gemm", "1", "2", "3", "--chips", "4", "--dataflows", "XS"), ["unknown dataflow 'XS'"]),
        (("gemm", "0", "2", "3", "--chips", "4"), ["'m'"]),
        (("gemm", "1", "2", "--chips", "4"), ["Missing argument"]),
        # Issue 20 finding 11: nothing asked for can run → the reasons, exit 2, not a table.
        (
            ("gemm", "4096", "4096", "4096", "--chips", "8", "--algorithms", "primepar"),
            ["no algorithm asked for is feasible on 8 chips", "primepar: primepar has no mesh"],
        ),
        (
            ("gemm", "12", "12", "12", "-n", "7", "-a", "cannon,summa", "--json"),
            ["feasible on 7 chips: cannon: ", "; summa: "],
        ),
        (
            ("compare", "gpt3", "--chips", "7,8", "-a", "primepar,cannon"),
            ["feasible at any chip count: primepar at 7 chips: ", "; and 2 more"],
        ),
        (
            ("compare", "gpt3", "--chips", "7", "-a", "cannon", "--view", "breakdown"),
            ["feasible at 7 chips: cannon: "],
        ),
    ],
)
def test_bad_input_is_one_line(
    runner: CliRunner, args: tuple[str, ...], needles: list[str]
) -> None:
    assert_bad_input(invoke(runner, *args), *needles)


def test_one_feasible_algorithm_is_enough(runner: CliRunner) -> None:
    # 16 chips: cannon runs on 4x4 (primepar too), summa at 7 chips would not: still a table.
    out = ok(invoke(runner, "compare", "gpt3", "--chips", "7,16", "-a", "cannon")).stdout
    assert "at 7 chips infeasible" in out
    out = ok(invoke(runner, "gemm", "12", "12", "12", "-n", "7", "-a", "cannon,onesided")).stdout
    assert "onesided" in out


def test_plot_without_matplotlib(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    target = tmp_path / "fig.png"
    result = invoke(runner, "compare", "gpt3", "--chips", "16", "--plot", str(target))
    assert_bad_input(result, "--plot needs matplotlib: pip install 'meshtune[plot]'")
    assert not target.exists()


def test_plot_writes_a_png_and_refuses_to_overwrite(runner: CliRunner, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the optional 'plot' extra is not installed")
    target = tmp_path / "fig.png"
    args = ("compare", "gpt3", "--chips", "16", "--plot", str(target))
    out = ok(invoke(runner, *args, "--view", "all")).stdout
    assert f"wrote {target}" in out.replace("\n", "")
    written = target.read_bytes()
    assert written.startswith(b"\x89PNG\r\n\x1a\n") and len(written) > 10_000
    assert_bad_input(invoke(runner, *args), str(target), "already exists")
    assert target.read_bytes() == written
    ok(invoke(runner, *args, "--force"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.png"]


def test_ranking_table_shows_the_fastest(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 20 finding 10: thousands of ranked configurations print the fastest few.
    import meshtune.report.gemm

    monkeypatch.setattr(meshtune.report.gemm, "SHOWN_RANKED", 3)
    args = ("gemm", "4096", "4096", "4096", "-n", "16", "-a", "summa")
    total = json.loads(ok(invoke(runner, *args, "--json")).stdout)["ranked"]
    out = ok(invoke(runner, *args)).stdout
    assert f"fastest first (the fastest 3 of {total}; --json lists {total})" in out
    lines = [line for line in out.splitlines() if line.strip().startswith(("3 ", "4 "))]
    assert [line.split()[0] for line in lines] == ["3"]
