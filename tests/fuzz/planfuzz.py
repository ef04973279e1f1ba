"""Structure-aware mutation of plan files, hostile strings and special input files (issue 20).

A plan mutant is made from a parsed plan (the checked-in plans/*.json, a small plan of every
registered algorithm, a cluster plan): swapped layers, another algorithm's name and
configuration, inconsistent dataflows and shardings, a cluster section that contradicts the
mesh, huge numbers, wrong types, duplicate, deleted and added keys, hostile strings in string
fields. :func:`plan_cases` turns mutants into cases of every command that reads a plan
(`verify`, `timeline`, `export`, `run` up to where it would compile, `plan --check`); an
`export` that succeeds must print Python that compiles and, for a hostile string, has the same
top-level statements as the clean plan's module. :func:`special_file_cases` gives every command
that reads a file the inputs no mutation makes: devices, a FIFO with no writer, a folder, a
300-character name, an empty and a truncated file.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import random
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuzzlib import (
    HUGE,
    JSON_VALUES,
    REPO,
    Case,
    Outcome,
    _at,
    _paths,
    run,
)

from meshtune.algorithms.registry import algorithm_names
from meshtune.catalog import load_model, load_profile
from meshtune.model.hf import read_hf_config, spec_toml
from meshtune.model.spec import ModelSpec
from meshtune.planner.make import make_plan
from meshtune.step.options import ClusterOptions

HOSTILE: dict[str, str] = {
    "newline": "qkv\nimport os",
    "crlf": "a\r\nb",
    "quote": 'a"b',
    "apostrophe": "a'b",
    "triple-quote": '"""',
    "code-in-docstring": '"""\nimport os; os.system("echo pwned")  #',
    "triple-apostrophe": "'''\nraise SystemExit(3)\n'''",
    "backslash": "a\\",
    "bad-escape": "\\N{",
    "rich-markup": "[bold]x[/]",
    "rich-close": "[/]",
    "rich-link": "[link=file:///etc/passwd]x[/link]",
    "lone-surrogate": "\ud800",
    "nul": "a\x00b",
    "ansi": "\x1b[31mred\x1b[0m",
    "osc-title": "\x1b]0;owned\x07",
    "proc-kmsg": "/proc/kmsg",
    "dev-zero": "/dev/zero",
    "parent-path": "../../etc/passwd",
    "dash": "-",
    "long": "x" * 300,
    "empty": "",
    "blank": " \t",
    "bidi": "\u202eevil",
    "line-separator": "a\u2028b",
    "format": "{0}{x}%s%n",
    "shell": "$(touch /tmp/meshtune-pwned)",
    "comment": "# x",
    "dunder-import": "__import__('os').system('x')",
}
"""Strings no field of a plan, model or profile should be able to turn into code, markup,
terminal control or a path that is read."""

PLAN_COMMANDS = ("verify", "timeline", "export", "run", "check")


@dataclass(frozen=True)
class Base:
    """A plan to mutate and the `plan` options that re-derive it (for --check)."""

    name: str
    text: bytes
    derive: tuple[str, ...]
    chips: int


@functools.cache
def _small(algorithm: str) -> bytes:
    plan = make_plan(load_model("gpt3"), load_profile("tpuv4"), 4, algorithm=algorithm)
    return plan.to_json().encode()


def _gpt2() -> ModelSpec:
    return read_hf_config(REPO / "tests" / "hf" / "configs" / "gpt2" / "config.json").spec


def gpt2_model(folder: Path) -> Path:
    """GPT-2 small as a model TOML in ``folder`` (fits in memory on a few chips)."""
    path = folder / "gpt2.toml"
    path.write_text(spec_toml(_gpt2()), encoding="utf-8")
    return path


@functools.cache
def _cluster_plan() -> bytes:
    """GPT-2 small on 16 chips as 2 replicas x 2 stages x a 2x2 mesh."""
    options = ClusterOptions(dp=2, pp=2)
    return make_plan(_gpt2(), load_profile("tpuv4"), 16, cluster=options).to_json().encode()


