"""The timeline replay (meshtune.timeline.replay; issue 9 item 4): totals equal the cost model's,
traces are valid trace-event files, and the CLI draws and writes them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from meshslice_helpers import meshslice_pass
from meshtune.algorithms.base import resolve
from meshtune.algorithms.registry import REGISTRY
from meshtune.catalog import load_profile
from meshtune.cli import app
from meshtune.cli.timeline import render_pass
from meshtune.cost.config import Config
from meshtune.dataflow import Dataflow, GemmOp, Pass, Stationary, layer_dataflow
from meshtune.errors import MeshtuneError, PlanFileError, ProfileError
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.model.layers import FcLayer
from meshtune.model.spec import ModelSpec
from meshtune.plan import read_plan
from meshtune.planner.make import make_plan
from meshtune.timeline.graphs import meshslice_tasks, pass_tasks
from meshtune.timeline.replay import Event, Task, makespan, replay
from meshtune.timeline.trace import (
    PassTimeline,
    chrome_trace,
    plan_ops,
    plan_timelines,
    validate_trace,
)

ROOT = Path(__file__).resolve().parents[1]
PLAN_PATH = ROOT / "plans" / "gpt3-256.json"
PLAN = read_plan(PLAN_PATH.read_text(encoding="utf-8"), str(PLAN_PATH))
PROFILES = (load_profile("tpuv4"), load_profile(ROOT / "profiles" / "tpuv4-cloud-4x4.toml"))
SMALL_MESHES = (Mesh(2, 2), Mesh(4, 2), Mesh(8, 1), Mesh(2, 2, 2), Mesh(4, 4, 2))
LAYER = FcLayer("l", 4096, 2048, 3072, None)


def test_replay_respects_resources_and_dependencies() -> None:
    tasks = [
        Task("a", "axis0", 2.0),
        Task("b", "axis0", 1.0),
        Task("c", "compute", 5.0, ("a",)),
        Task("d", "axis1", 1.0, ("c",)),
        Task("e", "compute", 1.0, ("b",)),
    ]
    spans = {e.task.name: (e.start_s, e.end_s) for e in replay(tasks)}
    assert spans == {
        "a": (0.0, 2.0),
        "b": (2.0, 3.0),  # after a: same resource
        "c": (2.0, 7.0),  # waits for a
        "d": (7.0, 8.0),
        "e": (7.0, 8.0),  # b is done at 3, but compute is busy until 7
    }
    with pytest.raises(ValueError, match="not listed before it"):
        replay([Task("x", "compute", 1.0, ("y",)), Task("y", "compute", 1.0)])
    with pytest.raises(ValueError, match="listed twice"):
        replay([Task("x", "compute", 1.0), Task("x", "axis0", 1.0)])


def test_a_blocking_communication_holds_the_compute_stream() -> None:
    tasks = [
        Task("ag", "axis0", 2.0, blocks=True),
        Task("rs", "axis1", 1.0, blocks=True),  # another ring, but the chip is held
        Task("shift", "axis2", 4.0),  # overlapped: runs beside
        Task("gemm", "compute", 3.0),
    ]
    spans = {e.task.name: (e.start_s, e.end_s) for e in replay(tasks)}
    assert spans == {"ag": (0, 2), "rs": (2, 3), "shift": (0, 4), "gemm": (3, 6)}


def test_hand_worked_os_pipeline(make_profile: Callable[..., HardwareProfile]) -> None:
    """OS on 2x2, S=2, zero latencies: AG 1 ms on each axis, GeMM 3 ms (compute bound).

    Prologue AG (1 ms), GeMM 0 [1, 4] while the AGs of 1 run [1, 2], GeMM 1 [4, 7]: 7 ms.
    """
    zero = {"t_launch_s": 0.0, "t_sync_s": 0.0}
    profile = make_profile(
        effective_flops_per_s=2 * 64 * 64 * 256 / 3e-3,  # local GeMM 64×64×256
        peak_flops_per_s=1e15,
        all_gather={
            "axis0": {**zero, "bw_bytes_per_s": 128 * 512 / 8 * 2 / 1e-3},  # k·n/(P·S)·e
            "axis1": {**zero, "bw_bytes_per_s": 128 * 512 / 8 * 2 / 1e-3},  # m·k/(P·S)·e
        },
    )
    op = GemmOp(Pass.FORWARD, Dataflow.OS, 128, 128, 512, False, "")
    events = replay(meshslice_tasks(op, Mesh(2, 2), profile, Config.of(slices=2)))
    spans = {e.task.name: (round(e.start_s * 1e3, 9), round(e.end_s * 1e3, 9)) for e in events}
    assert spans["GeMM[0]"] == (1.0, 4.0)
    assert spans["AG_ax1[1]"] == (1.0, 2.0)  # AG_col: the P_c ring is axis 1
    assert spans["GeMM[1]"] == (4.0, 7.0)
    assert makespan(events) == pytest.approx(7e-3)
    assert meshslice_pass(op, Mesh(2, 2), profile, 2).total_s == pytest.approx(7e-3)


@settings(max_examples=60, deadline=None)
@given(
    flow=st.sampled_from(list(Dataflow)),
    transposed=st.booleans(),
    shape=st.sampled_from([(1, 4), (4, 1), (2, 8), (8, 2), (4, 4), (16, 2)]),
    slices=st.sampled_from([1, 2, 3, 4, 6, 8, 16]),
    scale=st.sampled_from([1, 8, 64, 512]),
    flops=st.floats(1e9, 1e15),
    t_launch=st.floats(0, 1e-4),
    t_sync=st.floats(0, 1e-5),
    bw=st.floats(1e8, 1e12),
)
def test_replay_total_equals_the_cost_model(
    make_profile: Callable[..., HardwareProfile],
    flow: Dataflow,
    transposed: bool,
    shape: tuple[int, int],
    slices: int,
    scale: int,
    flops: float,
    t_launch: float,
    t_sync: float,
    bw: float,
) -> None:
    link = {"t_launch_s": t_launch, "t_sync_s": t_sync, "bw_bytes_per_s": bw}
    profile = make_profile(
        effective_flops_per_s=flops,
        peak_flops_per_s=2 * flops,
        all_gather={"axis1": link},
        reduce_scatter={"axis0": link},
    )
    mesh = Mesh(*shape)
    unit = 8 * 16 * slices
    op = GemmOp(Pass.FORWARD, flow, unit * scale, unit * 4, unit, transposed, "")
    want = meshslice_pass(op, mesh, profile, slices).total_s
    for algorithm, s in (("meshslice", slices), ("collective", 1)):
        got = makespan(replay(pass_tasks(algorithm, op, mesh, profile, Config.of(slices=s))))
        expected = want if s == slices else meshslice_pass(op, mesh, profile, 1).total_s
        assert got == pytest.approx(expected, rel=0.01)


def _sampled(configs: tuple[Config, ...]) -> list[Config]:
    """The smallest, a middle and the largest configuration."""
    return sorted({configs[0], configs[len(configs) // 2], configs[-1]})


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_algorithm_replays_to_its_cost_model(name: str) -> None:
    """Every registered algorithm × its 16-chip meshes and small fixed ones × Table 1's rows ×
    smallest / middle / largest configuration × the three passes, on a profile that overlaps
    every collective and on one where AG / RdS hold the chip: the replay of the task graph built
    from the cost model's parts ends when the closed form says."""
    algorithm = REGISTRY[name]
    meshes = dict.fromkeys(
        [*algorithm.meshes(16), *(m for m in SMALL_MESHES if algorithm.mesh_problem(m) is None)]
    )
    checked = 0
    for mesh in meshes:
        for stationary in Stationary:
            for transposed in (False, True):
                layer = layer_dataflow(LAYER, stationary, transposed)
                configs, _ = algorithm.configs(layer, mesh, 128)
                for config in _sampled(configs) if configs else []:
                    for profile in PROFILES:
                        for op in layer.ops:
                            want = algorithm.cost(op, mesh, profile, config).total_s
                            tasks = pass_tasks(name, op, mesh, profile, config)
                            got = makespan(replay(tasks))
                            # issue 9 asks for 1 %; the schedules match exactly
                            assert got == pytest.approx(want, rel=1e-9), (
                                f"{mesh.label} {stationary.value} {transposed} {config.label} "
                                f"{profile.name} {op.pass_.value}"
                            )
                            checked += 1
    assert checked >= 12


