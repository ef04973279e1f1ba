"""The options record (meshtune.step.options): every field an option with one default, a knob
and a docstring; its value checks come from the field types; :func:`option_args` spells the
command line the CLI reads."""

from __future__ import annotations

import ast
import inspect
import math
import re
from dataclasses import MISSING, fields

import pytest

from meshtune.errors import InfeasibleError
from meshtune.step import options as options_module
from meshtune.step.options import ClusterOptions, StepOptions, option_args, option_fields


def _documented_fields(name: str) -> set[str]:
    """The fields of class ``name`` in meshtune.step.options followed by a docstring."""
    tree = ast.parse(inspect.getsource(options_module))
    [record] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    return {
        field.target.id
        for field, after in zip(record.body, record.body[1:], strict=False)
        if isinstance(field, ast.AnnAssign)
        and isinstance(field.target, ast.Name)
        and isinstance(after, ast.Expr)
        and isinstance(after.value, ast.Constant)
        and isinstance(after.value.value, str)
    }


def test_every_option_has_one_default_a_knob_and_a_docstring() -> None:
    names = {f.name for f in fields(StepOptions)}
    assert {f.name for f, _, _ in option_fields(StepOptions)} == names
    assert _documented_fields("StepOptions") == names
    assert _documented_fields("ClusterOptions") == {f.name for f in fields(ClusterOptions)}
    for f, _, about in option_fields(StepOptions):
        assert f.default is not MISSING, f.name
        assert about.summary, f.name
    assert StepOptions() == options_module.DEFAULT_OPTIONS == ClusterOptions().step


@pytest.mark.parametrize(
    ("field", "bad", "message"),
    [
        ("headroom", 1.0, "headroom must be a finite number in [0, 1), got 1.0"),
        ("headroom", math.nan, "headroom must be a finite number in [0, 1), got nan"),
        ("block_overhead_s", -1e-3, "block_overhead_s must be a finite number in [0, 1], got"),
        ("block_overhead_s", math.inf, "block_overhead_s must be a finite number in [0, 1], got"),
        ("schedule", "gpipe", "schedule 'gpipe' is not one of 1f1b, dualpipe"),
        ("cp_comm", "a2a", "cp_comm 'a2a' is not one of ring, all-gather"),
        ("dropout", "yes", "dropout must be true or false, got 'yes'"),
    ],
)
def test_a_bad_value_is_refused_naming_it(field: str, bad: object, message: str) -> None:
    with pytest.raises(InfeasibleError, match=re.escape(message)):
        StepOptions(**{field: bad})  # type: ignore[arg-type]


def test_option_args_spell_every_pin_and_option() -> None:
    options = ClusterOptions(
        dp=2,
        zero1=True,
        step=StepOptions(
            headroom=0.25,
            dropout=True,
            grad_overlap=False,
            schedule="dualpipe",
            block_overhead_s=1e-3,
        ),
    )
    args = option_args(options)
    assert args[:3] == ["--dp", "2", "--zero1"]  # levels first; None pins and no --no-zero1
    assert args[args.index("--headroom") + 1] == "0.25"
    assert args[args.index("--schedule") + 1] == "dualpipe"
    assert {"--dropout", "--no-grad-overlap", "--fp32-grads"} <= set(args)
    assert not any("overhead" in arg for arg in args)  # --engine sets it: no flag of its own
    assert option_args(ClusterOptions())[:2] == ["--recompute", "selective"]
