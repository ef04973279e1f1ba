"""The family floors priced in chunks, and the block floors built from them (issue 17).

:mod:`meshtune.cost.meshslice_family` and :mod:`meshtune.cost.wang_family` price a TP size's
passes on its meshes a chunk of (pass, mesh) entries at a time (:func:`meshtune.cost.vector
.chunks`), so that their arrays stay within the CPU's caches. Chunks change no float: every
list of passes, whatever the chunk size, gets the floats of one evaluation of them all (equal
to :meth:`Algorithm.layer_floor`'s, ``test_vector_pricing.py``), and the block floors of the
cluster search are those of the code before chunks (commit 362c65f), recorded as digests of
their bytes.
"""

from __future__ import annotations

import hashlib
import struct
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshtune.algorithms.registry import REGISTRY
from meshtune.catalog import load_model, load_profile
from meshtune.cost import vector
from meshtune.dataflow import Stationary, layer_dataflow
from meshtune.hardware.mesh import Mesh, mesh_shapes
from meshtune.model.layers import FcLayer
from meshtune.search.costing import ComputeFloors
from meshtune.search.space import SplitSpace
from meshtune.search.visit import BlockFloors

FAMILY = sorted(name for name, a in REGISTRY.items() if a.family_floors is not None)
ROWS = [(s, t) for s in Stationary for t in (False, True)]


@given(rows=st.integers(0, 300), columns=st.integers(1, 9000))
def test_chunks_cover_the_rows_in_order_within_the_size(rows: int, columns: int) -> None:
    parts = vector.chunks(rows, columns)
    covered = [row for part in parts for row in range(rows)[part]]
    assert covered == list(range(rows))
    for part in parts:
        count = len(range(rows)[part])
        assert count >= 1
        assert count == 1 or count * columns <= vector.FAMILY_CHUNK


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(FAMILY),
    tp=st.sampled_from([12, 64, 360]),
    profile=st.sampled_from(["tpuv4", "h100-8gpu-nodes"]),
    lists=st.lists(
        st.tuples(
            st.integers(1, 4096).map(lambda t: 8 * t),
            st.sampled_from(ROWS),
            st.sampled_from([1, 3]),
            st.integers(0, 3),
        ),
        min_size=1,
        max_size=8,
    ),
    chunk=st.sampled_from([1, 7, 100, vector.FAMILY_CHUNK]),
)
def test_block_floors_in_chunks_are_those_priced_at_once(
    name: str,
    tp: int,
    profile: str,
    lists: list[tuple[int, tuple[Stationary, bool], int, int]],
    chunk: int,
) -> None:
    # every pass of every list on every mesh of a TP size, cut into chunks of any size: the
    # floats of one evaluation of them all (grouped passes too), which test_vector_pricing
    # checks against layer_floor
    algorithm, meshes = REGISTRY[name], list(mesh_shapes(tp))
    profiles = [load_profile(profile)] * len(meshes)
    blocks = [
        layer_dataflow(FcLayer("fc", tokens, 4096, 14336, None, groups), *row).ops[:passes]
        for tokens, row, groups, passes in lists
    ]
    found: dict[int, list[bytes]] = {}
    for size in (chunk, 2**62):
        with mock.patch.object(vector, "FAMILY_CHUNK", size):
            together = algorithm.family_block_floors(meshes, profiles)
            assert together is not None
            found[size] = [floors.tobytes() for floors in together(blocks) if floors is not None]
    assert len(found[chunk]) == len(blocks)
    assert found[chunk] == found[2**62]


DIGESTS = {
    ("llama3-405b", "tpuv4", "meshslice"): "b056141a8dc8398f5a206b75c8d85640",
    ("llama3-405b", "tpuv4", "collective"): "b056141a8dc8398f5a206b75c8d85640",
    ("llama3-405b", "tpuv4", "wang"): "6e0602fc65ab86ccfb346562ee1bad44",
    ("mixtral-8x7b", "h100-8gpu-nodes", "meshslice"): "8bab5248f54573e3062e158196c65388",
    ("mixtral-8x7b", "h100-8gpu-nodes", "collective"): "8bab5248f54573e3062e158196c65388",
    ("mixtral-8x7b", "h100-8gpu-nodes", "wang"): "618f0090be2ce13420a559d5f608d662",
}
"""The first 32 hex digits of the SHA-256 of the block floors below, each list packed as
little-endian doubles in the order asked, as commit 362c65f computed them."""


@pytest.mark.parametrize("chunk", [vector.FAMILY_CHUNK, 5])
@pytest.mark.parametrize(("model_name", "profile_name", "name"), sorted(DIGESTS))
def test_block_floors_are_the_recorded_floats(
    model_name: str, profile_name: str, name: str, chunk: int
) -> None:
    model = load_model(model_name)
    space = SplitSpace.build(
        model, load_profile(profile_name), 1024, batch=512, seq_len=model.seq_len
    )
    eps = (1, 2) if model.moe is not None else (1,)
    sizes = {tp: [(micro, ep) for micro in (1, 3, 8, 27) for ep in eps] for tp in (720, 5040)}
    blocks = BlockFloors(space.costings[1], sizes)
    digest = hashlib.sha256()
    with mock.patch.object(vector, "FAMILY_CHUNK", chunk):
        for tp, pairs in sizes.items():
            meshes = tuple(mesh_shapes(tp))
            for micro, ep in pairs:
                floors = blocks.of(REGISTRY[name], meshes, micro, ep)
                assert floors is not None
                digest.update(struct.pack(f"<{len(floors)}d", *floors))
    assert digest.hexdigest()[:32] == DIGESTS[model_name, profile_name, name]


@pytest.mark.parametrize("model_name", ["gpt3", "mixtral-8x7b"])
def test_a_blocks_compute_floor_is_the_sum_of_its_compute_floors(model_name: str) -> None:
    model, profile = load_model(model_name), load_profile("tpuv4")
    space = SplitSpace.build(model, profile, 1024, batch=512, seq_len=model.seq_len)
    costing = space.costings[1]
    for micro in (1, 3, 8):
        block = costing.block(REGISTRY["meshslice"], micro)
        for chips in (1, 6, 512, Mesh(48, 20).chips):
            floors = ComputeFloors.of(block, chips, profile).floors
            assert costing.block_compute_floor(block, chips) == sum(floors)
