"""The parts of meshtune.compare that its studies share: the selection helpers, the data-parallel
breakdown (MeshSlice §7) and the shared searches, with hand-computed values."""

from __future__ import annotations

import pytest

from meshtune.algorithms.registry import REGISTRY
from meshtune.compare.breakdown import dp_breakdown
from meshtune.compare.searches import Searches, StudySetup
from meshtune.compare.selection import none_feasible, selected, speedup
from meshtune.errors import InfeasibleError, MeshtuneError
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.spec import ModelSpec
from meshtune.planner.make import search_algorithms


def test_speedup_is_time_over_reference_minus_one() -> None:
    assert speedup(3.0, 2.0) == pytest.approx(0.5)
    assert speedup(1.0, 2.0) == pytest.approx(-0.5)
    assert speedup(None, 2.0) is None
    assert speedup(3.0, None) is None


def test_none_feasible_names_two_reasons_then_counts() -> None:
    assert none_feasible([], "anywhere") is None
    assert none_feasible([("a", "too big"), ("b", None)], "anywhere") is None
    assert none_feasible([("a", "too big")], "at 8 chips") == (
        "no algorithm asked for is feasible at 8 chips: a: too big"
    )
    three = [("a", "r1"), ("b", "r2"), ("c", "r3")]
    assert none_feasible(three, "at 8 chips") == (
        "no algorithm asked for is feasible at 8 chips: a: r1; b: r2; and 1 more"
    )


def test_selected_keeps_the_order_given_without_repeats() -> None:
    assert selected(None) == tuple(REGISTRY.values())
    assert [a.name for a in selected(["wang", "meshslice", "wang"])] == ["wang", "meshslice"]
    with pytest.raises(MeshtuneError, match="no algorithm selected"):
        selected([])


def test_dp_breakdown_by_hand(tpuv4: HardwareProfile) -> None:
    # 2**20 weight elements over dp = 4 replicas, bf16: a 524,288-byte shard per chip; a
    # reduce-scatter then an all-gather of 3 steps each, priced on tpuv4's slowest mesh axis
    # (axis 0: reduce-scatter 37.506 GB/s, t_launch 26 µs; all-gather 27.472 GB/s, 13 µs;
    # t_sync 5 µs a step), all in the epilogue and exposed.
    shard = 2**20 / 4 * 2
    transfer = 3 * shard / 37.506e9 + 3 * shard / 27.472e9
    total = 26e-6 + 13e-6 + 6 * 5e-6 + transfer
    parts = dp_breakdown(2**20, 4, tpuv4)
    assert parts.launch_s == pytest.approx(39e-6)
    assert parts.sync_s == pytest.approx(30e-6)
    assert parts.transfer_s == pytest.approx(transfer)
    assert parts.total_s == parts.epilogue_s == parts.exposed_s == pytest.approx(total)
    assert parts.compute_s == parts.hidden_s == parts.prologue_s == parts.steady_s == 0.0
    # The traffic is counted on the replicas' axis (2), 3 steps of one shard each way.
    assert parts.launches == [0, 0, 2]
    assert parts.steps == [0, 0, 6]
    assert parts.link_bytes == [0, 0, 2 * 3 * shard]


def test_searches_run_once_and_keep_the_reason(gpt3: ModelSpec, tpuv4: HardwareProfile) -> None:
    searches = Searches(gpt3, 2048, None)
    first = searches(REGISTRY["meshslice"], tpuv4, 16, 8)
    assert first is searches(REGISTRY["meshslice"], tpuv4, 16, 8)
    expected = search_algorithms("meshslice", gpt3, tpuv4, 16, batch=8, seq_len=2048)[0]
    assert not isinstance(first, str)
    assert first.best.time_s == expected.best.time_s
    assert first.best.mesh == expected.best.mesh
    # No mesh of 8 chips for PrimePar: the reason, not an exception.
    assert searches(REGISTRY["primepar"], tpuv4, 8, 4) == "primepar has no mesh shape of 8 chips"
    pinned = Searches(gpt3, 2048, Mesh(4, 4))
    assert pinned(REGISTRY["meshslice"], tpuv4, 64, 32) == "mesh shape 4x4 has 16 chips, not 64"


def test_study_setup_batch_rule(gpt3: ModelSpec, tpuv4: HardwareProfile) -> None:
    def setup(batch: int | None, seq_len: int = 2048) -> StudySetup:
        return StudySetup(
            model=gpt3,
            profile=tpuv4,
            algorithms=selected(["meshslice"]),
            reference="meshslice",
            seq_len=seq_len,
            batch=batch,
            at_chips=16,
            mesh=None,
            searches=Searches(gpt3, seq_len, None),
            nonfc_note=None,
        )

    assert setup(None).batch_of(256) == 128  # weak scaling, §5.1.1
    assert setup(None).batch_of(1) == 1
    assert setup(32).batch_of(256) == 32  # strong scaling, §5.1.3
    with pytest.raises(InfeasibleError, match="tokens per step"):
        setup(2**30, seq_len=2**20).batch_of(16)
    weak = setup(None)
    assert weak.at(REGISTRY["meshslice"]) is weak.searches(REGISTRY["meshslice"], tpuv4, 16, 8)
