"""The step model: one training step of a split, priced per chip, knowing nothing of search.

Layout (docs/cluster.md, "The step model"): :mod:`~meshtune.step.work` (attention core,
memory-bound work, embedding, LM head, loss, optimizer), :mod:`~meshtune.step.comms` (DP
reduction, ZeRO-3, stage sends), :mod:`~meshtune.step.pipeline` (stage layout, 1F1B and
interleaved schedules), :mod:`~meshtune.step.memory` (memory per chip) and
:mod:`~meshtune.step.model` (:func:`price_step`, which composes them into the
:class:`~meshtune.step.cost.StepCost` record); :mod:`~meshtune.step.bounds` holds the
cluster search's lower bounds, priced with the same functions. ``plan``, ``compare``,
``verify`` and the cluster search all price steps through here.
"""

from meshtune.step.block import BlockFc
from meshtune.step.cost import StepCost, StepSplit
from meshtune.step.model import model_flops, price_step
from meshtune.step.options import StepOptions
from meshtune.step.work import ATTENTION_KINDS, DEFAULT_ATTENTION, AttentionKind

__all__ = [
    "ATTENTION_KINDS",
    "DEFAULT_ATTENTION",
    "AttentionKind",
    "BlockFc",
    "StepCost",
    "StepOptions",
    "StepSplit",
    "model_flops",
    "price_step",
]