_LINK = st.fixed_dictionaries(
    {
        "t_launch_s": st.sampled_from([0.0, 1e-6, 1e-4]),
        "t_sync_s": st.sampled_from([0.0, 1e-7, 1e-5]),
        "bw_bytes_per_s": st.floats(1e8, 1e12),
    }
)
KINDS = ("all_gather", "reduce_scatter", "send_recv")
_KIND_LINKS = st.fixed_dictionaries({f"axis{a}": _LINK for a in range(3)})


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_every_algorithm_replays_on_any_profile(
    make_profile: Callable[..., HardwareProfile], data: st.DataObject
) -> None:
    """Random link parameters per kind and axis, compute speed and overlapped kinds."""
    flops = data.draw(st.floats(1e11, 1e15))
    profile = make_profile(
        effective_flops_per_s=flops,
        peak_flops_per_s=2 * flops,
        overlapped=data.draw(
            st.sets(st.sampled_from(["all_gather", "reduce_scatter", "send_recv"]))
        ),
        all_gather=data.draw(_KIND_LINKS),
        reduce_scatter=data.draw(_KIND_LINKS),
        send_recv=data.draw(_KIND_LINKS),
    )
    name = data.draw(st.sampled_from(sorted(REGISTRY)))
    algorithm = REGISTRY[name]
    meshes = [
        *algorithm.meshes(16),
        *(m for m in SMALL_MESHES if algorithm.mesh_problem(m) is None),
    ]
    mesh = data.draw(st.sampled_from(meshes))
    layer = layer_dataflow(
        LAYER, data.draw(st.sampled_from(list(Stationary))), data.draw(st.booleans())
    )
    configs, _ = algorithm.configs(layer, mesh, 128)
    assume(len(configs) > 0)
    config = data.draw(st.sampled_from(configs))
    for op in layer.ops:
        want = algorithm.cost(op, mesh, profile, config).total_s
        got = makespan(replay(pass_tasks(name, op, mesh, profile, config)))
        assert got == pytest.approx(want, rel=1e-9)