def bases(folder: Path, algorithms: tuple[str, ...] | None = None) -> list[Base]:
    """The checked-in plans, a 4-chip GPT-3 plan per algorithm, a 16-chip GPT-2 cluster plan."""
    out = []
    for path in sorted((REPO / "plans").glob("*.json")):
        doc = json.loads(path.read_bytes())
        model, algorithm = doc["inputs"]["model"]["name"], doc["inputs"]["algorithm"]
        derive = (model, "--chips", "256", "--mesh-only", "--algorithm", algorithm)
        out.append(Base(path.stem, path.read_bytes(), derive, 256))
    for algorithm in algorithms or algorithm_names():
        derive = ("gpt3", "--chips", "4", "--mesh-only", "--algorithm", algorithm)
        out.append(Base(f"small-{algorithm}", _small(algorithm), derive, 4))
    derive = ("--model-file", str(gpt2_model(folder)), "--chips", "16", "--dp", "2", "--pp", "2")
    out.append(Base("cluster-gpt2", _cluster_plan(), derive, 16))
    return out


# --------------------------------------------------------------------------- plan mutators

Doc = dict[str, Any]


def _layer(rng: random.Random, doc: Doc) -> tuple[int, Doc]:
    layers = doc.get("layers") or [{}]
    i = rng.randrange(len(layers))
    return i, layers[i]


def swap_layers(rng: random.Random, doc: Doc) -> str:
    layers = doc["layers"]
    i, j = rng.sample(range(len(layers)), 2)
    if rng.random() < 0.5:
        layers[i], layers[j] = layers[j], layers[i]
        return f"layers {i} and {j} swapped"
    key = rng.choice(["passes", "config", "sharding", "dataflows", "name", "tokens"])
    layers[i][key], layers[j][key] = layers[j].get(key), layers[i].get(key)
    return f"layers {i} and {j} swap {key}"


def foreign_algorithm(rng: random.Random, doc: Doc) -> str:
    i, layer = _layer(rng, doc)
    other = rng.choice(algorithm_names())
    source = json.loads(_small(other))
    donor = rng.choice(source["layers"])
    what = rng.choice(["name", "name+config", "layer", "plan"])
    if what == "layer":
        doc["layers"][i] = donor
    elif what == "plan":
        doc["inputs"]["algorithm"] = other
    else:
        layer["algorithm"] = other
        if what == "name+config":
            layer["config"] = rng.choice(donor.get("config_candidates") or [donor["config"]])
    return f"layer {i}: {what} of algorithm {other}"


def inconsistent_dataflow(rng: random.Random, doc: Doc) -> str:
    i, layer = _layer(rng, doc)
    value = rng.choice(["OS", "LS", "RS", "os", "XS", "", None, 1])
    where = rng.choice(["dataflows", "pass", "stationary", "transposed", "sliced_dim"])
    if where == "dataflows":
        key = rng.choice(["forward", "backward_data", "backward_weight"])
        layer["dataflows"][key] = value
    elif where == "pass":
        j = rng.randrange(len(layer["passes"]))
        key = rng.choice(["dataflow", "name", "formula", "m", "n", "k", "iterations"])
        layer["passes"][j][key] = value if key in ("dataflow", "name") else rng.choice(JSON_VALUES)
        where = f"passes[{j}].{key}"
    elif where == "stationary":
        value = rng.choice(["X", "W", "Y", "Z", "y", None])
        layer[where] = value
    elif where == "transposed":
        value = not layer.get(where) if rng.random() < 0.7 else "yes"
        layer[where] = value
    else:
        value = rng.choice(["in", "out", "tokens", "x", None])
        layer[where] = value
    return f"layer {i} {where} = {value!r}"


def inconsistent_sharding(rng: random.Random, doc: Doc) -> str:
    i, layer = _layer(rng, doc)
    sharding = layer["sharding"]
    tensor = rng.choice(sorted(sharding))
    spec = sharding[tensor]
    op = rng.choice(["swap", "copy", "short", "long", "dims", "tensors"])
    if op == "swap" and isinstance(spec, list):
        spec.reverse()
    elif op == "copy":
        other = rng.choice(sorted(sharding))
        sharding[tensor] = sharding[other]
    elif op == "short":
        sharding[tensor] = spec[:1]
    elif op == "long":
        sharding[tensor] = [*spec, *spec]
    elif op == "dims":
        sharding[tensor] = [rng.choice(["tokens", "in", "out", "x", "", None, 0])] * 2
    else:
        sharding[rng.choice(["X", "Q", ""])] = sharding.pop(tensor)
    return f"layer {i} sharding {tensor}: {op}"


