"""The plans the export tests use: the shipped ones and two cluster plans of the issue's
acceptance (llama3-70b on 1,024 H100, gpt3 on 4,096 TPUv4), made once per session."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from meshtune.cluster import ClusterOptions
from meshtune.plan import Plan, make_plan, read_plan
from meshtune.specs import load_model, load_profile

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "plans").glob("*.json"))
CLUSTER = ("llama3-70b-1024", "gpt3-4096")
NAMES = (*(p.stem for p in SHIPPED), *CLUSTER)
GOLDEN = REPO / "tests" / "data" / "export"


@cache
def plan_named(name: str) -> Plan:
    """A shipped plan by stem, or one of :data:`CLUSTER`."""
    if name == "llama3-70b-1024":
        return make_plan(
            load_model("llama3-70b"),
            load_profile("h100-8gpu-nodes"),
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
