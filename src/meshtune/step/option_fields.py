"""The pydantic types of the step options that plan files (:class:`meshtune.plan.PlanLevels`,
:class:`meshtune.plan.ClusterPlan`) and validation rows (:class:`meshtune.validation.data.Run`)
record: each declared once, with its allowed values and its description; the defaults are
those of :class:`meshtune.step.options.StepOptions`, written where the field is."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

GradAccumulationField = Annotated[
    Literal["fused", "separate"],
    Field(description="Gradients added into the buffer by the GeMMs or a pass."),
]
GradAllReduceField = Annotated[
    bool, Field(description="Gradients all-reduced whole even with ZeRO-1/2.")
]
Zero3RecomputeGatherField = Annotated[
    bool, Field(description="ZeRO-3's recomputed forward gathers the weights again.")
]
CpCommField = Annotated[
    Literal["ring", "all-gather"],
    Field(description="How CP moves K and V: a ring, or an exposed all-gather."),
]
ScheduleField = Annotated[
    Literal["1f1b", "dualpipe"],
    Field(description="Pipeline schedule: 1F1B (interleaved when v > 1), DualPipe."),
]
PrecisionField = Annotated[
    Literal["bf16", "fp8"], Field(description="FC GeMMs in bf16 or FP8 (DeepSeek-V3 §3.3).")
]
