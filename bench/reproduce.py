"""The numbers of docs/reproduction.md: the paper's stated results beside meshtune's (§5).

Runs :func:`meshtune.compare.compare_models` at the paper's setups (tpuv4 profile; weak scaling
16–256 chips, batch = chips / 2, sequence 2048; strong scaling at batch 32; Table 3 on the
``tpuv4-cloud-4x4`` profile, mesh 4x4) and prints Markdown tables. Every registered algorithm
appears; a paper number for an algorithm that is not registered yet prints as "not registered
yet", to be filled by rerunning this script once it is.

Run: ``python bench/reproduce.py > /tmp/tables.md`` and paste into docs/reproduction.md.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from meshtune.algorithms import REGISTRY
from meshtune.compare import Comparison, compare_models
from meshtune.mesh import Mesh
from meshtune.specs import load_model, load_profile

CHIPS = [16, 32, 64, 128, 256]
MODELS = {"gpt3": "GPT-3", "megatron-nlg": "MT-NLG"}
MISSING = "not registered yet"

# Paper labels of the algorithms (§4.2, §4.3), matched against registered names and titles.
PAPER = ("MeshSlice", "Collective", "Wang", "SUMMA", "Cannon", "1D TP", "FSDP")


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def registered(label: str) -> str | None:
    """The registered algorithm the paper calls ``label`` (by name or title), if any."""
    for algorithm in REGISTRY.values():
        if _key(label) in (_key(algorithm.name), _key(algorithm.title)):
            return algorithm.name
    return None


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def util(c: Comparison, label: str, chips: int) -> float | None:
    name = registered(label)
    for p in c.scaling_points:
        if p.algorithm == name and p.chips == chips:
            return p.utilization
    return None


def over(c: Comparison, label: str, chips: int, step: bool = False) -> str:
    """The reference's speedup over ``label`` at ``chips`` (FC or end to end)."""
    name = registered(label)
    if name is None:
        return MISSING
    for p in c.scaling_points:
        if p.algorithm == name and p.chips == chips:
            value = p.step_speedup_of_reference if step else p.fc_speedup_of_reference
            return signed(value) if p.reason is None else "infeasible"
    return "-"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def figure9(weak: dict[str, Comparison]) -> str:
    rows = []
    for model, c in weak.items():
        for label in PAPER:
            name = registered(label)
            cells = [pct(util(c, label, n)) if name else MISSING for n in CHIPS]
            rows.append([MODELS[model], label, *cells])
    return table(["model", "algorithm", *(f"{n} chips" for n in CHIPS)], rows)


def figure9_claims(weak: dict[str, Comparison]) -> str:
    paper = {
        ("gpt3", "fc"): "+13.8%",
        ("megatron-nlg", "fc"): "+26.0%",
        ("gpt3", "e2e"): "+12.0%",
        ("megatron-nlg", "e2e"): "+23.4%",
    }
    loss = {"gpt3": "16.8%", "megatron-nlg": "5.8%"}
    rows = []
    for model, c in weak.items():
        rows.append(
            [
                f"{MODELS[model]}: MeshSlice over Wang, FC, 256 chips",
                paper[model, "fc"],
                over(c, "Wang", 256),
            ]
        )
        rows.append(
            [
                f"{MODELS[model]}: MeshSlice over Wang, end to end, 256 chips",
                paper[model, "e2e"],
                over(c, "Wang", 256, step=True),
            ]
        )
        for label in PAPER[1:]:
            if label == "Wang" or registered(label) is None:
                continue
            rows.append(
                [
                    f"{MODELS[model]}: MeshSlice over {label}, FC / end to end, 256 chips",
                    "-",
                    f"{over(c, label, 256)} / {over(c, label, 256, step=True)}",
                ]
            )
        first, last = util(c, "MeshSlice", CHIPS[0]), util(c, "MeshSlice", CHIPS[-1])
        lost = None if first is None or last is None else 1 - last / first
        rows.append(
            [
                f"{MODELS[model]}: MeshSlice efficiency lost from 16 to 256 chips",
                loss[model],
                pct(lost),
            ]
        )
    return table(["statement (§5.1.1)", "paper", "meshtune"], rows)


