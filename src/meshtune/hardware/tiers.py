"""Which network level a ring lands on: tiered profiles and the DP / PP axis.

Chips are numbered with mesh axis 1 innermost, then axis 0, then the pipeline stages, then the
DP replicas (the order Llama 3 nests TP, PP and DP, Llama Team 2024 §3.3.2). A profile with
``tiers`` (e.g. NVLink inside 8-GPU nodes, then the network) gives each ring the parameters of
the tier it spans; without tiers, DP and PP traffic uses the profile's axis-2 parameters when it
has them, else those of its slowest mesh axis (a stand-in for the network between replicas).

A mesh with every chip on one ring (P × 1 or 1 × P) is not a torus shape the 2D machine can
take: its ring is laid out as a snake through both axes' links (:func:`ring_profile`).
"""

from __future__ import annotations

from dataclasses import dataclass

from meshtune.hardware.links import AxisTable, CollectiveKind, LinkParams, Tier
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile, ProfileMemo


def tier_of(tiers: list[Tier], span: int) -> Tier:
    """The tier a ring over ``span`` consecutive chips uses: the first whose unit holds that
    many (a ring that leaves a unit crosses the next tier's links)."""
    return next(t for t in tiers if t.chips is None or t.chips >= span)


def tier_profile(profile: HardwareProfile, spans: dict[int, int]) -> HardwareProfile:
    """``profile`` with the parameters of each axis in ``spans`` taken from the tier its ring
    spans (``{axis: consecutive chips the ring covers}``); ``profile`` itself without tiers.

    A ring of ``size`` chips ``stride`` apart covers ``stride · size`` chips, and it uses the
    first tier whose unit holds that many (a ring that leaves a unit crosses the next tier's
    links). The same inputs give the same profile object (cached).
    """
    if profile.tiers is None:
        return profile
    tiers = profile.tiers
    key = tuple(sorted(spans.items()))
    return _TIER_MEMO.get(profile, key, lambda: _tiered(profile, tiers, spans))


# tier_profile's answers: (profile, sorted (axis, span) pairs) → the tiered profile.
_TIER_MEMO: ProfileMemo[tuple[tuple[int, int], ...], HardwareProfile] = ProfileMemo(1024)


def _tiered(profile: HardwareProfile, tiers: list[Tier], spans: dict[int, int]) -> HardwareProfile:
    """:func:`tier_profile` of ``profile``, whose tiers are ``tiers``, built."""
    update: dict[str, AxisTable] = {}
    for kind in CollectiveKind:
        table: dict[str, LinkParams] = dict(getattr(profile, kind.value))
        for axis, span in spans.items():
            table[f"axis{axis}"] = getattr(tier_of(tiers, span), kind.value)
        update[kind.value] = AxisTable.model_validate(table)
    return profile.model_copy(update=update)


# ring_profile's snake profiles: (profile, None) → the snake profile (costing prices one mesh
# many times).
_SNAKE_MEMO: ProfileMemo[None, HardwareProfile] = ProfileMemo(256)


def ring_profile(profile: HardwareProfile, mesh: Mesh) -> HardwareProfile:
    """The profile the rings of ``mesh`` are priced with: ``profile`` itself unless every chip
    of ``mesh`` sits on one ring of more than two chips (P × 1 or 1 × P, depth 1).

    Such a ring is not one axis of the 2D torus: a cycle through all R × C chips of a torus
    with R, C ≥ 2 (a snake along the rows, turning at their ends) uses links of both axes,
    and every step of a ring collective or shift ends when its slowest hop has arrived. So both
    axes take, per collective kind, the whole parameters of the axis of lower bandwidth (ties:
    axis 0); that is the exact step time when the two axes' ``t_sync`` agree, as in every
    shipped profile. The paper's artifact prices its 1D rings so (hwnam831/meshslice
    CostModel.py, ``LogicalRing_ISplit`` / ``WSplit`` / ``OSplit``: ``bws['sendrecv'][1]``,
    35.224 GB/s, the slower send-recv axis of Autotuner.py's TPUv4 constants). A ring of two
    chips is one link and keeps its axis; a profile whose two axes agree (the shipped GPU
    profiles) is returned unchanged. Traffic is still counted on the mesh's own axis: the
    snake carries the same bytes per link.
    """
    if mesh.depth != 1 or min(mesh.rows, mesh.cols) != 1 or mesh.chips <= 2:
        return profile
    return _SNAKE_MEMO.get(profile, None, lambda: _snake(profile))


