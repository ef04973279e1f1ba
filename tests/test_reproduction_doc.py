"""docs/reproduction.md's numbers are bench/reproduce.py's: the committed block must be what the
script renders now (regenerate with ``python bench/reproduce.py --write docs/reproduction.md``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reproduction.md"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reproduce", ROOT / "bench" / "reproduce.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_doc_is_what_the_script_renders() -> None:
    script = _script()
    committed = script.generated(DOC.read_text(encoding="utf-8"))
    assert committed == script.render(), (
        "docs/reproduction.md is stale: run python bench/reproduce.py --write docs/reproduction.md"
    )


def test_splice_replaces_only_the_generated_block() -> None:
    script = _script()
    doc = f"prose\n{script.BEGIN}\n\nold\n{script.END}\nmore prose\n"
    spliced = script.splice(doc, "new\n")
    assert spliced == f"prose\n{script.BEGIN}\n\nnew\n\n{script.END}\nmore prose\n"
    assert script.generated(spliced) == "new\n"
    with pytest.raises(SystemExit, match="GENERATED"):
        script.splice("no markers", "new\n")