def figure10(weak: dict[str, Comparison]) -> str:
    rows = []
    for model, c in weak.items():
        for b in c.breakdown:
            if b.breakdown is None:
                rows.append([MODELS[model], b.algorithm, "-", "-", "-", "-", b.reason or ""])
                continue
            x = b.breakdown
            rel = [f"{v / x.compute_s:.2f}" for v in (x.launch_s, x.sync_s, x.transfer_s)]
            rows.append(
                [MODELS[model], b.algorithm, *rel, f"{x.comm_s / x.compute_s:.2f}", b.mesh or ""]
            )
    return table(
        ["model", "algorithm", "launch", "sync", "transfer", "total", "mesh (256 chips)"], rows
    )


def figure11(weak: dict[str, Comparison]) -> str:
    rows = []
    for label, paper in (("Collective", "+27.8%"), ("Wang", "+19.1%")):
        name = registered(label)
        if name is None:
            rows.append([f"MeshSlice over {label}, mean of the 16 GeMMs", paper, MISSING])
            continue
        ups = [
            e.speedup_of_reference
            for c in weak.values()
            for g in c.gemms
            for e in g.entries
            if e.algorithm == name and e.speedup_of_reference is not None
        ]
        mean = sum(ups) / len(ups) if ups else None
        rows.append([f"MeshSlice over {label}, mean of the {len(ups)} GeMMs", paper, signed(mean)])
    return table(["statement (§5.1.4)", "paper", "meshtune"], rows)


def figure11_detail(weak: dict[str, Comparison]) -> str:
    names = [a for a in REGISTRY]
    rows = []
    for model, c in weak.items():
        for g in c.gemms:
            by = {e.algorithm: e for e in g.entries}
            rows.append(
                [MODELS[model], f"{g.m}×{g.n}×{g.k}", g.label]
                + [pct(by[n].utilization) if n in by else "-" for n in names]
            )
    return table(["model", "M×N×K", "GeMM", *names], rows)


def figure12(strong: dict[str, Comparison]) -> str:
    rows = []
    for model, c in strong.items():
        for label in PAPER:
            name = registered(label)
            cells = [pct(util(c, label, n)) if name else MISSING for n in CHIPS]
            rows.append([MODELS[model], label, *cells])
    return table(["model (batch 32)", "algorithm", *(f"{n} chips" for n in CHIPS)], rows)


def table2(weak: dict[str, Comparison]) -> str:
    paper = {"gpt3": ("55.6%", "67.4%", "+21.2%"), "megatron-nlg": ("78.2%", "82.2%", "+5.1%")}
    rows = []
    for model, c in weak.items():
        name = registered("MeshSlice")
        d = next(x for x in c.dataflow if x.algorithm == name)
        ours = (pct(d.unoptimized_utilization), pct(d.optimized_utilization), signed(d.speedup))
        rows.append(
            [MODELS[model], *(f"{p} / {o}" for p, o in zip(paper[model], ours, strict=True))]
        )
    return table(
        ["model (256 chips)", "not optimized (paper / ours)", "optimized", "speedup"], rows
    )


def figure13(weak: dict[str, Comparison]) -> str:
    rows = []
    name = registered("MeshSlice")
    for model, c in weak.items():
        shapes = [s for s in c.shapes if s.algorithm == name and s.utilization is not None]
        best = shapes[0]
        both_4 = [s for s in shapes if min(int(x) for x in s.mesh.split("x")) >= 4]
        worst_4 = min(both_4, key=lambda s: s.utilization or 0.0)
        worst = min(shapes, key=lambda s: s.utilization or 0.0)
        assert best.utilization and worst_4.utilization and worst.utilization
        listed = ", ".join(f"{s.mesh} {pct(s.utilization)}" for s in shapes)
        rows.append(
            [
                MODELS[model],
                best.mesh,
                f"{best.utilization / worst_4.utilization:.2f}× ({worst_4.mesh})",
                f"{best.utilization / worst.utilization:.2f}× ({worst.mesh})",
                listed,
            ]
        )
    return table(
        [
            "model (256 chips)",
            "best shape",
            "best / worst, both sides ≥ 4",
            "best / worst, all",
            "every shape",
        ],
        rows,
    )


def figure14(weak: dict[str, Comparison]) -> str:
    rows = []
    name = registered("MeshSlice")
    for model, c in weak.items():
        found = [s for s in c.slices if s.algorithm == name]
        tuned = found[0]
        forced = found[1:]
        best = max(forced, key=lambda s: s.utilization)
        listed = ", ".join(
            f"S={s.config['slices'] if s.config else '-'} {pct(s.utilization)}" for s in forced
        )
        rows.append(
            [
                MODELS[model],
                tuned.mesh,
                f"S={best.config['slices'] if best.config else '-'} ({pct(best.utilization)})",
                pct(tuned.utilization),
                listed,
            ]
        )
    return table(
        ["model (256 chips)", "mesh", "best common S", "each layer its own S", "every S"], rows
    )


