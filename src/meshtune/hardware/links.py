"""The links of a chip's network: the cost-model parameters of each collective kind, per mesh
axis and per network tier.

The communication parameters are those of the MeshSlice cost model (ISCA 2025, §3.2.2):
``cost_op = t_launch + (P - 1) * (t_sync + shard_bytes / bw)``, one triple per collective kind
and per mesh axis. Axis 0 is the ring of the P_r chips that share a mesh column (inter-row
traffic: the paper's AG_row / RdS_row); axis 1 is the ring of the P_c chips that share a mesh
row (inter-column traffic: AG_col / RdS_col).

No ``from __future__ import annotations``: pydantic would evaluate every annotation from its
string when each model class is created, on every start-up."""

import re
from enum import Enum
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from meshtune.units import FROZEN, Bandwidth, Latency, without_none


class CollectiveKind(str, Enum):
    """The collective operations the cost model knows."""

    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    SEND_RECV = "send_recv"


class LinkParams(BaseModel):
    """Cost-model parameters of one collective kind on one mesh axis (§3.2.2)."""

    model_config = FROZEN

    t_launch_s: Latency = Field(description="Fixed cost of launching the operation.")
    t_sync_s: Latency = Field(description="Synchronisation latency of each ring step.")
    bw_bytes_per_s: Bandwidth = Field(description="Bandwidth of one ring step's transfer.")


AXIS_KEY_PATTERN = re.compile(r"axis[0-9]")


class AxisTable(BaseModel):
    """One link kind's parameters per mesh axis: ``axis0`` and ``axis1`` (the two axes of the
    2D mesh) always, ``axis2`` … (depth, network tiers) when a profile describes them."""

    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)
    __pydantic_extra__: dict[str, LinkParams]

    axis0: LinkParams = Field(description="Ring of the P_r chips of a mesh column (inter-row).")
    axis1: LinkParams = Field(description="Ring of the P_c chips of a mesh row (inter-column).")

    @model_validator(mode="after")
    def _axis_keys(self) -> "AxisTable":
        for key in self.__pydantic_extra__:
            if not AXIS_KEY_PATTERN.fullmatch(key):
                raise ValueError(f"unknown key '{key}': axes are named axis0, axis1, axis2, …")
        return self

    def __getitem__(self, key: str) -> LinkParams:
        value = getattr(self, key, None) if key in ("axis0", "axis1") else None
        if value is None:
            value = self.__pydantic_extra__.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def axis_keys(self) -> list[str]:
        """The axis keys present, ascending."""
        return sorted(["axis0", "axis1", *self.__pydantic_extra__])


class Tier(BaseModel):
    """One level of a tiered network (e.g. the NVLink inside an 8-GPU node, then the network
    between nodes): a ring whose chips all lie within one unit of ``chips`` consecutive chips
    uses this tier's parameters (``meshtune.hardware.tiers``)."""

    model_config = FROZEN

    name: str = Field(min_length=1, description="e.g. 'nvlink' or 'network'.")
    chips: PositiveInt | None = Field(
        default=None, description="Chips per unit of this tier; None: every chip (the last)."
    )
    all_gather: LinkParams
    reduce_scatter: LinkParams
    send_recv: LinkParams
    all_to_all: LinkParams | None = Field(
        default=None, description="All-to-all over chips of this tier (expert parallelism)."
    )

    @model_serializer(mode="wrap")
    def _drop_unset_all_to_all(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        return without_none(handler(self), ("all_to_all",))
