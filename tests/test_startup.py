"""Start-up of the command line (issue 17, item 3): commands are imported on use.

``meshtune plan`` must not import what only other commands need (scipy for calibration,
matplotlib for plots, JAX, the NumPy executor, the other command modules). The check counts
modules, never time.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from typing import Any

import meshtune.cli
import meshtune.validation
from meshtune.cli import ALL_MODULES, COMMAND_MODULES, load_commands

HEAVY = (
    "scipy",
    "matplotlib",
    "jax",
    "meshtune.executor",
    "meshtune.engines",
    "meshtune.verify.run",
    # what only `validate` and `plan --check` need: the plan's confidence line reads
    # meshtune.validation.confidence alone
    "meshtune.validation.predict",
    "meshtune.validation.report",
    "meshtune.validation.stats",
    "meshtune.verify.drift",
    # the validation set's run models: the confidence line reads bounds.toml alone
    # (meshtune.validation.folder holds the names bounds.py shares with them)
    "meshtune.validation.data",
    # the cost models of the algorithms no plan compares with (meshtune.compare.alternatives), and
    # the one-sided GeMM's partitioner, imported when that algorithm is priced
    "meshtune.cost.summa",
    "meshtune.cost.cannon",
    "meshtune.cost.primepar",
    "meshtune.cost.tesseract",
    "meshtune.cost.onesided",
    "meshtune.partition",
    "meshtune.cost.onesided_loads",
    # the spinner, on a terminal only
    "rich.status",
    "rich.live",
)

PROBE = """
import gc, json, sys
sys.argv = ["meshtune", *json.loads(sys.argv[1])]
from meshtune.cli import main
try:
    main()
except SystemExit as exc:
    code = exc.code
report = {
    "code": code,
    "modules": sorted(sys.modules),
    "frozen": gc.get_freeze_count(),
    "threshold": gc.get_threshold(),
}
print(json.dumps(report), file=sys.stderr)
"""


def _probe(args: list[str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args)],
        capture_output=True,
        text=True,
        check=False,
    )
    report: dict[str, Any] = json.loads(done.stderr.strip().splitlines()[-1])
    return report


def _modules_after(args: list[str]) -> tuple[int, list[str]]:
    report = _probe(args)
    return report["code"], report["modules"]


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


def test_plan_path_imports_nothing_heavy() -> None:
    code, modules = _modules_after(["plan", "gpt3", "--chips", "256"])
    assert code in (0, None)
    assert _heavy(modules) == []
    others = {f"meshtune.cli.{m}" for m in ALL_MODULES} - {"meshtune.cli.plan"}
    assert sorted(others & set(modules)) == []


def test_main_freezes_the_imported_modules_out_of_the_collector() -> None:
    report = _probe(["profiles"])
    assert report["code"] in (0, None)
    assert report["frozen"] > 10_000  # every module's objects, not a handful
    assert report["threshold"][0] == 10_000


def test_help_still_loads_every_command() -> None:
    code, modules = _modules_after(["--help"])
    assert code in (0, None)
    assert {f"meshtune.cli.{m}" for m in ALL_MODULES} <= set(modules)


def test_every_command_module_is_mapped() -> None:
    found = {
        info.name
        for info in pkgutil.iter_modules(meshtune.cli.__path__)
        if not info.name.startswith("_")
    }
    assert found == set(ALL_MODULES)


def test_the_map_names_every_registered_command() -> None:
    app = load_commands()
    names = {c.name or c.callback.__name__ for c in app.registered_commands if c.callback}
    names |= {g.name for g in app.registered_groups if g.name}
    assert names == set(COMMAND_MODULES)


def test_a_command_name_picks_its_modules_only() -> None:
    _, modules = _modules_after(["schema", "model"])
    assert "meshtune.cli.plan_inputs" in modules
    assert "meshtune.cli.plan" not in modules
    assert "meshtune.cli.calibrate" not in modules


def test_lazy_package_names_resolve_on_use_and_stay() -> None:
    probe = (
        "import sys, meshtune.validation as v\n"
        "before = 'meshtune.validation.stats' in sys.modules\n"
        "f = v.spearman\n"
        "print(before, 'meshtune.validation.stats' in sys.modules, v.__dict__['spearman'] is f)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.stdout.split() == ["False", "True", "True"], done.stderr
    try:
        meshtune.validation.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "meshtune.validation" in str(exc) and "no_such_name" in str(exc)
    else:
        raise AssertionError("an unknown name must raise AttributeError")
