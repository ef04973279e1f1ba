"""Hugging Face ``config.json`` files as model specs, without the ``transformers`` package.

The FC layers of a block (MeshSlice §4.4; :mod:`meshtune.model.layers`) need the number of blocks,
the model width, the query and key/value heads and their width, the MLP width and whether the MLP is
gated (gate and up projections, as in SwiGLU and GeGLU) or not. Each architecture family names
these differently; :data:`meshtune.model.hf_families.FAMILIES` lists, per family, the
``config.json`` keys each :class:`~meshtune.model.spec.ModelSpec` field may come from (the first
present wins) and the rule for a field the file may leave out (the family's fixed value, the
``transformers`` default).
:func:`read_hf_config` returns the spec together with its *provenance*: for every spec field,
the key it was read from or the rule that gave it.

Supported ``model_type`` values (or ``architectures`` names when ``model_type`` is absent):
Llama, Mistral, Qwen2, Gemma / Gemma 2, GPT-2 (also GPT-3 written in GPT-2 naming), GPT-NeoX,
OPT, BLOOM and Falcon (``falcon``, ``RefinedWeb``, ``RefinedWebModel``), and the mixtures of
experts Mixtral, Qwen2-MoE, OLMoE, DeepSeek-V2 / V3 and DBRX (their expert keys and the
default sequence length: :mod:`meshtune.model.hf_extras`).
"""

from __future__ import annotations

import json
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import tomli_w
from pydantic import ValidationError

from meshtune._toml import describe_validation_error
from meshtune._version import __version__
from meshtune.errors import SpecError, printable
from meshtune.io import StrictJsonError, path_mode, read_bytes, strict_json
from meshtune.model.hf_extras import (
    Config,
    ignored_keys,
    integer,
    mla_fields,
    moe_fields,
    refuse_hidden_experts,
    sequence_length,
    sliding_window,
)
from meshtune.model.hf_families import CONFIG_NAME, FIELDS, family_of
from meshtune.model.spec import ModelSpec

MAX_CONFIG_BYTES = 4 * 1024 * 1024  # real config.json files are a few KB


@dataclass(frozen=True)
class HfImport:
    """A spec read from ``config.json`` and, per spec field, where its value came from."""

    spec: ModelSpec
    family: str
    provenance: dict[str, str]
    warnings: tuple[str, ...] = ()
    ignored: dict[str, str] = field(default_factory=dict)


def config_path(path: Path) -> Path:
    """``path`` itself, or the ``config.json`` inside the folder ``path``.

    Raises :class:`SpecError` for a folder without one or a missing path.
    """
    mode = path_mode(path, SpecError)
    if mode is not None and stat.S_ISDIR(mode):
        inside = path / CONFIG_NAME
        inside_mode = path_mode(inside, SpecError)
        if inside_mode is None or stat.S_ISDIR(inside_mode):
            raise SpecError(
                f"{path}: folder has no {CONFIG_NAME}; expected a model TOML file, a Hugging "
                f"Face {CONFIG_NAME} or a folder holding one"
            )
        return inside
    if mode is None:
        raise SpecError(f"{path}: no such file")
    return path


def _read_json(path: Path) -> dict[str, Any]:
    expected = f"expected a Hugging Face {CONFIG_NAME}"
    raw = read_bytes(path, f"a Hugging Face {CONFIG_NAME}", SpecError, limit=MAX_CONFIG_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not a text file; {expected}") from None
    try:
        data = strict_json(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg}); {expected}") from None
    except StrictJsonError as exc:
        raise SpecError(f"{path}: invalid JSON ({exc}); {expected}") from None
    except ValueError:
        raise SpecError(f"{path}: JSON with out-of-range values or nesting; {expected}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: top level is not a JSON object; {expected}")
    return data


