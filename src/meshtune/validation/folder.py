"""Where the validation set lives and the error its files raise: the names that
:mod:`meshtune.validation.bounds` (read by every ``meshtune plan`` for its confidence line)
shares with :mod:`meshtune.validation.data`, kept here so that a plan does not import the
validation set's run models. :mod:`meshtune.validation.data` re-exports them."""

from __future__ import annotations

from pathlib import Path

from meshtune.catalog import catalog_dir
from meshtune.errors import MeshtuneError

BOUNDS_STEM = "bounds"
"""``validation/bounds.toml`` holds the recorded figures and goals, not runs."""


class ValidationSetError(MeshtuneError):
    """A validation file is unreadable or invalid, or a source key is unknown."""


def validation_dir() -> Path:
    """The shipped ``validation/`` folder (``$MESHTUNE_VALIDATION_DIR`` overrides), found the
    way the model and profile catalogs are (:func:`meshtune.catalog.catalog_dir`)."""
    return catalog_dir("validation")
