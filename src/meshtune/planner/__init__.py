"""The planner: inputs → search → :class:`~meshtune.plan.Plan`.

:func:`~meshtune.planner.make.make_plan` searches the requested algorithm(s) (phase 2) and,
with cluster options, the levels around the mesh; :mod:`~meshtune.planner.records` turns search
results into the plan file's records and :mod:`~meshtune.planner.cluster` assembles a cluster
plan's section."""
