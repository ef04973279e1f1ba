"""What it is trained on: the hardware profile (:mod:`~meshtune.hardware.profile`), its network
tiers (:mod:`~meshtune.hardware.tiers`) and the mesh of chips (:mod:`~meshtune.hardware.mesh`)."""
