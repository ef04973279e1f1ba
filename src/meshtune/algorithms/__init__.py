"""Algorithms: what one is to the planner (:mod:`~meshtune.algorithms.base`) and the one registry
of them (:mod:`~meshtune.algorithms.registry`)."""
