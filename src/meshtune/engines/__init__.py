"""Real execution engines for plans: JAX ``shard_map`` (MeshSlice §4.1), imported only on request.

This package's ``__init__`` and :mod:`meshtune.engines.passes` import no engine: the core stays
JAX-free. :mod:`meshtune.engines.jax_kernels` and :mod:`meshtune.engines.jax_engine` import JAX
and are loaded only by ``meshtune run`` / ``meshtune export`` (``pip install 'meshtune[jax]'``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import TypeVar

from meshtune.errors import EngineError

T = TypeVar("T")

INSTALL_HINT = "pip install 'meshtune[jax]'"


def require_jax() -> None:
    """Raise :class:`EngineError` with the install command when JAX is not importable."""
    if importlib.util.find_spec("jax") is None:
        raise EngineError(f"the JAX engine needs the jax package: {INSTALL_HINT}")


def pick_devices(default: Sequence[T], cpu: Sequence[T], needed: int) -> Sequence[T] | None:
    """The devices a mesh of ``needed`` chips runs on: the default backend's when it has
    enough (accelerators when present), else the host CPU devices when they suffice (the
    virtual ones ``meshtune run`` asks XLA for), else ``None``."""
    if len(default) >= needed:
        return default
    if len(cpu) >= needed:
        return cpu
    return None
