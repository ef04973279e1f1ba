"""Terminal rendering of a :class:`~meshtune.plan.Plan`.

Every column folds a value too wide for it onto the next line instead of cutting it with "…",
so that an 80-column pipe (a CI log) shows everything.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from meshtune.algorithm import Config
from meshtune.plan import LayerPlan, MeshShape, Plan


def fmt_time(seconds: float) -> str:
    """Seconds with a unit chosen for 3-4 significant digits (µs, ms or s)."""
    if seconds >= 1.0:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"


def _sharding(layer: LayerPlan) -> str:
    return escape("  ".join(f"{t}[{r}|{c}]" for t, (r, c) in layer.sharding.items()))


def dataflow_table(plan: Plan) -> Table:
    """Phase 1 per layer: stationary matrix, the three dataflows and the sharding."""
    table = Table(
        title=escape("Phase 1: dataflow and sharding  (tensor[dim over rows|dim over cols])")
    )
    for header in ("layer", "in→out", "stationary", "fwd / bwd-d / bwd-w", "sharding"):
        table.add_column(header, justify="right" if header == "in→out" else "left", overflow="fold")
    for layer in plan.layers:
        stationary = f"{layer.stationary}-stn" + (" (transposed)" if layer.transposed else "")
        flows = " / ".join(layer.dataflows[p.name] for p in layer.passes)
        table.add_row(
            escape(layer.name),
            f"{layer.in_features}→{layer.out_features}",
            stationary,
            flows,
            _sharding(layer),
        )
    return table


def timing_table(plan: Plan) -> Table:
    """Phase 2 per layer: configuration and one block's time split (fwd + bwd-d + bwd-w)."""
    table = Table(
        title="Phase 2: configuration and time per block  (fwd + bwd-d + bwd-w; steady = all "
        "iterations but one)"
    )
    for header in (
        "layer",
        "config",
        "prologue",
        "steady",
        "epilogue",
        "comm hidden",
        "comm exposed",
        "util",
    ):
        table.add_column(header, justify="left" if header == "layer" else "right", overflow="fold")
    for layer in plan.layers:
        table.add_row(
            escape(layer.name),
            Config.of(**layer.config).label,
            fmt_time(sum(p.prologue_s for p in layer.passes)),
            fmt_time(sum((p.iterations - 1) * p.steady_s for p in layer.passes)),
            fmt_time(sum(p.epilogue_s for p in layer.passes)),
            fmt_time(sum(p.comm_hidden_s for p in layer.passes)),
            fmt_time(sum(p.comm_exposed_s for p in layer.passes)),
            f"{layer.utilization:.1%}",
        )
    return table


def candidates_table(plan: Plan) -> Table:
    """The best mesh shapes with their estimated utilization (Figure 13's data).

    An algorithm column appears only when the candidates come from several algorithms
    (``--algorithm auto``); otherwise the title names the one.
    """
    algorithms = list(dict.fromkeys(c.algorithm for c in plan.candidates))
    several = len(algorithms) > 1
    title = f"Top {len(plan.candidates)} mesh shapes"
    table = Table(title=title if several else f"{title} ({', '.join(algorithms)})")
    headers = ("#", "algorithm", "mesh", "FC time / step", "FLOP util", "config per layer")
    for header in headers if several else tuple(h for h in headers if h != "algorithm"):
        left = header in ("algorithm", "mesh", "config per layer")
        table.add_column(header, justify="left" if left else "right", overflow="fold")
    chosen_algorithm = plan.layers[0].algorithm if plan.layers else ""
    for rank, cand in enumerate(plan.candidates, start=1):
        mesh = MeshShape(rows=cand.rows, cols=cand.cols, depth=cand.depth)
        chosen = mesh == plan.mesh and cand.algorithm == chosen_algorithm
        cells = [
            str(rank),
            cand.algorithm,
            mesh.to_mesh().label + (" ←" if chosen else ""),
            fmt_time(cand.fc_time_s),
            f"{cand.utilization:.1%}",
            " ".join(Config.of(**c).label for c in cand.configs.values()),
        ]
        table.add_row(*(cells if several else cells[:1] + cells[2:]))
    return table


def plan_summary(plan: Plan) -> Text:
    """One heading line with the answer, one with the inputs."""
    inp = plan.inputs
    text = Text()
    text.append(f"{inp.model.display_name}", style="bold")
    text.append(f" on {inp.chips} chips ({inp.profile}): ")
    algorithms = ", ".join(dict.fromkeys(layer.algorithm for layer in plan.layers))
    text.append(f"{algorithms} on mesh {plan.mesh.to_mesh().label}", style="bold green")
    text.append(f", FC FLOP utilization {plan.utilization:.1%}")
    text.append(f", FC time {fmt_time(plan.fc_time_s)} per step\n")
    text.append(
        f"batch {inp.batch} × seq {inp.seq_len} = {inp.batch * inp.seq_len} tokens, "
        f"{inp.model.blocks} blocks, dataflow {inp.dataflow_mode}, algorithm {inp.algorithm}",
        style="dim",
    )
    return text


def render_plan(plan: Plan) -> RenderableType:
    """Summary, layer table, candidate table and notes."""
    parts: list[RenderableType] = [
        plan_summary(plan),
        dataflow_table(plan),
        timing_table(plan),
        candidates_table(plan),
    ]
    notes = list(plan.transposes)
    if plan.infeasible_shapes:
        notes.append(
            f"{len(plan.infeasible_shapes)} shape(s) infeasible: "
            + "; ".join(plan.infeasible_shapes)
        )
    if notes:
        parts.append(Text("\n".join(f"note: {n}" for n in notes), style="yellow"))
    return Group(*parts)
