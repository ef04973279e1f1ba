"""The crashes and hangs the command fuzzing found, one case each (they failed before the fix).

- `models import` of a GPT-2 config with ``"n_head": 0``: ZeroDivisionError in meshtune/hf.py
  (head width = hidden / heads); now one line naming the field and its value.
- `gemm 5040 5040 5040 --chips 5040` took 4 s (`--chips 720720`: minutes): Wang's and SUMMA's
  cost built lists of u = ring / S repeated shifts or blocks per configuration,
  O(ring × divisors) per mesh. The cost of u repeats is now u times one (``stage(..., times=u)``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from fuzzlib import REPO, Case, run, violation

from meshtune.cost.schedule import parallel_time, shift, stage
from meshtune.specs import CollectiveKind, load_profile


def test_hf_config_with_zero_heads(tmp_path: Path) -> None:
    config = json.loads((REPO / "tests" / "hf" / "configs" / "gpt2" / "config.json").read_text())
    config["n_head"] = 0
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    result, seconds, _ = run(Case(["models", "import", str(path)], "n_head 0"))
    assert violation(result, seconds) is None
    assert result.exit_code == 2
    assert "heads is 0" in result.stderr


def test_gemm_on_a_highly_composite_chip_count_answers_quickly() -> None:
    args = ["gemm", "--chips", "5040", "--algorithms", "wang,summa", "--", "5040", "5040", "5040"]
    result, seconds, _ = run(Case(args, "5040 chips (60 divisors)"))
    assert violation(result, seconds) is None
    assert result.exit_code == 0


def test_stage_of_repeated_comms_is_the_stage_of_the_repeated_list() -> None:
    """``stage(g, comms, times=u)`` prices what ``stage(g, comms * u)`` priced, with the
    shifts overlapped and not."""
    base = load_profile("tpuv4")
    for overlapped in (base.overlapped, [CollectiveKind.ALL_GATHER]):
        profile = base.model_copy(update={"overlapped": overlapped})
        one = shift(0, 8, 4096.0)
        for g in (0.0, 1e-6, 1e-3):
            for u in (1, 3, 8):
                want = stage(g, one * u, profile)
                assert math.isclose(stage(g, one, profile, times=u), want, rel_tol=1e-12)
                assert math.isclose(
                    u * parallel_time(one, profile), parallel_time(one * u, profile), rel_tol=1e-12
                )
