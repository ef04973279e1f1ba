"""Ring collective cost (MeshSlice §3.2.2).

``cost_op = t_launch + (P − 1) · (t_sync + shard_bytes / bw)``: an all-gather or
reduce-scatter on a ring of P chips takes P − 1 synchronised steps, each moving one shard per
link (Figure 3, right), plus a fixed launch overhead. For a reduce-scatter the shard is the
output shard each chip ends with. A ring of one chip moves nothing and launches nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshtune.hardware.links import LinkParams


@dataclass(frozen=True, init=False)
class CommTime:
    """A communication time split as in Figure 10: launch, sync and transfer (seconds)."""

    launch_s: float = 0.0
    sync_s: float = 0.0
    transfer_s: float = 0.0

    def __init__(self, launch_s: float = 0.0, sync_s: float = 0.0, transfer_s: float = 0.0) -> None:
        # Written at once, not field by field through object.__setattr__ as a frozen
        # dataclass's own __init__ does: the search makes many.
        self.__dict__.update(launch_s=launch_s, sync_s=sync_s, transfer_s=transfer_s)

    @property
    def total_s(self) -> float:
        """launch + sync + transfer."""
        return self.launch_s + self.sync_s + self.transfer_s

    def __add__(self, other: CommTime) -> CommTime:
        return CommTime(
            self.launch_s + other.launch_s,
            self.sync_s + other.sync_s,
            self.transfer_s + other.transfer_s,
        )

    def scaled(self, factor: float) -> CommTime:
        """Every part multiplied by ``factor`` (e.g. the number of loop iterations)."""
        return CommTime(self.launch_s * factor, self.sync_s * factor, self.transfer_s * factor)


def steps_time(link: LinkParams, steps: int, step_bytes: float) -> CommTime:
    """``t_launch + steps · (t_sync + step_bytes / bw)``: a communication of ``steps``
    synchronised steps of ``step_bytes`` each over the busiest link (§3.2.2)."""
    return CommTime(
        launch_s=link.t_launch_s,
        sync_s=steps * link.t_sync_s,
        transfer_s=steps * step_bytes / link.bw_bytes_per_s,
    )


def steps_seconds(link: LinkParams, steps: int, step_bytes: float) -> float:
    """:func:`steps_time` ``.total_s``, the same floats, without building the parts: for the
    search's floors, which price many communications and keep only their total."""
    return link.t_launch_s + steps * link.t_sync_s + steps * step_bytes / link.bw_bytes_per_s


def collective_time(link: LinkParams, ring: int, shard_bytes: float) -> CommTime:
    """Time of one all-gather / reduce-scatter of ``shard_bytes`` per chip on a ``ring``.

    ``t_launch + (ring − 1) · (t_sync + shard_bytes / bw)``; zero when ``ring == 1``.
    """
    if ring < 1:
        raise ValueError(f"ring size must be >= 1, got {ring}")
    if shard_bytes < 0:
        raise ValueError(f"shard_bytes must be >= 0, got {shard_bytes}")
    if ring == 1:
        return CommTime()
    return steps_time(link, ring - 1, shard_bytes)
