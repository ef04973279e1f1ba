"""What it is trained on: the hardware profile (:mod:`~meshtune.hardware.profile`), the links of
its network (:mod:`~meshtune.hardware.links`), its GeMM rates (:mod:`~meshtune.hardware.compute`)
and the record of its calibration (:mod:`~meshtune.hardware.calibration`); which network tier a
ring lands on (:mod:`~meshtune.hardware.tiers`) and the mesh of chips
(:mod:`~meshtune.hardware.mesh`)."""
