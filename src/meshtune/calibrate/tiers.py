"""Network tiers from the logs: intra-node and inter-node rings fitted apart into ``[[tiers]]``.

A GPU cluster has (at least) two links: NVLink / NVSwitch inside a node, the network between
nodes. A ring whose ranks all sit on one host runs on the first; a ring over several hosts is
paced by the second (every ring step crosses it once per node boundary, and the slowest link
sets the step time). The nccl-tests ``Rank`` lines name each rank's host, so every measurement
knows how many hosts its ring spans (:attr:`~meshtune.calibrate.Measurement.hosts`). When the
logs hold both kinds, they are fitted apart (one fit per op and tier, the all-reduce standing
for all-gather and reduce-scatter as on the mesh axes) and written as two tiers,
``intra-node`` with ``chips`` = the GPUs per node, and ``network`` (every other ring), the
layout of the shipped ``h100-8gpu-nodes`` profile; the mesh-axis tables keep the intra-node
fits. Logs of inter-node rings only fit the network tier, and the intra-node tier comes from
the base profile's first tier.

Systems: logs whose ``Rank`` lines name different accelerators (an A100 node and an H100
cluster) describe different machines, and one fit over both describes neither; they are
refused unless ``pool`` says to fit them together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import PurePath

from meshtune.calibrate.formats.records import Measurement
from meshtune.calibrate.link_fit import LinkFit
from meshtune.errors import LogFormatError
from meshtune.hardware.calibration import MeasuredOp, Origin
from meshtune.hardware.links import CollectiveKind, LinkParams, Tier
from meshtune.hardware.profile import HardwareProfile

INTRA = "intra-node"
NETWORK = "network"


def check_systems(measurements: Sequence[Measurement], *, pool: bool) -> list[str]:
    """Notes about the systems the logs name; raises :class:`LogFormatError` when they name
    several and ``pool`` is not set."""
    files: dict[str, list[str]] = {}
    for m in measurements:
        if m.system is not None and PurePath(m.source).name not in files.get(m.system, []):
            files.setdefault(m.system, []).append(PurePath(m.source).name)
    if len(files) < 2:
        return []
    listing = "; ".join(f"{system}: {', '.join(names)}" for system, names in files.items())
    if not pool:
        raise LogFormatError(
            f"the logs come from {len(files)} different systems ({listing}); one fit over "
            "them describes neither: calibrate each system's logs apart, or pass --pool to "
            "fit them together"
        )
    return [f"--pool: logs of {len(files)} different systems fitted together ({listing})"]


@dataclass(frozen=True)
class TierSplit:
    """The measurements of rings inside one host and across hosts, and the GPUs per node."""

    intra: tuple[Measurement, ...]
    inter: tuple[Measurement, ...]
    node_size: int | None


def split_tiers(measurements: Sequence[Measurement]) -> TierSplit:
    """Intra-node (one host, or hosts unknown) and inter-node (several hosts) measurements.

    The node size is the most ranks per host of any multi-host ring, else the largest
    single-host ring (None without either).
    """
    inter = tuple(m for m in measurements if m.hosts is not None and m.hosts > 1)
    intra = tuple(m for m in measurements if m.hosts is None or m.hosts <= 1)
    per_host = [m.ranks // m.hosts for m in inter if m.hosts and m.ranks % m.hosts == 0]
    on_one = [m.ranks for m in intra if m.hosts == 1]
    node_size = max(per_host) if per_host else (max(on_one) if on_one else None)
    return TierSplit(intra, inter, node_size)


Supplier = Callable[[CollectiveKind], LinkFit | None]


def fit_params(fit: LinkFit) -> LinkParams:
    """A fit's (t_launch, t_sync, bw) as a profile link."""
    r = fit.record
    return LinkParams(t_launch_s=r.t_launch_s, t_sync_s=r.t_sync_s, bw_bytes_per_s=r.bw_bytes_per_s)


