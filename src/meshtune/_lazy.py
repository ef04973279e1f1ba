"""Package attributes imported on first use (PEP 562), so that importing a package does not
import every submodule behind its public names: ``meshtune plan`` imports
:mod:`meshtune.calibrate` and :mod:`meshtune.validation` but needs one small module of each."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_attributes(package: str, modules: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: a name of ``modules`` (public name -> the
    module that defines it) is imported from its module on first use and kept on the package;
    any other name raises :class:`AttributeError`."""

    def resolve(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module '{package}' has no attribute '{name}'")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return resolve