def table3(cloud: dict[str, Comparison]) -> str:
    paper = {
        "gpt3": {"Collective": "47.4%", "Wang": "47.7%", "MeshSlice": "45.5%"},
        "megatron-nlg": {"Collective": "49.4%", "Wang": "46.4%", "MeshSlice": "47.1%"},
    }
    overlap_paper = {"gpt3": "65.7%", "megatron-nlg": "65.6%"}
    rows = []
    for model, c in cloud.items():
        by = {o.algorithm: o for o in c.overlap}
        for label in ("Collective", "Wang", "MeshSlice"):
            name = registered(label)
            o = by.get(name or "")
            rows.append(
                [
                    MODELS[model],
                    label,
                    paper[model][label],
                    pct(o.as_tuned_utilization) if o else MISSING,
                    pct(o.retuned_utilization) if o else MISSING,
                ]
            )
        ms = by.get(registered("MeshSlice") or "")
        rows.append(
            [
                MODELS[model],
                "MeshSlice Overlap (estimate)",
                overlap_paper[model],
                pct(ms.overlapped_utilization) if ms else MISSING,
                "-",
            ]
        )
    return table(["model (4x4)", "algorithm", "paper", "meshtune as run", "meshtune retuned"], rows)


def table3_claims(cloud: dict[str, Comparison]) -> str:
    paper = {"gpt3": ("≈4.5% (both models)", "+38.6%"), "megatron-nlg": ("≈4.5%", "+32.8%")}
    rows = []
    for model, c in cloud.items():
        by = {o.algorithm: o for o in c.overlap}
        ms, co = by.get(registered("MeshSlice") or ""), by.get(registered("Collective") or "")
        if not (ms and co and ms.as_tuned_utilization and co.as_tuned_utilization):
            continue
        extra = co.as_tuned_utilization / ms.as_tuned_utilization - 1
        gain = (ms.overlapped_utilization or 0.0) / co.as_tuned_utilization - 1
        rows.append(
            [f"{MODELS[model]}: MeshSlice time over Collective", paper[model][0], f"{extra:+.1%}"]
        )
        rows.append(
            [f"{MODELS[model]}: MeshSlice Overlap over Collective", paper[model][1], signed(gain)]
        )
    return table(["statement (§5.3.1)", "paper", "meshtune"], rows)


def main() -> None:
    """Compute every comparison and print the tables."""
    tpuv4, cloud_profile = load_profile("tpuv4"), load_profile("tpuv4-cloud-4x4")
    weak, strong, cloud = {}, {}, {}
    for model in MODELS:
        spec = load_model(model)
        weak[model] = compare_models(spec, tpuv4, CHIPS)
        strong[model] = compare_models(spec, tpuv4, CHIPS, batch=32, views=["scaling"])
        cloud[model] = compare_models(spec, cloud_profile, [16], views=["overlap"], mesh=Mesh(4, 4))
    sections = [
        ("Figure 9: FC FLOP utilization, weak scaling (tpuv4)", figure9(weak)),
        ("Figure 9: stated speedups and efficiency", figure9_claims(weak)),
        ("Figure 10: communication relative to compute at 256 chips", figure10(weak)),
        ("Figure 11: the 16 distinct GeMMs at 256 chips (stated averages)", figure11(weak)),
        ("Figure 11: per GeMM", figure11_detail(weak)),
        ("Figure 12: FC FLOP utilization, strong scaling (batch 32)", figure12(strong)),
        ("Table 2: dataflow optimization at 256 chips (MeshSlice)", table2(weak)),
        ("Figure 13: mesh shapes at 256 chips (MeshSlice)", figure13(weak)),
        ("Figure 14: slice counts on the best shape at 256 chips (MeshSlice)", figure14(weak)),
        ("Table 3: real 4x4 TPUv4 (tpuv4-cloud-4x4, batch 8)", table3(cloud)),
        ("Table 3: stated overheads", table3_claims(cloud)),
    ]
    print(f"Registered algorithms: {', '.join(REGISTRY)}.\n")
    for title, body in sections:
        print(f"#### {title}\n\n{body}\n")


if __name__ == "__main__":
    main()