def spec_from_config(config: Config, *, name: str, source: str) -> HfImport:
    """Build the spec of a parsed ``config.json`` (``source`` names it in messages).

    Raises :class:`SpecError` naming every missing key of the family, a non-integer value, or
    a spec that does not validate.
    """
    family = family_of(config, source)
    if not family.moe:
        refuse_hidden_experts(config, family.label, source)
    values: dict[str, int] = {}
    provenance: dict[str, str] = {}
    missing: list[str] = []
    for spec_field in FIELDS:
        keys = family.keys[spec_field]
        found = next(((k, v) for k in keys if (v := integer(config, k, source)) is not None), None)
        if found is not None:
            values[spec_field], provenance[spec_field] = found[1], f"config key '{found[0]}'"
        elif spec_field not in family.defaults:
            missing.append(" or ".join(f"'{k}'" for k in keys) + f" ({spec_field})")
    if missing:
        raise SpecError(f"{source}: {family.label} config is missing {', '.join(missing)}")
    for spec_field in FIELDS:
        if spec_field not in values:
            values[spec_field], why = family.defaults[spec_field](values, config)
            provenance[spec_field] = f"derived: {why}"
    extra: dict[str, Any] = {}
    warnings: list[str] = []
    length_key = provenance["seq_len"].removeprefix("config key ").strip("'")
    if length_key in family.keys["seq_len"]:
        choice = sequence_length(config, length_key, values["seq_len"], source)
        values["seq_len"], provenance["seq_len"] = choice.seq_len, choice.how
        warnings.append(choice.warning)
        if choice.context_len is not None:
            extra["context_len"] = choice.context_len
            provenance["context_len"] = f"config key '{length_key}' (a note)"
    if family.moe:
        extra["moe"], moe_provenance = moe_fields(config, family.model_types[0], source)
        provenance |= moe_provenance
    mla, mla_provenance = mla_fields(config, source)
    if mla:
        extra["mla"] = mla
        provenance |= mla_provenance
    window = sliding_window(config, family.label, source)
    if window is not None:
        extra["sliding_window"] = window
        provenance["sliding_window"] = "config key 'sliding_window'"
    mlp: Literal["gelu", "swiglu"] = "swiglu" if family.gated else "gelu"
    provenance["mlp"] = (
        f"{family.label} family: gated MLP (gate and up projections)"
        if family.gated
        else f"{family.label} family: one up projection"
    )
    model_type = config.get("model_type", family.model_types[0])
    # Free text from the file, printed in reports and written in the TOML: one printable line.
    shown = config.get("_name_or_path")
    from_config = isinstance(shown, str) and bool(shown)
    display = printable(str(shown)) if from_config else name
    # The spec records its provenance compactly: "blocks<-n_layer, head_dim<-hidden / heads".
    compact = ", ".join(
        f"{key}<-{how.removeprefix('derived: ').removeprefix('config key ').strip(chr(39))}"
        for key, how in provenance.items()
        if key != "mlp" and "." not in key and key != "context_len"
    )
    try:
        spec = ModelSpec.model_validate(
            {
                "name": name,
                "display_name": display,
                "source": printable(
                    f"Hugging Face {CONFIG_NAME} (model_type {model_type}) {source}: "
                    f"{compact}; mlp {mlp} ({family.label} family)"
                ),
                "mlp": mlp,
                **values,
                **extra,
            }
        )
    except ValidationError as exc:
        raise SpecError(f"{source}: {describe_validation_error(exc)}") from None
    provenance["display_name"] = "config key '_name_or_path'" if from_config else "the model's name"
    ignored = ignored_keys(config, read=frozenset(k for k in extra if k == "sliding_window"))
    return HfImport(spec, family.label, provenance, tuple(warnings), ignored)


def read_hf_config(path: Path, *, name: str | None = None) -> HfImport:
    """Read a ``config.json`` (or the one in folder ``path``) into a spec and its provenance.

    The spec's name is ``name``, else the folder's name for a file called ``config.json``, else
    the file's stem.
    """
    file = config_path(path)
    if name is None:
        name = file.parent.resolve().name if file.name == CONFIG_NAME else file.stem
    return spec_from_config(_read_json(file), name=name, source=str(path))


def spec_toml(
    spec: ModelSpec,
    provenance: Mapping[str, str] | None = None,
    notes: Sequence[str] = (),
) -> str:
    """The TOML of a model file for ``spec`` (its name is the file stem, so it is left out).

    With ``provenance``, a comment header lists where each field came from, then ``notes``
    (warnings, ignored keys), one comment line each. Every string goes
    through :func:`~meshtune.errors.printable` in a comment and through ``tomli_w`` in the body,
    so whatever a field holds (newlines, NUL, escape sequences), the file loads back.
    """
    header = [f"{spec.display_name}: written by meshtune {__version__}", spec.source]
    if provenance:
        width = max(map(len, provenance))
        header += [f"  {key:<{width}}  <- {how}" for key, how in provenance.items()]
    header += [f"note: {note}" for note in notes]
    body = tomli_w.dumps(spec.model_dump(mode="json", exclude={"name"}, exclude_none=True))
    return "".join(f"# {printable(line)}\n" for line in header) + body
