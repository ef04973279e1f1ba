"""Every registered algorithm side by side: one GeMM, or a model over chip counts (MeshSlice §5).

Nothing here names an algorithm: every study iterates over :mod:`meshtune.algorithms.registry` (or
the names the caller lists), so an algorithm registered later appears in every study. Each
algorithm is judged at its own best mesh shape, dataflow and configuration (§4.2). Speedups are
stated for a *reference* algorithm (by default the registry's default) over each other one:
``speedup = time(other) / time(reference) − 1`` (the paper's "x % faster"; with equal FLOPs it
is also ``utilization(reference) / utilization(other) − 1``). Algorithms with no feasible mesh
at a size are reported with the reason, never raised.

The modules, from the studies down to what they share:

* :mod:`~meshtune.compare.gemm` — :func:`~meshtune.compare.gemm.gemm_study`, one GeMM
  ``C(m×n) = A(m×k)·B(k×n)`` (Figure 11's view of one GeMM), optionally with data parallelism
  (§7) and a ranking of every configuration tried.
* :mod:`~meshtune.compare.model` — :func:`~meshtune.compare.model.compare_models`, a model
  over chip counts (Figures 9–14, Tables 2 and 3, the cluster view), whose result records are
  in :mod:`~meshtune.compare.records`, its views in :mod:`~meshtune.compare.views` and the
  searches they share in :mod:`~meshtune.compare.searches`.
* :mod:`~meshtune.compare.cluster` — each algorithm at its best DP × PP × mesh split.
* :mod:`~meshtune.compare.breakdown` — where the time of a pass goes (Figure 10), and data
  parallelism's gradient reduction.
* :mod:`~meshtune.compare.selection` — which algorithms a study runs, the speedup formula and
  the reason given when none is feasible.
"""
