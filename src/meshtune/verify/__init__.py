"""Checking a committed plan: consistency with itself and its inputs
(:mod:`~meshtune.verify.consistency`, with its candidates and cluster sections in
:mod:`~meshtune.verify.candidates` and :mod:`~meshtune.verify.cluster`), execution on the
NumPy virtual mesh (:mod:`~meshtune.verify.run`), drift against today's planner
(:mod:`~meshtune.verify.drift`) and the CI verdict over many plans
(:mod:`~meshtune.verify.check`)."""
