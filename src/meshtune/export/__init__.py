"""From plan to training job: a plan exported to a framework's configuration, and a
framework's configuration read back as the split it describes.

One module per target, each with ``NAME``, ``TITLE``, ``render(plan, source) -> str`` and, for
the frameworks a user configures by file, ``read(text, source) -> Setup``:
:mod:`~meshtune.export.megatron` (command-line arguments), :mod:`~meshtune.export.maxtext`
(flat YAML overrides and logical-axis rules), :mod:`~meshtune.export.torchtitan` (TOML),
:mod:`~meshtune.export.deepspeed` (JSON) and :mod:`~meshtune.export.jax` (a standalone
``shard_map`` module). :data:`TARGETS` is the registry the CLI's ``--to`` and ``--from``
choices come from; nothing else names a target. docs/export.md shows each target's output and
what it cannot express.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from meshtune.errors import MeshtuneError
from meshtune.export import deepspeed, jax, maxtext, megatron, torchtitan
from meshtune.export.setup import Setup, gain_line, pinned_plan
from meshtune.plan import Plan


@dataclass(frozen=True)
class Target:
    """An export target: its name, its framework's title, the renderer and (if any) reader."""

    name: str
    title: str
    render: Callable[[Plan, str], str]
    read: Callable[[str, str], Setup] | None


TARGETS: dict[str, Target] = {
    m.NAME: Target(m.NAME, m.TITLE, m.render, getattr(m, "read", None))
    for m in (megatron, maxtext, torchtitan, deepspeed, jax)
}
READABLE = tuple(name for name, t in TARGETS.items() if t.read is not None)


def get_target(name: str) -> Target:
    """The target called ``name``; :class:`MeshtuneError` naming the known ones otherwise."""
    try:
        return TARGETS[name]
    except KeyError:
        raise MeshtuneError(
            f"unknown export target '{name}'; known: {', '.join(TARGETS)}"
        ) from None


def export_plan(plan: Plan, target: str, source: str) -> str:
    """The text of ``plan`` for ``target`` (``source`` names the plan file in the output)."""
    return get_target(target).render(plan, source)


def read_setup(framework: str, text: str, source: str) -> Setup:
    """The split a ``framework`` configuration file describes (:class:`Setup`)."""
    read = get_target(framework).read
    if read is None:
        raise MeshtuneError(
            f"meshtune reads no {framework} configuration; readable: {', '.join(READABLE)}"
        )
    return read(text, source)


__all__ = [
    "READABLE",
    "TARGETS",
    "Setup",
    "Target",
    "export_plan",
    "gain_line",
    "get_target",
    "pinned_plan",
    "read_setup",
]
