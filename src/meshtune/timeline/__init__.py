"""Timelines of a plan: the discrete-event replay (:mod:`~meshtune.timeline.replay`) of each
pass's task graph (:mod:`~meshtune.timeline.graphs`), its trace-event file
(:mod:`~meshtune.timeline.trace`) and the whole training step (:mod:`~meshtune.timeline.step`)."""
