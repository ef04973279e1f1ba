"""Terminal rendering of a :class:`~meshtune.plan.Plan`.

Every column folds a value too wide for it onto the next line instead of cutting it with "…",
so that an 80-column pipe (a CI log) shows everything.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from meshtune.cost.config import Config
from meshtune.errors import printable
from meshtune.hardware.mesh import Mesh
from meshtune.hardware.profile import HardwareProfile
from meshtune.hardware.tiers import level_tiers
from meshtune.plan import ClusterPlan, LayerPlan, MeshShape, Plan
from meshtune.report.console import shown


def fmt_time(seconds: float) -> str:
    """Seconds to 3 significant digits with the unit (ns, µs, ms or s) chosen after rounding, so
    0.9996 s reads ``1 s``, not ``1e+03 ms``; whole seconds from a thousand (``1,234 s``)."""
    if seconds >= 999.5:
        return f"{seconds:,.0f} s"
    rounded = float(f"{seconds:.3g}")
    if rounded >= 1.0:
        return f"{rounded:.3g} s"
    if rounded >= 1e-3:
        return f"{rounded * 1e3:.3g} ms"
    if 0.0 < rounded < 1e-6:
        return f"{rounded * 1e9:.3g} ns"
    return f"{rounded * 1e6:.3g} µs"


def _sharding(layer: LayerPlan) -> str:
    return shown("  ".join(f"{t}[{r}|{c}]" for t, (r, c) in layer.sharding.items()))


def dataflow_table(plan: Plan) -> Table:
    """Phase 1 per layer: stationary matrix, the three dataflows and the sharding."""
    table = Table(
        title=shown("Phase 1: dataflow and sharding  (tensor[dim over rows|dim over cols])")
    )
    for header in ("layer", "in→out", "stationary", "fwd / bwd-d / bwd-w", "sharding"):
        table.add_column(header, justify="right" if header == "in→out" else "left", overflow="fold")
    for layer in plan.layers:
        stationary = f"{layer.stationary}-stn" + (" (transposed)" if layer.transposed else "")
        flows = " / ".join(layer.dataflows[p.name] for p in layer.passes)
        table.add_row(
            shown(layer.name),
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
        table.add_column(
            header,
            justify="left" if header == "layer" else "right",
            overflow="fold",
            no_wrap=header == "layer",  # a layer's name stays whole; headers wrap first
        )
    for layer in plan.layers:
        table.add_row(
            shown(layer.name),
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
    (``--algorithm auto``); otherwise the title names the one. Rows are sorted by FC time
    (stable: the plan's order breaks ties).
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
    for rank, cand in enumerate(sorted(plan.candidates, key=lambda c: c.fc_time_s), start=1):
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
    text.append(printable(inp.model.display_name), style="bold")
    text.append(f" on {inp.chips} chips ({printable(inp.profile)}): ")
    algorithms = ", ".join(dict.fromkeys(layer.algorithm for layer in plan.layers))
    text.append(f"{algorithms} on mesh {plan.mesh.to_mesh().label}", style="bold green")
    text.append(f", FC FLOP utilization {plan.utilization:.1%}")
    per = "per micro-batch (the mesh level)" if plan.cluster is not None else "per step"
    text.append(f", FC time {fmt_time(plan.fc_time_s)} {per}\n")
    text.append(
        f"batch {inp.batch} × seq {inp.seq_len} = {inp.batch * inp.seq_len} tokens, "
        f"{inp.model.blocks} blocks, dataflow {inp.dataflow_mode}, algorithm {inp.algorithm}",
        style="dim",
    )
    return text


def fmt_bytes(size: float) -> str:
    """Bytes in GiB (or MiB below one GiB)."""
    return f"{size / 2**30:.1f} GiB" if size >= 2**30 else f"{size / 2**20:.0f} MiB"


def _layout(blocks: list[int]) -> str:
    """Blocks per stage, runs folded: ``2/3/3/2`` or ``12 ×8``."""
    if len(set(blocks)) == 1:
        return f"{blocks[0]} ×{len(blocks)}"
    if len(blocks) <= 8:
        return "/".join(map(str, blocks))
    counts = {n: blocks.count(n) for n in sorted(set(blocks), reverse=True)}
    return " + ".join(f"{n} ×{k}" for n, k in counts.items())


def step_headline(cluster: ClusterPlan, plan: Plan) -> Text:
    """The answer a user acts on: step time, tokens/s, MFU, HFU, TFLOP/s and memory per chip."""
    inp = plan.inputs
    memory = cluster.memory
    capacity = memory.capacity_bytes
    text = Text()
    text.append(printable(inp.model.display_name), style="bold")
    text.append(f" on {inp.chips} chips ({printable(inp.profile)}): ")
    text.append(
        f"step {fmt_time(cluster.step.step_s)}, {cluster.tokens_per_s:,.0f} tokens/s, "
        f"MFU {cluster.mfu:.1%}, HFU {cluster.hfu:.1%}, "
        f"{cluster.model_flops / (cluster.step.step_s * inp.chips) / 1e12:.0f} TFLOP/s per chip",
        style="bold green",
    )
    text.append(
        f", memory {fmt_bytes(memory.total_bytes)}"
        + (
            f" of {fmt_bytes(capacity)} per chip ({cluster.step_options.headroom:.0%} kept free)"
            if capacity is not None
            else " per chip (capacity unknown)"
        )
    )
    return text


def cluster_summary(cluster: ClusterPlan, plan: Plan) -> Text:
    """The split, the step by cause and the memory per chip by term."""
    step, options = cluster.step, cluster.step_options
    mesh = plan.mesh.to_mesh()
    text = Text()
    interleaved = f" (v {cluster.vpp} virtual stages)" if cluster.vpp > 1 else ""
    if options.schedule == "dualpipe":
        interleaved = " (DualPipe: two model copies)"
    text.append(
        f"Cluster: DP {cluster.dp} × PP {cluster.pp}{interleaved} × mesh {mesh.label} "
        f"(TP {mesh.chips}) = {cluster.dp * cluster.pp * cluster.cp * mesh.chips} chips"
        + (f", ZeRO-{cluster.zero}" if cluster.zero else "")
        + (f", EP {cluster.ep} (experts over {cluster.ep} replicas)" if cluster.ep > 1 else "")
        + (
            f", CP {cluster.cp} ("
            + ("ring attention" if options.cp_comm == "ring" else "K/V all-gathered")
            + ")"
            if cluster.cp > 1
            else ""
        )
        + "\n",
        style="bold",
    )
    text.append(
        f"{cluster.micro_batches} micro-batch(es) of {cluster.micro_batch} sequence(s) per "
        f"replica, blocks per stage {_layout(cluster.stage_layout)}, recompute "
        f"{options.recompute}"
        + (
            " (ZeRO-3 weights gathered again for it)"
            if cluster.zero == 3 and options.recompute == "full" and options.zero3_recompute_gather
            else ""
        )
        + f", {options.attention} attention"
        + (", dropout" if options.dropout else "")
        + f", {'fp32' if options.fp32_grads else 'operand-width'} gradients "
        + ("accumulated by a separate pass, " if options.grad_accumulation == "separate" else "")
        + ("all-reduced " if options.grad_all_reduce else "reduced ")
        + ("during" if options.grad_overlap else "after")
        + " the backward pass, "
        + ("FP8 FC GeMMs" if options.precision == "fp8" else "bf16 GeMMs")
        + f", padding waste {cluster.padding_waste:.1%}, FC FLOP "
        f"utilization {cluster.utilization:.1%}"
        + (
            f", engine host time {options.block_overhead_s * 1e3:.3g} ms per block and "
            "micro-batch (in other compute)"
            if options.block_overhead_s
            else ""
        )
        + "\n"
    )
    causes = {
        "FC": step.fc_s - step.tp_exposed_s,
        "attention": step.attention_s,
        "other compute": step.other_s - step.ep_exposed_s - step.cp_exposed_s,
        "EP all-to-all": step.ep_exposed_s,
        "CP K/V ring": step.cp_exposed_s,
        "optimizer": step.optimizer_s,
        "recompute": step.recompute_s,
        "exposed TP": step.tp_exposed_s,
        "PP send-recv": step.send_recv_s,
        "exposed DP": step.dp_exposed_s,
        "pipeline bubble": step.bubble_s,
    }
    text.append(
        f"step {fmt_time(step.step_s)} = "
        + " + ".join(
            f"{name} {fmt_time(seconds)} ({seconds / step.step_s:.1%})"
            for name, seconds in causes.items()
            if seconds
        )
        + f"; DP reduction {fmt_time(cluster.dp_reduction_s)}"
        + (" before overlap\n" if options.grad_overlap else "\n")
    )
    memory = cluster.memory
    terms = ("weights", "gradients", "optimizer", "activations", "logits", "buffers")
    text.append(
        "memory per chip: "
        + ", ".join(
            f"{t} {fmt_bytes(getattr(memory, f'{t}_bytes'))}"
            for t in terms
            if t != "logits" or memory.logits_bytes
        )
        + f"; total {fmt_bytes(memory.total_bytes)}"
    )
    if cluster.rejected:
        text.append(f"\n{cluster.rejected} split(s) over memory capacity", style="dim")
    return text


def tiers_line(cluster: ClusterPlan, plan: Plan, profile: HardwareProfile) -> Text | None:
    """Which network tier each level of the split lands on (``TP axis 1 4 → nvlink, ...,
    DP 16 → network (1024 chips)``), by :func:`meshtune.hardware.tiers.level_tiers`; None for a
    profile without tiers."""
    levels = level_tiers(
        profile, plan.mesh.to_mesh(), cp=cluster.cp, ep=cluster.ep, pp=cluster.pp, dp=cluster.dp
    )
    if not levels:
        return None
    return Text(
        "tiers: " + ", ".join(f"{t.level} {t.degree} → {t.tier} ({t.span} chips)" for t in levels)
    )


def cluster_table(cluster: ClusterPlan) -> Table:
    """The fastest DP × PP × mesh × micro-batch splits."""
    table = Table(title=f"Top {len(cluster.candidates)} cluster splits")
    experts = any(c.ep > 1 for c in cluster.candidates)  # an EP column for MoE plans only
    context = any(c.cp > 1 for c in cluster.candidates)  # a CP column for long sequences only
    extra = (*(("EP",) if experts else ()), *(("CP",) if context else ()))
    headers = ("#", "DP", "PP", "v", "mesh", "µbatches", "ZeRO", *extra)
    for header in (*headers, "step", "MFU", "memory"):
        table.add_column(header, justify="left" if header == "mesh" else "right")
    for rank, c in enumerate(cluster.candidates, start=1):
        table.add_row(
            str(rank),
            str(c.dp),
            str(c.pp),
            str(c.vpp),
            Mesh(c.rows, c.cols, c.depth).label,
            str(c.micro_batches),
            str(c.zero),
            *((str(c.ep),) if experts else ()),
            *((str(c.cp),) if context else ()),
            fmt_time(c.step_s),
            f"{c.mfu:.1%}",
            fmt_bytes(c.memory_bytes),
        )
    return table


def render_plan(
    plan: Plan, confidence: str | None = None, profile: HardwareProfile | None = None
) -> RenderableType:
    """Summary, layer table, candidate table and notes; ``confidence`` (how far the step time
    is validated, :mod:`meshtune.validation.confidence`) follows a cluster plan's headline;
    with the plan's tiered ``profile`` the split's summary names the tier of each level."""
    parts: list[RenderableType] = [
        plan_summary(plan),
        dataflow_table(plan),
        timing_table(plan),
        candidates_table(plan),
    ]
    if plan.cluster is not None:
        head: list[RenderableType] = [step_headline(plan.cluster, plan)]
        if confidence is not None:
            head.append(Text(confidence, style="dim"))
        tiers = tiers_line(plan.cluster, plan, profile) if profile is not None else None
        summary = [cluster_summary(plan.cluster, plan), *([tiers] if tiers else [])]
        parts[0:0] = [*head, *summary]
        parts[len(head) + len(summary) + 1 : len(head) + len(summary) + 1] = [
            cluster_table(plan.cluster)
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
