"""The catalogs: a name or a path → a model spec or a hardware profile.

Shipped files live in ``models/``, ``profiles/`` and ``validation/`` of the checkout (or under
``<sys.prefix>/share/meshtune`` for a regular install); the ``MESHTUNE_*_DIR`` variables
point elsewhere. A file's ``name`` is its stem."""

import os
import stat
import sys
from pathlib import Path
from typing import Any, Literal

from meshtune._toml import load_model_file
from meshtune.errors import MeshtuneError, ProfileError, SpecError
from meshtune.hardware.profile import HardwareProfile
from meshtune.io import is_folder, path_mode
from meshtune.model.spec import ModelSpec

_REPO_ROOT = Path(__file__).resolve().parents[2]


def catalog_dir(kind: Literal["models", "profiles", "validation"]) -> Path:
    """Directory of the shipped ``kind`` files.

    ``$MESHTUNE_MODELS_DIR`` / ``$MESHTUNE_PROFILES_DIR`` / ``$MESHTUNE_VALIDATION_DIR`` override
    the default, which is the ``models/``, ``profiles/`` or ``validation/`` folder of the source
    checkout (editable install) or, for a regular install, ``<sys.prefix>/share/meshtune/<kind>``
    where the wheel puts them.
    """
    override = os.environ.get(f"MESHTUNE_{kind.upper()}_DIR")
    if override:
        return Path(override)
    checkout = _REPO_ROOT / kind
    if checkout.is_dir():
        return checkout
    return Path(sys.prefix) / "share" / "meshtune" / kind


def catalog_names(kind: Literal["models", "profiles"]) -> list[str]:
    """Sorted stems of the ``*.toml`` files in the ``kind`` catalog."""
    folder = catalog_dir(kind)
    return sorted(p.stem for p in folder.glob("*.toml")) if folder.is_dir() else []


def catalog_problem(kind: Literal["models", "profiles"]) -> str | None:
    """Why the ``kind`` catalog folder cannot be listed (missing, not a folder), or None."""
    folder = catalog_dir(kind)
    if folder.is_dir():
        return None
    variable = f"MESHTUNE_{kind.upper()}_DIR"
    origin = f" (set by ${variable})" if os.environ.get(variable) else ""
    what = "is not a folder" if folder.exists() else "does not exist"
    return f"the {kind} folder {folder}{origin} {what}"


def file_json_schema(doc: type[ModelSpec] | type[HardwareProfile]) -> dict[str, Any]:
    """The JSON Schema of a model or profile TOML file: ``doc``'s, without the injected ``name``.

    A file's ``name`` is its stem and may not be written in the file, so the schema leaves it
    out of ``properties`` and ``required``: a document valid against it is a file that loads.
    """
    schema = doc.model_json_schema()
    schema["properties"].pop("name", None)
    schema["required"] = [field for field in schema.get("required", []) if field != "name"]
    schema["description"] = (
        f"{schema.get('description', '')} The file's name (its stem) is the catalog name."
    ).strip()
    return schema


def _check_file(
    path: Path, kind: Literal["models", "profiles"], error: type[MeshtuneError]
) -> Path:
    """``path`` if it is a file meshtune can read; else ``error`` saying what it is instead."""
    mode = path_mode(path, error)
    if mode is None:
        raise error(f"{path}: no such file")
    if stat.S_ISDIR(mode):
        raise error(f"{path}: is a folder; expected a {kind[:-1]} TOML file")
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
        raise error(f"{path}: not a regular file; expected a {kind[:-1]} TOML file")
    return path


def _resolve(
    name_or_path: str | Path, kind: Literal["models", "profiles"], error: type[MeshtuneError]
) -> Path:
    text = str(name_or_path)
    path = Path(text)
    looks_like_path = text.endswith((".toml", ".json")) or os.sep in text or "/" in text
    if isinstance(name_or_path, Path) or looks_like_path:
        if kind == "models" and is_folder(path):
            return path  # load_model looks for a Hugging Face config.json inside
        return _check_file(path, kind, error)
    singular = kind[:-1]
    candidate = catalog_dir(kind) / f"{text}.toml"
    try:
        in_catalog = path_mode(candidate, error) is not None
    except MeshtuneError:  # e.g. a name too long for the file system: no catalog name
        in_catalog = False
    if in_catalog:
        return _check_file(candidate, kind, error)
    if kind == "models" and is_folder(path):
        return path
    problem = catalog_problem(kind)
    if problem is not None:
        raise error(f"unknown {singular} '{text}': {problem}")
    known = ", ".join(catalog_names(kind)) or "(none found)"
    raise error(f"unknown {singular} '{text}'; known {kind}: {known}")


def load_model(name_or_path: str | Path) -> ModelSpec:
    """Load a model spec by catalog name (``gpt3``), TOML path or Hugging Face ``config.json``.

    A :class:`~pathlib.Path`, or a string ending in ``.toml`` / ``.json`` or containing a path
    separator, is a file; a ``.json`` file, or a folder holding ``config.json``, is read by
    :func:`meshtune.model.hf.read_hf_config`; any other string is a catalog name (or a folder).
    """
    path = _resolve(name_or_path, "models", SpecError)
    if is_folder(path) or path.suffix.lower() == ".json":
        from meshtune.model.hf import read_hf_config

        return read_hf_config(path).spec
    return load_model_file(path, ModelSpec, SpecError, name=path.stem)


def load_profile(name_or_path: str | Path) -> HardwareProfile:
    """Load a hardware profile by catalog name (``tpuv4``) or by path to a TOML file."""
    path = _resolve(name_or_path, "profiles", ProfileError)
    return load_model_file(path, HardwareProfile, ProfileError, name=path.stem)
