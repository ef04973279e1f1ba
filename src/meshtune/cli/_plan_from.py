"""``meshtune plan MODEL --chips N --from FRAMEWORK FILE``: the user's current split, priced,
beside meshtune's best (:mod:`meshtune.export.setup`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from meshtune.cli._app import fail, warn
from meshtune.dataflow import DataflowMode
from meshtune.errors import SetupFileError
from meshtune.hardware.profile import HardwareProfile
from meshtune.io import read_text
from meshtune.model.spec import ModelSpec
from meshtune.plan import Plan
from meshtune.planner.make import make_plan
from meshtune.step.options import ClusterOptions

_SHOWN_UNUSED = 12


def plan_from(
    setup_file: tuple[str, Path],
    model: ModelSpec,
    profile: HardwareProfile,
    chips: int,
    *,
    batch: int | None,
    seq_len: int | None,
    mode: DataflowMode,
    algorithm: str,
    levels: ClusterOptions,
) -> tuple[Plan, str]:
    """The pinned plan of the file's split and the line comparing it with the best plan
    (searched with ``algorithm`` and the same batch, sequence, recompute and headroom).
    Notes and unused keys of the file go to stderr as warnings, once both plans exist."""
    from meshtune.export import READABLE, gain_line, pinned_plan, read_setup
    from meshtune.export.setup import model_notes

    framework, path = setup_file
    if framework not in READABLE:
        raise fail(f"--from {framework}: not a readable framework; readable: {', '.join(READABLE)}")
    text = read_text(path, f"a {framework} configuration", SetupFileError)
    setup = read_setup(framework, text, str(path))
    current = pinned_plan(
        setup,
        model,
        profile,
        chips,
        batch=batch,
        seq_len=seq_len,
        mode=mode,
        levels=levels,
    )
    best = make_plan(
        model,
        profile,
        chips,
        batch=current.inputs.batch,
        seq_len=current.inputs.seq_len,
        mode=mode,
        algorithm=algorithm,
        top=1,
        cluster=replace(
            levels,
            step=replace(
                levels.step,
                recompute=setup.recompute or levels.step.recompute,
                attention=setup.attention or levels.step.attention,
            ),
        ),
    )
    # warnings only once both plans exist: a refused file is one error line
    for note in (*setup.notes, *model_notes(setup, model)):
        warn(f"{path}: {note}")
    if setup.unused:
        shown = ", ".join(setup.unused[:_SHOWN_UNUSED])
        more = f" and {len(setup.unused) - _SHOWN_UNUSED} more" if len(setup.unused) > 12 else ""
        warn(f"{path}: not modelled by meshtune, ignored: {shown}{more}")
    return current, gain_line(current, best)
