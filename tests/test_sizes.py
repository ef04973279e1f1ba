"""No module over 500 lines and no function over 100, so that each idea has a module of its own
name and each function reads as a few named steps.

A module's size is its line count (as ``wc -l`` counts); a function's runs from its ``def`` line
to its last line, signature and docstring included. A nested function counts on its own and as
part of the function around it. Sizes are read from the sources (``ast``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import meshtune

SRC = Path(meshtune.__file__).resolve().parent

MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 100


def module_sizes(root: Path) -> dict[str, int]:
    """Every module under ``root`` (path relative to it, ``/``-separated) → its line count."""
    return {
        path.relative_to(root).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(root.rglob("*.py"))
    }


def function_sizes(root: Path) -> dict[str, int]:
    """Every function and method under ``root`` as ``path::qualified.name`` (a method under
    its class, a nested function under the function around it) → its line count."""
    sizes: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        where = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        stack: list[tuple[str, ast.AST]] = [("", tree)]
        while stack:
            prefix, node = stack.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    name = f"{prefix}{child.name}"
                    if not isinstance(child, ast.ClassDef):
                        end = child.end_lineno or child.lineno
                        sizes[f"{where}::{name}"] = end - child.lineno + 1
                    stack.append((f"{name}.", child))
                else:
                    stack.append((prefix, child))
    return sizes


def oversized(sizes: dict[str, int], limit: int) -> dict[str, int]:
    """The entries of ``sizes`` over ``limit``."""
    return {name: size for name, size in sizes.items() if size > limit}


def test_no_module_is_over_500_lines() -> None:
    assert oversized(module_sizes(SRC), MAX_MODULE_LINES) == {}


def test_no_function_is_over_100_lines() -> None:
    assert oversized(function_sizes(SRC), MAX_FUNCTION_LINES) == {}


def test_the_sizes_are_counted_as_stated(tmp_path: Path) -> None:
    """A planted module of 501 lines, a method of 101 and a nested function of 101 are found;
    a function of exactly 100 lines is not."""
    body = "".join(f"    x{i} = {i}\n" for i in range(99))
    inner = "".join(f"        y{i} = {i}\n" for i in range(100))
    source = (
        f"def fits():\n{body}"
        f"def outer():\n    def inner():\n{inner}"
        f"class Box:\n    def method(self):\n{inner}"
    )
    source += "#\n" * (501 - len(source.splitlines()))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "planted.py").write_text(source, encoding="utf-8")
    assert oversized(module_sizes(tmp_path), MAX_MODULE_LINES) == {"pkg/planted.py": 501}
    sizes = function_sizes(tmp_path)
    assert sizes["pkg/planted.py::fits"] == 100
    assert oversized(sizes, MAX_FUNCTION_LINES) == {
        "pkg/planted.py::outer": 102,
        "pkg/planted.py::outer.inner": 101,
        "pkg/planted.py::Box.method": 101,
    }
