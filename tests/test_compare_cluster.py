"""``compare --cluster``: each algorithm at its best DP × PP × mesh split (issue 14)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from meshtune.catalog import load_model, load_profile
from meshtune.cli import app
from meshtune.compare.model import compare_models
from meshtune.compare.records import MESH_VIEWS, VIEWS
from meshtune.hardware.mesh import parse_mesh

ALGORITHMS = ["meshslice", "megatron"]


@pytest.mark.parametrize("profile", ["h100-8gpu-nodes", "tpuv4"])
def test_each_algorithm_at_its_best_cluster_split(profile: str) -> None:
    hardware = load_profile(profile)
    gpt3 = load_model("gpt3")
    c = compare_models(gpt3, hardware, [1024, 4096], algorithms=ALGORITHMS, views=["cluster"])
    assert c.views == ["cluster"] and not c.scaling_points
    assert [(e.chips, e.algorithm) for e in c.cluster] == [
        (n, a) for n in (1024, 4096) for a in ALGORITHMS
    ]
    for entry in c.cluster:
        assert entry.step_s is not None, entry.reason
        assert entry.dp is not None and entry.pp is not None and entry.mesh is not None
        assert entry.dp * entry.pp * parse_mesh(entry.mesh).chips == entry.chips
        assert entry.mfu is not None and 0 < entry.mfu < 1
        assert entry.memory_bytes is not None and hardware.memory_bytes is not None
        assert entry.memory_bytes <= hardware.memory_bytes
    for chips in (1024, 4096):
        ref, other = (e for e in c.cluster if e.chips == chips)
        assert ref.speedup_of_reference == 0.0
        assert ref.step_s is not None and other.step_s is not None
        assert other.speedup_of_reference == pytest.approx(other.step_s / ref.step_s - 1)
    assert c.nothing_feasible() is None


def test_cluster_is_in_all_views_but_not_the_default() -> None:
    assert "cluster" in VIEWS
    assert "cluster" not in MESH_VIEWS


def test_compare_cluster_cli() -> None:
    args = ["compare", "gpt3", "--chips", "1024", "--cluster", "-a", "meshslice,megatron"]
    result = CliRunner().invoke(app, [*args, "-p", "h100-8gpu-nodes"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "each algorithm at its best DP × PP × mesh split" in result.stdout
    assert "megatron *" in result.stdout  # no engine runs it yet
    clash = CliRunner().invoke(app, [*args, "--view", "all"])
    assert clash.exit_code == 2
    assert "--cluster is --view cluster" in clash.output