def cluster_contradiction(rng: random.Random, doc: Doc) -> str:
    cluster = doc.get("cluster")
    if not isinstance(cluster, dict):
        doc["cluster"] = json.loads(_cluster_template())
        return "a cluster section added to a mesh-only plan"
    key = rng.choice(["dp", "pp", "micro_batches", "micro_batch", "stage_blocks", "mesh"])
    if key == "mesh":
        doc["mesh"]["rows"] *= rng.choice([2, 3])
        return "mesh rows changed under the cluster section"
    value = rng.choice([0, -1, 3, 7, 1 << 20, 2**63, None, "2"])
    cluster[key] = value
    return f"cluster.{key} = {value!r}"


def _cluster_template() -> str:
    return json.dumps(json.loads(_cluster_plan())["cluster"])


def _pick_path(rng: random.Random, doc: Doc, want: Callable[[Any], bool]) -> tuple[Any, ...]:
    found = [p for p in _paths(doc) if p and want(_at(doc, p))]
    return rng.choice(found) if found else ("inputs", "chips")


def _set(doc: Doc, path: tuple[Any, ...], value: Any) -> None:
    _at(doc, path[:-1])[path[-1]] = value


def huge_number(rng: random.Random, doc: Doc) -> str:
    path = _pick_path(rng, doc, lambda v: isinstance(v, (int, float)) and not isinstance(v, bool))
    value = rng.choice(["__huge__", "__neg_huge__", 2**63, 2**31, 1e308, 1e-320, -0.0, 10**18])
    _set(doc, path, value)
    return f"{'.'.join(map(str, path))} = {str(value)[:20]}"


def wrong_type(rng: random.Random, doc: Doc) -> str:
    path = _pick_path(rng, doc, lambda v: True)
    value = rng.choice([None, True, "12", [], {}, [1], {"a": 1}, 1.5])
    _set(doc, path, value)
    return f"{'.'.join(map(str, path))} = {value!r}"


def delete_key(rng: random.Random, doc: Doc) -> str:
    path = _pick_path(rng, doc, lambda v: True)
    parent = _at(doc, path[:-1])
    del parent[path[-1]]
    return f"deleted {'.'.join(map(str, path))}"


def add_key(rng: random.Random, doc: Doc) -> str:
    path = _pick_path(rng, doc, lambda v: isinstance(v, dict))
    key = rng.choice(["extra", "__proto__", "layers", "name", ""])
    _at(doc, path)[key] = rng.choice(JSON_VALUES)
    return f"added {'.'.join(map(str, (*path, key)))}"


def duplicate_key(rng: random.Random, doc: Doc) -> str:
    path = _pick_path(rng, doc, lambda v: isinstance(v, dict) and bool(v))
    node = _at(doc, path)
    key = rng.choice(sorted(node))
    node[_DUPLICATE] = [key, rng.choice(JSON_VALUES)]
    return f"{'.'.join(map(str, (*path, key)))} given twice"


def hostile_string(rng: random.Random, doc: Doc) -> tuple[str, str]:
    label = rng.choice(sorted(HOSTILE))
    path = _pick_path(rng, doc, lambda v: isinstance(v, str))
    _set(doc, path, HOSTILE[label])
    return f"{'.'.join(map(str, path))} = hostile {label}", f"hostile:{label}"


_DUPLICATE = "__duplicate_key__"
PLAN_MUTATORS: dict[str, Callable[[random.Random, Doc], str | tuple[str, str]]] = {
    f.__name__: f
    for f in (
        swap_layers,
        foreign_algorithm,
        inconsistent_dataflow,
        inconsistent_sharding,
        cluster_contradiction,
        huge_number,
        wrong_type,
        delete_key,
        add_key,
        duplicate_key,
        hostile_string,
    )
}


_DECODER = json.JSONDecoder()


def serialise(doc: Doc, rng: random.Random) -> bytes:
    """JSON text of ``doc``, with what json.dumps cannot write spliced in (huge integers,
    duplicate keys); non-ASCII characters escaped or raw (a lone surrogate raw: not UTF-8)."""
    text = json.dumps(doc, indent=rng.choice([None, 1]), ensure_ascii=rng.random() < 0.7)
    marker = f'"{_DUPLICATE}": '
    while marker in text:
        at = text.index(marker)
        item, end = _DECODER.raw_decode(text, at + len(marker))  # any value, brackets in strings
        ok = isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
        key, value = item if ok else ("extra", item)  # a later mutation edited the marker
        text = text[:at] + f"{json.dumps(key)}: {json.dumps(value)}" + text[end:]
    text = text.replace('"__huge__"', HUGE).replace('"__neg_huge__"', "-" + HUGE)
    return text.encode("utf-8", errors="surrogatepass")


