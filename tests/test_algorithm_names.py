"""The registry is the one place that knows an algorithm: no other module names one.

A registered name written as a string literal outside :mod:`meshtune.algorithms.registry` is a
module switching on that algorithm (``if name == "wang"``, a table keyed by names, a default):
the search, plan, verify, the timeline, the engines, compare and the reports ask the registry
instead (an entry's fields, or a name by its role: ``DEFAULT_ALGORITHM``,
``FRAMEWORK_TP_ALGORITHM``, ``GSPMD_ALGORITHM``). The literals are read from the sources with
``ast``, so a name in a comment or inside a longer text (a docstring, a help line) is not one.
:data:`ALLOWED` lists the few modules that hold such a literal for another reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import meshtune
from meshtune.algorithms.registry import REGISTRY, engine_kernels

SRC = Path(meshtune.__file__).resolve().parent
NAMES = frozenset(REGISTRY)

ALLOWED: tuple[tuple[str, frozenset[str], str], ...] = (
    ("meshtune.algorithms.registry", NAMES, "the registry, where the names are defined"),
    (
        "meshtune.engines",
        frozenset(engine_kernels().values()),
        "the JAX kernel families (Algorithm.kernel) carry the names of the algorithms they "
        "were written for, fixed by the exported programs' text; any other name is refused",
    ),
    ("meshtune.export.megatron", frozenset({"megatron"}), "the Megatron-LM export target"),
    ("meshtune.cli.export", frozenset({"megatron"}), "the Megatron-LM export target"),
    ("meshtune.export.maxtext", frozenset({"fsdp"}), "MaxText's mesh axis of that name"),
    ("meshtune.partition", frozenset({"fsdp"}), "the data layout named after FSDP"),
    (
        "meshtune.calibrate.formats.table",
        frozenset({"collective"}),
        "a benchmark log's column header",
    ),
    ("meshtune.validation.data", frozenset({"megatron"}), "Megatron-LM's FLOP formula"),
)
"""(module or package, the names it may write, why): a module under a listed package counts as
listed. Besides the registry and the kernel families these are the same words in another
vocabulary (an export target, a mesh axis, a layout, a log header, a FLOP formula)."""


def module_name(path: Path) -> str:
    """``meshtune.a.b`` of a source file (a package's ``__init__`` is the package)."""
    parts = ("meshtune", *path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def names_in(source: str) -> list[tuple[int, str]]:
    """(line, name) of every string literal of ``source`` equal to a registered name."""
    return sorted(
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in NAMES
    )


def allowance(module: str, name: str) -> int | None:
    """The index in :data:`ALLOWED` of the entry that lets ``module`` write ``name``, if any."""
    for i, (where, names, _) in enumerate(ALLOWED):
        if (module == where or module.startswith(f"{where}.")) and name in names:
            return i
    return None


def _literals() -> list[tuple[str, int, str]]:
    """(module, line, name) of every registered name written in the package's sources."""
    return [
        (module_name(path), line, name)
        for path in sorted(SRC.rglob("*.py"))
        for line, name in names_in(path.read_text(encoding="utf-8"))
    ]


def test_only_the_registry_names_an_algorithm() -> None:
    found = [
        f"{module}:{line}: '{name}'"
        for module, line, name in _literals()
        if allowance(module, name) is None
    ]
    assert found == [], "ask the registry (an entry's field or a role's constant) instead"


def test_every_allowance_is_used() -> None:
    used = {allowance(module, name) for module, _, name in _literals()} - {None}
    assert used == set(range(len(ALLOWED))), "drop the allowances nothing needs"


def test_the_scan_finds_a_planted_name() -> None:
    planted = 'def pick(a: str) -> int:\n    """Not "wang" here."""\n    return a == "wang"\n'
    assert names_in(planted) == [(3, "wang")]
    assert names_in('TABLE = {"1d_tp": 1, "wangs": 2}  # "fsdp"\n') == [(1, "1d_tp")]
    assert allowance("meshtune.search.levels", "meshslice") is None
    assert allowance("meshtune.engines.jax_engine", "meshslice") is not None
    assert allowance("meshtune.engines.jax_engine", "collective") is None
    assert allowance("meshtune.export.megatron", "collective") is None
    assert allowance("meshtune.enginesx", "meshslice") is None