def test_every_registered_algorithm_has_a_graph() -> None:
    for algorithm in REGISTRY.values():
        graph = resolve(algorithm.timeline)
        assert callable(graph)
        assert graph.__module__ == "meshtune.timeline.graphs", algorithm.name
    with pytest.raises(
        MeshtuneError, match="unknown algorithm 'fast'; known algorithms: meshslice"
    ):
        pass_tasks(
            "fast",
            GemmOp(Pass.FORWARD, Dataflow.OS, 8, 8, 8, False, ""),
            Mesh(1, 1),
            load_profile("tpuv4"),
            Config.of(),
        )


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_plans_of_every_algorithm_replay_trace_and_draw(
    name: str, gpt3: ModelSpec, tpuv4: HardwareProfile
) -> None:
    chips = {"tesseract": 32, "onesided": 4}.get(name, 16)  # [4, 4, 2]; a fast layout search
    plan = make_plan(gpt3, tpuv4, chips, algorithm=name)
    passes = plan_timelines(plan, tpuv4)
    recorded = [p for layer in plan.layers for p in layer.passes]
    assert len(passes) == len(recorded) == 3 * len(plan.layers)
    for timeline, plan_pass in zip(passes, recorded, strict=True):
        assert timeline.total_s == pytest.approx(plan_pass.total_s, rel=0.01)
    trace = chrome_trace(passes)
    assert validate_trace(trace) == []
    tracks = {e["tid"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert 0 in tracks and (3 in tracks) == (name == "tesseract")  # the depth ring: axis 2
    assert passes[2].pass_name == "backward_weight"  # tesseract: the depth all-reduce
    lines = render_pass(passes[2], 32)
    depth = ["  axis 2  "] if name == "tesseract" else []
    assert [line.plain[:10] for line in lines[1:]] == [
        "  compute ",
        "  axis 0  ",
        "  axis 1  ",
        *depth,
    ]
    assert all(len(line.plain) == 10 + 32 for line in lines[1:])
    assert any(ch.isdigit() for ch in lines[1].plain[10:])  # the GeMMs are drawn


def test_plan_ops_refuse_what_the_registry_does_not_allow() -> None:
    unknown = PLAN.model_copy(
        update={"layers": [PLAN.layers[0].model_copy(update={"algorithm": "fast"})]}
    )
    with pytest.raises(PlanFileError, match="algorithm 'fast' is not registered; known: meshslice"):
        plan_ops(unknown)
    illegal = PLAN.model_copy(
        update={"layers": [PLAN.layers[0].model_copy(update={"config": {"slices": 7}})]}
    )
    with pytest.raises(PlanFileError, match="configuration S=7 is not legal for meshslice"):
        plan_ops(illegal)


def test_plan_timelines_match_the_plan(tpuv4: HardwareProfile) -> None:
    passes = plan_timelines(PLAN, tpuv4)
    recorded = [p for layer in PLAN.layers for p in layer.passes]
    assert len(passes) == len(recorded) == 12
    for timeline, plan_pass in zip(passes, recorded, strict=True):
        assert timeline.total_s == pytest.approx(plan_pass.total_s, rel=1e-9)
    assert passes[1].offset_s == pytest.approx(passes[0].total_s)
    only = plan_timelines(PLAN, tpuv4, "attn_out")
    assert [(t.layer, t.offset_s == 0) for t in only][:1] == [("attn_out", True)]
    with pytest.raises(PlanFileError, match="layer 'qkvv' is not in the plan; its layers: qkv"):
        plan_timelines(PLAN, tpuv4, "qkvv")


def test_plan_timelines_refuse_another_profile(round_profile: HardwareProfile) -> None:
    with pytest.raises(ProfileError, match="not the one the plan was made with"):
        plan_timelines(PLAN, round_profile)


def test_chrome_trace_is_valid(tpuv4: HardwareProfile) -> None:
    trace = chrome_trace(plan_timelines(PLAN, tpuv4))
    assert validate_trace(trace) == []
    events = trace["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert {e["tid"] for e in complete} == {0, 1, 2}  # no depth ring on a 2D mesh
    assert {e["pid"] for e in complete} == {1, 2, 3, 4}
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {"qkv", "attn_out", "mlp_up", "mlp_down"}
    first = min(complete, key=lambda e: e["ts"])
    assert first["ts"] == 0
    assert json.loads(json.dumps(trace)) == trace


def _trace(*events: dict[str, Any]) -> dict[str, Any]:
    return {"traceEvents": list(events)}


def test_validator_finds_each_kind_of_problem() -> None:
    good = {"name": "a", "ph": "X", "ts": 0, "dur": 5, "pid": 1, "tid": 0}
    assert validate_trace(_trace(good)) == []
    assert validate_trace([]) == ["a trace is an object with a 'traceEvents' list"]
    assert validate_trace(_trace({**good, "ph": "B"})) == [
        "event 0: phase 'B' is not one of ['M', 'X']"
    ]
    assert validate_trace(_trace({"ph": "X", "ts": 0})) == ["event 0: missing name, dur, pid, tid"]
    assert validate_trace(_trace({**good, "dur": -1})) == [
        "event 0: ts 0 / dur -1 are not finite and >= 0"
    ]
    overlap = {**good, "name": "b", "ts": 4}
    assert validate_trace(_trace(good, overlap)) == ["pid 1 tid 0: 'b' starts before 'a' ends"]
    assert validate_trace(_trace(good, {**overlap, "tid": 1})) == []  # another track
    assert validate_trace(_trace(good, {**overlap, "ts": 5})) == []  # back to back


def test_validator_catches_a_broken_replay() -> None:
    task = Task("x", "compute", 1.0)
    broken = PassTimeline("l", "forward", 0.0, (Event(task, 0.0, 2.0), Event(task, 1.0, 3.0)))
    assert validate_trace(chrome_trace([broken])) == ["pid 1 tid 0: 'x' starts before 'x' ends"]


def test_cli_draws_and_writes_a_trace(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    got = runner.invoke(
        app, ["timeline", str(PLAN_PATH), "--layer", "qkv", "-o", str(out), "--width", "40"]
    )
    assert got.exit_code == 0, got.output
    lines = got.stdout.splitlines()
    assert lines[1] == "qkv forward  5.583 ms"
    assert lines[2].startswith("  compute ·")
    assert len(lines[2]) == len("  compute ") + 40
    assert "5" in lines[2]  # the last of the six iterations
    assert f"wrote {out}" in got.stdout
    assert validate_trace(json.loads(out.read_text(encoding="utf-8"))) == []


def test_cli_replays_a_tesseract_plan_with_its_depth_ring(
    runner: CliRunner, tmp_path: Path, gpt3: ModelSpec, tpuv4: HardwareProfile
) -> None:
    plan_file = tmp_path / "tesseract.json"
    plan_file.write_text(make_plan(gpt3, tpuv4, 32, algorithm="tesseract").to_json())
    out = tmp_path / "trace.json"
    got = runner.invoke(app, ["timeline", str(plan_file), "--layer", "qkv", "-o", str(out)])
    assert got.exit_code == 0, got.output
    assert "4x4x2 mesh, tesseract, profile tpuv4" in got.stdout
    assert sum(line.startswith("  axis 2 ") for line in got.stdout.splitlines()) == 1
    trace = json.loads(out.read_text(encoding="utf-8"))
    assert validate_trace(trace) == []
    assert any(e["ph"] == "X" and e["tid"] == 3 for e in trace["traceEvents"])


def test_cli_errors_are_one_line(runner: CliRunner) -> None:
    got = runner.invoke(app, ["timeline", str(PLAN_PATH), "--layer", "nope"])
    assert got.exit_code == 2
    assert got.stderr == (
        "meshtune: error: layer 'nope' is not in the plan; its layers: qkv, attn_out, mlp_up, "
        "mlp_down\n"
    )