def _tier(
    name: str,
    chips: int | None,
    supply: Supplier,
    all_to_all: LinkFit | None,
    fallback: Tier | None,
    origins: dict[str, Origin],
    base: HardwareProfile | None,
) -> Tier | None:
    """One tier: each kind from its fit, else the base's tier at the same place; None (and
    nothing recorded) when some kind has neither. Its ``all_to_all`` (optional) likewise: the
    ``all_to_all`` fit, else the base tier's, else none."""
    links: dict[str, LinkParams | None] = {}
    found: dict[str, Origin] = {}
    key = f"tiers.{name}.all_to_all"
    if all_to_all is not None:
        links["all_to_all"] = fit_params(all_to_all)
        found[key] = fit_origin(all_to_all)
    elif fallback is not None and base is not None and fallback.all_to_all is not None:
        links["all_to_all"] = fallback.all_to_all
        found[key] = _inherited(base, fallback)
    for kind in CollectiveKind:
        fit = supply(kind)
        key = f"tiers.{name}.{kind.value}"
        if fit is not None:
            links[kind.value] = fit_params(fit)
            found[key] = fit_origin(fit)
        elif fallback is not None and base is not None:
            links[kind.value] = getattr(fallback, kind.value)
            found[key] = _inherited(base, fallback)
        else:
            return None
    origins.update(found)
    return Tier(name=name, chips=chips, **links)


def fit_origin(fit: LinkFit) -> Origin:
    """The provenance of a value a fit gives."""
    return Origin(
        kind="fit", detail=f"fit of {fit.record.points} {fit.record.op.value} measurements"
    )


def _inherited(base: HardwareProfile, tier: Tier) -> Origin:
    return Origin(kind="base", detail=f"from base profile '{base.name}' tier '{tier.name}'")


def build_tiers(
    split: TierSplit,
    intra: Supplier,
    inter: Supplier,
    base: HardwareProfile | None,
    origins: dict[str, Origin],
    all_to_all: tuple[LinkFit | None, LinkFit | None] = (None, None),
) -> tuple[list[Tier] | None, list[str]]:
    """The two tiers when the logs measured the network (and the intra-node tier is measured or
    the base gives it), with notes; ``(None, notes)`` leaves the base's tiers in place.
    ``all_to_all``: the (intra-node, network) all-to-all fits, each tier's ``all_to_all``
    where given, else its base tier's."""
    if not split.inter:
        return None, []
    base_tiers = base.tiers if base is not None else None
    first = base_tiers[0] if base_tiers and len(base_tiers) > 1 else None
    last = base_tiers[-1] if base_tiers else None
    chips = split.node_size or (first.chips if first is not None else None)
    if chips is None:
        return None, ["the logs measured rings over several hosts, but not the GPUs per node"]
    found: dict[str, Origin] = {}
    inner = _tier(INTRA, chips, intra, all_to_all[0], first, found, base)
    outer = _tier(NETWORK, None, inter, all_to_all[1], last, found, base)
    if inner is None or outer is None:
        missing = INTRA if inner is None else NETWORK
        return None, [
            f"no {missing} tier: the logs do not measure every kind there (all_gather, "
            "reduce_scatter, send_recv) and no base profile tier gives the rest"
        ]
    origins.update(found)
    hosts = sorted({m.hosts for m in split.inter if m.hosts})
    note = (
        f"tiers: rings inside one host fitted as '{INTRA}' ({chips} GPUs per node), rings over "
        f"{', '.join(map(str, hosts))} hosts as '{NETWORK}'"
    )
    return [inner, outer], [note]


def op_groups(
    measurements: Sequence[Measurement],
) -> dict[tuple[MeasuredOp, int], list[Measurement]]:
    """The inter-node measurements per op, on axis 0 (a tier has no mesh axis)."""
    groups: dict[tuple[MeasuredOp, int], list[Measurement]] = {}
    for m in measurements:
        groups.setdefault((m.op, 0), []).append(m)
    return groups
