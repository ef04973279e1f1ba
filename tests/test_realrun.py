"""Table 3 (MeshSlice §5.3) run as the artifact ran it: tpuv4-cloud-4x4, 4×4, batch 16, S = 8."""

from __future__ import annotations

import pytest

from meshtune.catalog import load_model, load_profile
from meshtune.errors import MeshtuneError
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.validation.realrun import OVERLAPS, overlap_profile, real_run

# Nam et al., ISCA 2025, Table 3: the algorithms measured and their FC FLOP utilization on a
# real 4×4 TPUv4 slice.
TABLE3 = ("collective", "wang", "meshslice")
MEASURED = {
    ("gpt3", "collective"): 0.474,
    ("gpt3", "meshslice"): 0.455,
    ("megatron-nlg", "collective"): 0.494,
    ("megatron-nlg", "meshslice"): 0.471,
}


@pytest.fixture(scope="module")
def cloud() -> HardwareProfile:
    return load_profile("tpuv4-cloud-4x4")


@pytest.mark.parametrize("model", ["gpt3", "megatron-nlg"])
def test_collective_and_meshslice_within_five_percent_of_table3(
    model: str, cloud: HardwareProfile
) -> None:
    cells = real_run(load_model(model), cloud, Mesh(4, 4), batch=16, slices=8, algorithms=TABLE3)
    on_profile = {c.algorithm: c for c in cells if c.overlap == "profile"}
    for name in ("collective", "meshslice"):
        assert on_profile[name].utilization == pytest.approx(MEASURED[model, name], rel=0.05)
    # The run fixes MeshSlice's slice count; Collective has only S = 1.
    assert {tuple(c.values()) for c in on_profile["meshslice"].configs.values()} == {(8,)}
    assert {c["slices"] for c in on_profile["collective"].configs.values()} == {1}


def test_wang_keeps_its_searched_slices_where_eight_does_not_divide_its_ring(
    cloud: HardwareProfile,
) -> None:
    cells = real_run(load_model("gpt3"), cloud, Mesh(4, 4), batch=16, slices=8, algorithms=TABLE3)
    wang = next(c for c in cells if c.algorithm == "wang" and c.overlap == "profile")
    assert all(c["slices"] in (1, 2, 4) for c in wang.configs.values())


def test_overlap_assumptions_order_the_times(cloud: HardwareProfile) -> None:
    cells = real_run(load_model("gpt3"), cloud, Mesh(4, 4), batch=16, slices=8, algorithms=TABLE3)
    by = {(c.algorithm, c.overlap): c.fc_time_s for c in cells}
    for name in TABLE3:
        assert by[name, "everything"] <= by[name, "profile"] <= by[name, "nothing"]
    assert [c.overlap for c in cells[::3]] == list(OVERLAPS)


def test_overlap_profile(cloud: HardwareProfile) -> None:
    assert overlap_profile(cloud, "profile") is cloud
    assert overlap_profile(cloud, "nothing").overlapped == []
    assert overlap_profile(cloud, "everything").overlapped == list(CollectiveKind)


def test_unknown_algorithm_is_a_meshtune_error(cloud: HardwareProfile) -> None:
    with pytest.raises(MeshtuneError, match="unknown algorithm 'gspmd'"):
        real_run(load_model("gpt3"), cloud, Mesh(4, 4), batch=16, slices=8, algorithms=["gspmd"])
