"""Link tables keyed by axis, and which communication kinds overlap with compute."""

from __future__ import annotations

import pytest

from meshtune.catalog import load_profile
from meshtune.errors import ProfileError
from meshtune.hardware.links import CollectiveKind
from meshtune.hardware.profile import HardwareProfile

AG = CollectiveKind.ALL_GATHER


def _data(profile: HardwareProfile) -> dict[str, object]:
    return profile.model_dump(mode="json")


def test_link_reads_the_axis_key() -> None:
    tpu = load_profile("tpuv4")
    assert tpu.link(AG, 0).bw_bytes_per_s == pytest.approx(27.472e9)
    assert tpu.link(AG, 1).bw_bytes_per_s == pytest.approx(79.751e9)
    assert tpu.axes(AG) == (0, 1)


def test_a_third_axis_is_accepted_and_a_missing_one_is_named() -> None:
    data = _data(load_profile("tpuv4"))
    depth = {"t_launch_s": 1e-5, "t_sync_s": 1e-6, "bw_bytes_per_s": 1e10}
    data["all_gather"]["axis2"] = depth  # type: ignore[index]
    profile = HardwareProfile.model_validate(data)
    assert profile.axes(AG) == (0, 1, 2)
    assert profile.link(AG, 2).bw_bytes_per_s == 1e10
    with pytest.raises(ProfileError, match=r"no reduce_scatter parameters for axis 2 \(it has "):
        profile.link(CollectiveKind.REDUCE_SCATTER, 2)


def test_both_mesh_axes_are_required() -> None:
    data = _data(load_profile("tpuv4"))
    del data["send_recv"]["axis1"]  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=r"send_recv\.axis1"):
        HardwareProfile.model_validate(data)


def test_axis_keys_are_checked() -> None:
    data = _data(load_profile("tpuv4"))
    data["all_gather"]["rows"] = data["all_gather"]["axis0"]  # type: ignore[index]
    with pytest.raises(ValueError, match="axis"):
        HardwareProfile.model_validate(data)


def test_everything_overlaps_by_default_and_a_profile_can_say_otherwise() -> None:
    tpu = load_profile("tpuv4")
    assert all(tpu.overlaps(kind) for kind in CollectiveKind)
    data = _data(tpu) | {"overlapped": ["send_recv"]}
    cloud = HardwareProfile.model_validate(data)
    assert cloud.overlaps(CollectiveKind.SEND_RECV)
    assert not cloud.overlaps(AG)
    assert not cloud.overlaps(CollectiveKind.REDUCE_SCATTER)
