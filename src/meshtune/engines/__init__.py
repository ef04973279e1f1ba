"""Real execution engines for plans: JAX ``shard_map`` (MeshSlice §4.1), imported only on request.

This package's ``__init__`` and :mod:`meshtune.engines.passes` import no engine: the core stays
JAX-free. :mod:`meshtune.engines.jax_kernels` and :mod:`meshtune.engines.jax_engine` import JAX
and are loaded only by ``meshtune run`` / ``meshtune export`` (``pip install 'meshtune[jax]'``).
"""

from __future__ import annotations

import importlib.util

from meshtune.errors import EngineError

INSTALL_HINT = "pip install 'meshtune[jax]'"


def require_jax() -> None:
    """Raise :class:`EngineError` with the install command when JAX is not importable."""
    if importlib.util.find_spec("jax") is None:
        raise EngineError(f"the JAX engine needs the jax package: {INSTALL_HINT}")
