"""The plans the export tests use: the shipped ones, two cluster plans of the issue's
acceptance (llama3-70b on 1,024 H100, gpt3 on 4,096 TPUv4), and an expert-parallel and a
context-parallel plan (:data:`EP_CP`: Mixtral 8x7B with EP 8, Llama-2 70B at 32K tokens with
CP 4, 64 H100 each), made once per session."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from meshtune.catalog import load_model, load_profile
from meshtune.plan import Plan, read_plan
from meshtune.planner.make import make_plan
from meshtune.step.options import ClusterOptions

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "plans").glob("*.json"))
CLUSTER = ("llama3-70b-1024", "gpt3-4096")
EP_CP = ("mixtral-8x7b-ep8", "llama2-70b-cp4")
NAMES = (*(p.stem for p in SHIPPED), *CLUSTER, *EP_CP)
GOLDEN = REPO / "tests" / "data" / "export"


@cache
def plan_named(name: str) -> Plan:
    """A shipped plan by stem, or one of :data:`CLUSTER` and :data:`EP_CP`."""
    h100 = load_profile("h100-8gpu-nodes")
    if name == "mixtral-8x7b-ep8":
        return make_plan(
            load_model("mixtral-8x7b"), h100, 64, batch=64, cluster=ClusterOptions(ep=8, cp=1)
        )
    if name == "llama2-70b-cp4":
        options = ClusterOptions(cp=4)
        return make_plan(
            load_model("llama2-70b"), h100, 64, batch=16, seq_len=32768, cluster=options
        )
    if name == "llama3-70b-1024":
        return make_plan(
            load_model("llama3-70b"),
            h100,
            1024,
            batch=1024,
            cluster=ClusterOptions(),
        )
    if name == "gpt3-4096":
        return make_plan(load_model("gpt3"), load_profile("tpuv4"), 4096, cluster=ClusterOptions())
    path = REPO / "plans" / f"{name}.json"
    return read_plan(path.read_text(encoding="utf-8"), str(path))


def source(name: str) -> str:
    """The plan file name the exports are made with."""
    return f"plans/{name}.json"