def mutate_plan(rng: random.Random, base: Base) -> tuple[bytes, str, list[str]]:
    """One to three structure-aware mutations of ``base``: (text, what was done, the mutation
    classes: mutator names, ``hostile:LABEL`` for a hostile string)."""
    doc = json.loads(base.text)
    kinds: list[str] = []
    steps = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        name = rng.choice(list(PLAN_MUTATORS))
        try:
            done = PLAN_MUTATORS[name](rng, doc)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            continue  # an earlier mutation removed what this one edits
        how, kind = done if isinstance(done, tuple) else (done, name)
        steps.append(how)
        kinds.append(kind)
    return serialise(doc, rng), "; ".join(steps), kinds


# --------------------------------------------------------------------------- cases

SENTINEL = b"an existing file: never replaced without --force\n"


def top_level(source: str) -> list[str]:
    """The kinds of a module's top-level statements (raises SyntaxError if it does not
    compile)."""
    compile(source, "<export>", "exec")
    return [type(node).__name__ for node in ast.parse(source).body]


def _module_text(outcome: Outcome, out: Path | None) -> str:
    if out is None:
        return outcome.stdout
    return out.read_text(encoding="utf-8", errors="surrogateescape")


def export_oracle(clean: list[str] | None, out: Path | None) -> Callable[[Outcome], str | None]:
    """An exported module must compile; with ``clean`` (the clean plan's top-level statement
    kinds), it must have the very same ones: a hostile string added no code."""

    def check(outcome: Outcome) -> str | None:
        if outcome.exit_code != 0:
            return None
        try:
            kinds = top_level(_module_text(outcome, out))
        except (SyntaxError, ValueError, UnicodeError) as exc:
            return f"the exported module does not compile: {exc}"[:300]
        if clean is not None and kinds != clean:
            extra = [k for k in kinds if k not in clean] or kinds[len(clean) :]
            return f"the exported module's top-level statements changed: {extra[:5]}"
        return None

    return check


@functools.cache
def clean_export(text: bytes) -> tuple[str, ...]:
    """Top-level statement kinds of the module `export` makes of a clean plan."""
    folder = Path(os.environ.get("TMPDIR", "/tmp"))
    path = folder / f"meshtune-fuzz-clean-{os.getpid()}.json"
    path.write_bytes(text)
    try:
        outcome, _, _ = run(Case(["export", str(path)], "clean plan"))
    finally:
        path.unlink()
    return tuple(top_level(outcome.stdout))


def _command(rng: random.Random, command: str, base: Base, plan: Path, out: Path) -> list[str]:
    options: list[list[str]]
    if command == "verify":
        options = [[], ["--json"], ["--max-chips", "16"], ["--seed", "3"]]
    elif command == "timeline":
        options = [[], ["--layer", "qkv"], ["-o", str(out)], ["-o", str(out), "--force"]]
        options += [["-o", "-"], ["--width", "8"]]
    elif command == "export":
        options = [[], [], ["-o", str(out)], ["-o", str(out), "--force"], ["--to", "jax"]]
    elif command == "run":
        options = [[], ["--size", "full"], ["--json"], ["--emit-log", str(out)]]
    else:
        return ["plan", *base.derive, "--check", str(plan), *rng.choice([[], ["--json"]])]
    return [command, str(plan), *rng.choice(options)]


def plan_case(
    rng: random.Random, base: Base, folder: Path, commands: tuple[str, ...] = PLAN_COMMANDS
) -> Case:
    """One structure-aware mutant of ``base`` through one plan-reading command."""
    plan, out = folder / "plan.json", folder / "out.txt"
    data, how, kinds = mutate_plan(rng, base)
    command = rng.choice(commands)
    if command == "verify" and base.chips > 16 and "timeline" in commands and rng.random() < 0.7:
        command = "timeline"  # a 256-chip verification costs 0.6 s: keep the budget for others
    args = _command(rng, command, base, plan, out)
    keep = (out,) if str(out) in args and "--force" not in args else ()
    expect = None
    if command == "export":
        target = out if str(out) in args else None
        only_strings = bool(kinds) and all(k.startswith("hostile:") for k in kinds)
        clean = list(clean_export(base.text)) if only_strings else None
        expect = export_oracle(clean, target)
    kind = "+".join(kinds) or "none"
    return Case(args, f"{base.name}: {how}", data, keep=keep, kind=kind, expect=expect)


