"""Ring size and shard from the array shapes a JAX / TPU collective benchmark reports.

JAX microbenchmarks on TPUs (``shard_map`` over a mesh axis) report the operand's global or
per-device shape, not a rank count, and the slice's topology name does not give P either
(``v4-16`` counts TensorCores, not chips; ``v5e-16`` counts chips; a 4x4 slice has rings of 4
along each axis). The shapes do: an all-gather's output holds P inputs, a reduce-scatter's input
holds P outputs, so P = elements(output) / elements(input) for all-gather and the inverse for
reduce-scatter (and all-to-all / all-reduce, whose shapes are equal, need a ranks column or
``--ranks``). The per-rank shard is the all-gather's input, the reduce-scatter's output, in
bytes at the row's dtype width; for the other ops the input is the whole buffer.
"""

from __future__ import annotations

import math
import re

from meshtune.calibrate.formats.log_units import BYTES_PER_ELEMENT
from meshtune.hardware.calibration import MeasuredOp

INPUT = ("input_shape", "in_shape", "operand_shape", "local_shape")
OUTPUT = ("output_shape", "out_shape", "result_shape")

_DIMS = re.compile(r"\d+")
_SHAPE = re.compile(r"^[\s(\[]*\d+(?:\s*[,x×]\s*\d+)*[\s,)\]]*$")


def elements(text: str) -> int | None:
    """Elements of a shape written ``(16, 8192, 128)``, ``[16,8192]`` or ``16x8192``, or None."""
    if not _SHAPE.match(text):
        return None
    dims = [int(d) for d in _DIMS.findall(text)]
    return math.prod(dims) if dims and len(text) <= 200 else None


def ranks_from_shapes(op: MeasuredOp, input_elements: int, output_elements: int) -> int | None:
    """P of an all-gather (output / input) or reduce-scatter (input / output); None for the
    other ops (equal shapes) or shapes whose ratio is not a whole number >= 2."""
    if op is MeasuredOp.ALL_GATHER:
        big, small = output_elements, input_elements
    elif op is MeasuredOp.REDUCE_SCATTER:
        big, small = input_elements, output_elements
    else:
        return None
    if small <= 0 or big % small or big // small < 2:
        return None
    return big // small


def bytes_from_shapes(
    op: MeasuredOp, input_elements: int, output_elements: int, dtype: str
) -> tuple[float, bool] | None:
    """``(bytes, is one rank's shard)`` at ``dtype``'s width: the all-gather's input and the
    reduce-scatter's output are the shard; for the other ops (equal shapes) the input is the
    whole buffer, cut into P shards as nccl-tests' ``size``. None for an unknown dtype."""
    width = BYTES_PER_ELEMENT.get(dtype.lower())
    if width is None:
        return None
    if op is MeasuredOp.ALL_GATHER:
        return float(input_elements * width), True
    if op is MeasuredOp.REDUCE_SCATTER:
        return float(output_elements * width), True
    return float(input_elements * width), False
