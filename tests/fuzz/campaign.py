"""A seeded fuzz campaign outside pytest (issue 20): N cases across every command.

    python tests/fuzz/campaign.py --cases 10000 --seed 20 [--shard 0/2] [--log FILE]

Case i is made from ``random.Random(f"{seed}:{i}")`` alone, so a shard (cases with
i % n == k) or a single case (``--only i``) reproduces exactly. The mix: structure-aware plan
mutants through every plan-reading command (:mod:`planfuzz`), mutated model TOMLs (hostile
strings in their string fields too), profiles, Hugging Face configs, calibrate logs, odd option
values of gemm / compare / plan, every special file and hostile file name once. Prints each
distinct failure class (command, what broke, where raised) with its count and first reproducer;
``--log`` gets every failure in full.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import fuzzlib
from fuzzlib import REPO, Case, Failure, check_all, json_mutators, mutate, toml_mutators
from planfuzz import HOSTILE, Base, bases, hostile_path_cases, plan_case, special_file_cases, writer

from meshtune.io import FIFO_WAIT_ENV

MODELS = sorted((REPO / "models").glob("*.toml"))
PROFILES = sorted((REPO / "profiles").glob("*.toml"))
SAMPLES = sorted((REPO / "tests" / "calibrate" / "samples").iterdir())
HF = sorted((REPO / "tests" / "hf" / "configs").glob("*/config.json"))
ODD = ["0", "-1", "1", "3", "2.5", "", "abc", "nan", "1e30", fuzzlib.HUGE[:40], "4x4", ","]
_TOML_STRING = re.compile(rb'^(\s*[A-Za-z_][\w.-]*\s*=\s*)"[^"\n]*"', re.M)


def _toml_hostile(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """One string value of a TOML file becomes a hostile string (TOML-escaped)."""
    found = list(_TOML_STRING.finditer(data))
    if not found:
        return data, "no string field"
    match = rng.choice(found)
    label = rng.choice(sorted(HOSTILE))
    text = HOSTILE[label].encode("unicode_escape").decode().replace('"', '\\"')
    value = ('"' + text + '"').encode("utf-8", errors="surrogatepass")
    edited = data[: match.end(1)] + value + data[match.end() :]
    return edited, f"{match.group(1).decode().strip(' =')} = hostile {label}"


def make_case(rng: random.Random, all_bases: list[Base], folder: Path, model: Path) -> Case:
    out = folder / "out.txt"
    roll = rng.random()
    if roll < 0.62:
        small = [b for b in all_bases if b.chips <= 16]
        base = rng.choice(small if rng.random() < 0.85 else all_bases)
        return plan_case(rng, base, folder)
    target = folder / "input"
    if roll < 0.72:
        source = rng.choice(MODELS)
        mutators = [_toml_hostile] * 4 + toml_mutators()
        data, how = mutate(rng, source.read_bytes(), mutators)
        extra = rng.choice([[], ["--json"], ["-o", str(out)], ["--mesh-only", "--top", "2"]])
        args = ["plan", "--model-file", str(target), "--chips", rng.choice(["8", "16"]), *extra]
        kind = "model-toml"
    elif roll < 0.78:
        source = rng.choice(PROFILES)
        data, how = mutate(rng, source.read_bytes(), [_toml_hostile, *toml_mutators()])
        args = ["plan", "--model-file", str(model), "--chips", "8", "-p", str(target)]
        kind = "profile-toml"
    elif roll < 0.84:
        source = rng.choice(HF)
        data, how = mutate(rng, source.read_bytes(), json_mutators())
        extra = rng.choice([[], ["-o", str(out)], ["--name", rng.choice(list(HOSTILE.values()))]])
        args = ["models", "import", str(target), *extra]
        kind = "hf-config"
    elif roll < 0.90:
        source = rng.choice(SAMPLES)
        data, how = mutate(rng, source.read_bytes(), toml_mutators())
        extra = rng.choice([[], ["--json"], ["--strict"], ["-o", str(out)]])
        args = ["calibrate", str(target), "--axis-map", "both", "--base", "tpuv4", *extra]
        kind = "calibrate-log"
    else:
        return _option_case(rng, model)
    keep = (out,) if str(out) in args else ()
    return Case(args, f"{source.name}: {how}", data, keep=keep, kind=kind)


def _option_case(rng: random.Random, model: Path) -> Case:
    odd = lambda: rng.choice(ODD) if rng.random() < 0.3 else None  # noqa: E731
    command = rng.choice(["gemm", "compare", "plan"])
    if command == "gemm":
        sizes = [odd() or rng.choice(["8", "512", "4096", "12288"]) for _ in range(3)]
        chips = odd() or rng.choice(["4", "16", "64"])
        extra = rng.choice([[], ["--json"], [f"--mesh={odd() or '4x4'}"], ["--algorithms=all"]])
        args = ["gemm", f"--chips={chips}", *extra, "--", *sizes]
    elif command == "compare":
        chips = odd() or rng.choice(["4", "4,8", "16"])
        extra = rng.choice(
            [[], [f"--at={odd() or '8'}"], [f"--batch={odd() or '4'}"], ["--strong"]]
        )
        args = ["compare", "gpt3", f"--chips={chips}", *extra, "--json"]
    else:
        option = rng.choice(
            ["--dp", "--pp", "--micro-batches", "--mesh", "--batch", "--seq", "--top"]
        )
        args = [
            "plan",
            "--model-file",
            str(model),
            "--chips",
            odd() or "16",
            f"{option}={odd() or '2'}",
        ]
    return Case(args, "option values", kind=f"options-{command}")


def signature(failure: Failure) -> str:
    """A failure class: command, the broken part of the contract (numbers and paths blanked),
    where raised."""
    command = " ".join(a for a in failure.case.args[:2] if not a.startswith(("/", "-")))
    problem = re.sub(r"/\S+", "PATH", failure.problem)
    problem = re.sub(r"\d+", "N", problem)[:120]
    return f"{command} | {failure.case.kind} | {problem} | {failure.module}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", default="20")
    parser.add_argument("--shard", default="0/1")
    parser.add_argument("--only", type=int, default=None)
    parser.add_argument("--log", type=Path, default=None)
    ns = parser.parse_args()
    # As in tests/conftest.py: a FIFO with no writer is refused after 5 s, not the default 60 s
    # that the hang detector would race.
    os.environ.setdefault(FIFO_WAIT_ENV, "5")
    k, n = map(int, ns.shard.split("/"))
    folder = Path(tempfile.mkdtemp(prefix="meshtune-campaign-"))
    all_bases = bases(folder)
    model = folder / "gpt2.toml"
    failures: list[Failure] = []
    ran = 0
    if k == 0 and ns.only is None:
        once = [*special_file_cases(folder), *hostile_path_cases(folder, all_bases[3].text)]
        # One at a time: a child's CPU is measured over all children (RUSAGE_CHILDREN), so
        # children running side by side would be charged each other's CPU.
        failures += check_all(once)
        ran += len(once)
    for i in range(ns.cases) if ns.only is None else [ns.only]:
        if i % n != k and ns.only is None:
            continue
        case = make_case(random.Random(f"{ns.seed}:{i}"), all_bases, folder, model)
        case = Case(**{**case.__dict__, "how": f"case {i}: {case.how}"})
        found = check_all([case], _write(folder))
        failures += found
        ran += 1
        if ran % 250 == 0:
            print(f"{ran} cases, {len(failures)} failures", file=sys.stderr, flush=True)
        if ns.log and found:
            with ns.log.open("a", encoding="utf-8") as handle:
                handle.writelines(f"=== {signature(f)}\n{f}\n" for f in found)
    classes = Counter(signature(f) for f in failures)
    first = {}
    for f in failures:
        first.setdefault(signature(f), f)
    print(f"{ran} cases, {len(failures)} broke the contract, {len(classes)} classes")
    for key, count in classes.most_common():
        print(f"\n[{count}] {key}\n{str(first[key])[:900]}")
    return 1 if failures else 0


def _write(folder: Path) -> Callable[[Case], None]:
    """Puts a case's input in place: the plan file and the other input file (one is unused)."""
    plan_writer = writer(folder)

    def write(case: Case) -> None:
        plan_writer(case)
        if case.data is not None:
            (folder / "input").write_bytes(case.data)

    return write


if __name__ == "__main__":
    sys.exit(main())