def _snake(profile: HardwareProfile) -> HardwareProfile:
    """``profile`` with axes 0 and 1 both given, per kind, the slower axis's parameters."""
    update: dict[str, AxisTable] = {}
    for kind in CollectiveKind:
        table: dict[str, LinkParams] = dict(getattr(profile, kind.value))
        slow = min((table["axis0"], table["axis1"]), key=lambda link: link.bw_bytes_per_s)
        if table["axis0"] != table["axis1"]:
            update[kind.value] = AxisTable.model_validate({**table, "axis0": slow, "axis1": slow})
    return profile.model_copy(update=update) if update else profile


def mesh_profile(profile: HardwareProfile, mesh: Mesh) -> HardwareProfile:
    """The profile a mesh is costed with: axis 1 spans P_c chips, axis 0 P_r · P_c."""
    return tier_profile(profile, {1: mesh.cols, 0: mesh.rows * mesh.cols})


def level_axis(profile: HardwareProfile, kind: CollectiveKind) -> int:
    """The profile axis whose ``kind`` parameters DP and PP traffic uses: 2 when the profile
    has it, else the mesh axis of lowest bandwidth (ties: the lower axis). Cached."""
    return _AXIS_MEMO.get(profile, kind, lambda: _level_axis(profile, kind))


# level_axis's answers: (profile, collective kind) → axis.
_AXIS_MEMO: ProfileMemo[CollectiveKind, int] = ProfileMemo(256)


def _level_axis(profile: HardwareProfile, kind: CollectiveKind) -> int:
    """:func:`level_axis`, worked out."""
    axes = profile.axes(kind)
    if 2 in axes:
        return 2
    return min(axes, key=lambda a: (profile.link(kind, a).bw_bytes_per_s, a))


@dataclass(frozen=True)
class LevelTier:
    """Where one level of a split runs: its ``degree``, the consecutive chips its ring (or
    all-to-all group) covers, and the name of the tier that span lands on."""

    level: str
    degree: int
    span: int
    tier: str


def level_tiers(
    profile: HardwareProfile, mesh: Mesh, *, cp: int = 1, ep: int = 1, pp: int = 1, dp: int = 1
) -> tuple[LevelTier, ...]:
    """The tier each level of a split lands on, with the spans the step model prices them at:
    the mesh's axis 1 over P_c chips and axis 0 over P_r · P_c (:func:`mesh_profile`), the CP
    ring over ``cp · tp`` chips (``meshtune.step.cp``), the EP all-to-all over ``ep · tp``
    (``meshtune.step.moe.all_to_all_link``), a PP hop over ``pp · cp · tp`` and the DP ring over
    ``dp · pp · cp · tp`` (``meshtune.step.comms.dp_profiles``), tp = the mesh's chips. Levels
    of degree 1 are left out; ``()`` for a profile without tiers (one network level)."""
    if profile.tiers is None:
        return ()
    tp = mesh.chips
    levels = (
        ("TP axis 1", mesh.cols, mesh.cols),
        ("TP axis 0", mesh.rows, mesh.rows * mesh.cols),
        ("CP", cp, cp * tp),
        ("EP", ep, ep * tp),
        ("PP", pp, pp * cp * tp),
        ("DP", dp, dp * pp * cp * tp),
    )
    return tuple(
        LevelTier(name, degree, span, tier_of(profile.tiers, span).name)
        for name, degree, span in levels
        if degree > 1
    )
