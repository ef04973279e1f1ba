"""Shared fixtures of the planner tests.

``make_profile(**overrides)`` builds a :class:`~meshtune.hardware.profile.HardwareProfile` with
round numbers so that cost tests can be worked by hand. Its base values (SI units):

=================  ==========  ==========  ===============
op, axis           t_launch_s  t_sync_s    bw_bytes_per_s
=================  ==========  ==========  ===============
all_gather 0       10 µs       1 µs        1e9
all_gather 1       20 µs       2 µs        2e9
reduce_scatter 0   30 µs       3 µs        0.5e9
reduce_scatter 1   40 µs       4 µs        4e9
send_recv 0        50 µs       5 µs        1e9
send_recv 1        60 µs       6 µs        1e9
=================  ==========  ==========  ===============

effective 1e12 FLOP/s, peak 2e12 FLOP/s, 2 bytes per element, slice block B = 8. Every
(op, axis) triple differs, so a test that picks the wrong one notices. Overrides are merged
recursively: ``make_profile(all_gather={"axis0": {"t_sync_s": 0.0}})`` changes one value.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import settings
from typer.testing import CliRunner

from meshtune.catalog import load_model, load_profile
from meshtune.hardware.profile import HardwareProfile
from meshtune.io import FIFO_WAIT_ENV
from meshtune.model.spec import ModelSpec

# No hypothesis deadline anywhere, a bare @given included: the suite runs on loaded machines and
# never bounds the wall clock (issue 20; tests/test_meta_wallclock.py checks it).
settings.register_profile("meshtune", deadline=None)
settings.load_profile("meshtune")

# An input FIFO nothing writes to is refused after MESHTUNE_FIFO_WAIT_S (default 60 s, see
# meshtune.io): the suite's FIFOs with no writer (special-file fuzz cases) need not wait that
# long, and children the fuzz harness starts inherit the setting. Every FIFO of the suite that
# has a writer sets its own wait (tests/test_io.py), so half a second only bounds the cases that
# wait for nothing (the ten special-file cases alone slept 50 s at 5 s each).
os.environ.setdefault(FIFO_WAIT_ENV, "0.5")

ROUND_PROFILE: dict[str, Any] = {
    "name": "round",
    "description": "round numbers for hand-worked cost tests",
    "sources": ["tests/conftest.py"],
    "peak_flops_per_s": 2e12,
    "effective_flops_per_s": 1e12,
    "bytes_per_element": 2,
    "slice_block": 8,
    "all_gather": {
        "axis0": {"t_launch_s": 10e-6, "t_sync_s": 1e-6, "bw_bytes_per_s": 1e9},
        "axis1": {"t_launch_s": 20e-6, "t_sync_s": 2e-6, "bw_bytes_per_s": 2e9},
    },
    "reduce_scatter": {
        "axis0": {"t_launch_s": 30e-6, "t_sync_s": 3e-6, "bw_bytes_per_s": 0.5e9},
        "axis1": {"t_launch_s": 40e-6, "t_sync_s": 4e-6, "bw_bytes_per_s": 4e9},
    },
    "send_recv": {
        "axis0": {"t_launch_s": 50e-6, "t_sync_s": 5e-6, "bw_bytes_per_s": 1e9},
        "axis1": {"t_launch_s": 60e-6, "t_sync_s": 6e-6, "bw_bytes_per_s": 1e9},
    },
}


def _merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def make_profile(**overrides: Any) -> HardwareProfile:
    """The round-number profile of the module docstring, with ``overrides`` merged in."""
    return HardwareProfile.model_validate(_merge(ROUND_PROFILE, overrides))


@pytest.fixture(name="make_profile", scope="session")
def _make_profile() -> Callable[..., HardwareProfile]:
    """The :func:`make_profile` factory (session scope, so hypothesis tests may use it)."""
    return make_profile


@pytest.fixture(scope="session")
def round_profile() -> HardwareProfile:
    """``make_profile()`` without overrides."""
    return make_profile()


@pytest.fixture(scope="session")
def tpuv4() -> HardwareProfile:
    """The shipped TPUv4 profile."""
    return load_profile("tpuv4")


@pytest.fixture(scope="session")
def gpt3() -> ModelSpec:
    """The shipped GPT-3 175B spec."""
    return load_model("gpt3")


@pytest.fixture
def runner() -> CliRunner:
    """A typer CliRunner (stdout and stderr are captured separately in this typer).

    Rendering is pinned to a plain 120-column terminal whatever the environment running the
    tests says (a test may still pass its own ``COLUMNS``).
    """
    return CliRunner(
        env={"COLUMNS": "120", "NO_COLOR": "1", "FORCE_COLOR": None, "TTY_COMPATIBLE": None}
    )