def writer(folder: Path) -> Callable[[Case], None]:
    """Puts a case's plan in place and the sentinel output file back."""

    def write(case: Case) -> None:
        (folder / "out.txt").write_bytes(SENTINEL)
        if case.data is not None:
            (folder / "plan.json").write_bytes(case.data)

    return write


def hostile_path_cases(folder: Path, text: bytes) -> Iterator[Case]:
    """A good plan under a hostile file name through every plan command (export writes the
    name into its docstring)."""
    for label in ("code-in-docstring", "triple-apostrophe", "rich-markup", "ansi", "newline"):
        name = HOSTILE[label].replace("/", "_").replace("\x00", "") + ".json"
        path = folder / name
        path.write_bytes(text)
        clean = list(clean_export(text))
        how, kind = f"plan file named {label}", f"path:{label}"
        yield Case(["export", str(path)], how, expect=export_oracle(clean, None), kind=kind)
        for command in ("verify", "timeline", "run"):
            yield Case([command, str(path)], how, kind=kind)


def special_files(folder: Path) -> dict[str, Path]:
    """Inputs no mutation makes: devices (directly and behind a chain of links), a socket, a
    FIFO with no writer, a folder, a 300-character name, an empty file and a plan cut in half."""
    fifo, empty, truncated = folder / "fifo", folder / "empty.json", folder / "truncated.json"
    if not fifo.exists():
        os.mkfifo(fifo)
    empty.write_bytes(b"")
    truncated.write_bytes(_small("meshslice")[:1500])
    (folder / "a-folder").mkdir(exist_ok=True)
    links = {folder / "null-link": Path("/dev/null"), folder / "link.json": folder / "null-link"}
    for link, target in links.items():
        if not link.is_symlink():
            link.symlink_to(target)
    sock = folder / "socket.json"
    if not sock.exists():
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(str(sock))  # the name stays after the socket is closed
    return {
        "dev-zero": Path("/dev/zero"),
        "dev-null": Path("/dev/null"),
        "device-link": folder / "link.json",
        "socket": sock,
        "fifo": fifo,
        "folder": folder / "a-folder",
        "long-name": folder / ("n" * 300 + ".json"),
        "empty": empty,
        "truncated": truncated,
    }


CHILD_ONLY = ("dev-zero", "fifo")
"""Special files a case reads in a child process: they may block or fill memory."""


def file_commands(path: Path, model: Path) -> dict[str, list[str]]:
    """Every command that reads a file, reading ``path`` (``model``: a GPT-2 model TOML)."""
    p = str(path)
    return {
        "verify": ["verify", p],
        "timeline": ["timeline", p],
        "export": ["export", p],
        "run": ["run", p],
        "check": ["plan", "gpt3", "--chips", "4", "--mesh-only", "--check", p],
        "check-command": ["check", "--no-verify", p],
        "plan-from": ["plan", "gpt3", "--from", "megatron", p, "--chips", "8"],
        "validate-profile": ["validate", "--profile", f"a100-80gb={p}"],
        "model-file": ["plan", "--model-file", p, "--chips", "8"],
        "model-path": ["plan", p, "--chips", "8"],
        "profile": ["plan", "--model-file", str(model), "--chips", "8", "-p", p],
        "calibrate": ["calibrate", p],
        "models-import": ["models", "import", p],
        "plan-output": ["plan", "gpt3", "--chips", "4", "--mesh-only", "-o", p],
        "timeline-output": ["timeline", str(model.parent / "good.json"), "-o", p],
    }


def special_file_cases(folder: Path) -> list[Case]:
    """Every special file through every command that reads (or writes) a file."""
    model = gpt2_model(folder)
    (folder / "good.json").write_bytes(_small("meshslice"))
    out = []
    for label, path in special_files(folder).items():
        for command, args in file_commands(path, model).items():
            kind = f"file:{label}"
            if label == "fifo" and command.endswith("output"):
                continue  # an output FIFO with no reader is refused at once (tests/test_io.py)
            out.append(Case(args, f"{command} on {label}", child=label in CHILD_ONLY, kind=kind))
    return out
