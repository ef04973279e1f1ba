"""Distributed-matrix layouts and the slicing arithmetic of the universal one-sided GeMM.

Brock & Golin, "Slicing Is All You Need" (§3, §4.1, Algorithms 1–2). A distributed matrix is a
shape, a tile grid, a process grid and a replication factor c (c divides p): each of the c
replicas holds the whole matrix, spread over ``p / c`` processes. The tile grids
(:data:`~meshtune.partition.layout.KINDS`):

* ``rows`` — 1D row blocks, tile i on process i;
* ``cols`` — 1D column blocks, tile j on process j;
* ``blocks`` — 2D blocks over the most square process grid ``pr × pc`` of the replica;
* ``cyclic`` — 2D block-cyclic: a ``2pr × 2pc`` tile grid, tile (i, j) on process
  (i mod pr, j mod pc) (ScaLAPACK's convention);
* ``full`` — one tile that every process of the replica holds (Megatron's replicated input,
  sequence parallelism's replicated weight).

Extents need not divide: tile i of ``parts`` spans ``[i·h // parts, (i+1)·h // parts)``, so tiles
are ragged, and tiles of A, B and C need not line up with each other.

One matrix of ``C = A·B`` stays *stationary* (A, B or C; the paper keeps the largest by
default, meshtune ranks all three). Every process owns tiles of it and does every local
multiply that involves them (§4.1): for a tile of C it reads the overlapping tiles of A and B
(Algorithm 1), for a tile of A or B it reads the overlapping tiles of the other input and adds
into the overlapping tiles of C (Algorithm 2).
With replication, replica r does the part of the inner dimension k in its slice
``[r·k // c, (r+1)·k // c)`` and the replicas' partial C are reduced into replica 0 at the end
(``reduce_replicas``, §4.2). A piece of another matrix that the process does not hold is fetched
with one one-sided *get* (inputs) or added with one remote *accumulate* (C, into every process
that holds it). The *iteration offset* (§4.2) starts each stationary tile's walk over the moving
pieces at ``(i + j) mod count``, so that processes sharing a row or column of the tile grid do not
all read the same tile first.

Processes are numbered ``g = r · (p / c) + q`` (replica r, process q within it); on a
``P_r × P_c`` mesh process g sits at row ``g // P_c``, column ``g mod P_c``. A transfer between
two processes of one mesh row crosses the axis-1 ring, of one mesh column the axis-0 ring, and
any other crosses one link of each (:func:`~meshtune.partition.transfers.transfer_axes`).

The package: :mod:`~meshtune.partition.layout` (tile grids and their bounds),
:mod:`~meshtune.partition.partitioning` (the kinds of A, B and C, by name),
:mod:`~meshtune.partition.work` (what every process gets, accumulates and multiplies) and
:mod:`~meshtune.partition.transfers` (which mesh links a transfer crosses).
"""
