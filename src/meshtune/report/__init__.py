"""Rich renderables. With :mod:`meshtune.cli`, the only place that imports rich."""
