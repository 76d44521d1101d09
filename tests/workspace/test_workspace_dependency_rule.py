"""The dependency rule of the workspace, as data, and the tests that hold the code and docs/architecture.md to it.

`RULE` below is the one place the rule is written: every member (distribution name), its purpose in one line and
the members it may import (the allowed arrows). The tests read every member's sources with `ast` (nothing is
imported) and its `pyproject.toml`, and fail on: an import of another member that is not an arrow of the rule, an
arrow that no import uses any more, a circle in the rule, an arrow into an app, a third-party import whose
distribution the member does not declare (bar the optional imports of `OPTIONAL`), a declared dependency that is
never imported (bar those `Rule.unused` gives a reason for), and any difference between `RULE` and the table that
docs/architecture.md draws.

`test_workspace_layout.py` checks from the code alone that no app imports another app, that no package imports an
app, that every import of a member is declared and that no package has an import circle between its own modules.
This file adds the rule those checks lack: the arrows come from `RULE`, not from whatever pyproject declares, and
the declarations are held to every import (third-party ones too) and every import to a declaration; a member
import missing from pyproject fails here as well as there.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"


@dataclass(frozen=True)
class Rule:
    """One member's place in the rule.

    `may_import`: the members (distribution names) its sources may import, each an arrow of the rule.
    `to_remove`: arrows of `may_import` that today's code needs but the design wants gone: target -> why.
    `unused`: dependencies its pyproject declares that no source imports: distribution -> why (or that it is a
    declaration to drop).
    """

    purpose: str
    may_import: tuple[str, ...] = ()
    to_remove: Mapping[str, str] = field(default_factory=dict)
    unused: Mapping[str, str] = field(default_factory=dict)


ENGINES = (
    "registers the rollout and teacher engines the app's sections name (`rollout_core.engine_registry`, entry points "
    "by kind); the app never imports them by name"
)

RULE: dict[str, Rule] = {
    "routing-state": Rule("Routing rows per input position with their weight versions, for router replay (numpy only)"),
    "rollout-core": Rule(
        "The `Engine` protocol, segments and trajectories, the resume loop and the agent loop (no torch)",
        ("routing-state",),
    ),
    "run-lifecycle": Rule(
        "One run's lifecycle: typed configs from defaults, TOML and `--section.key` flags; the run directory "
        "(metrics JSONL, progress, plots, lock); the command line with `--resume`, the step loop, `due()`, "
        "checkpoints and summary (no torch)"
    ),
    "moe-models": Rule(
        "MoE LMs of five families (Qwen3-MoE, Qwen2-MoE, Mixtral, DeepSeek-V3, GPT-OSS) with router capture and "
        "replay, their HF checkpoints, tokenizers (a byte-level BPE chat tokenizer, a char tokenizer), the precision "
        "probe"
    ),
    "flow-models": Rule(
        "Flow-matching image models, their SDE sampler with per-step log-probs, the SD3 adapter",
        ("run-lifecycle",),
    ),
    "engine-adapters": Rule(
        "Every rollout engine behind `Engine`: the embedded native engine (continuous batching, abort, pause, live "
        "weight updates, teacher scoring, greedy evaluation; extra `native`) and vLLM and SGLang over HTTP, as "
        "rollout engines that own their server (no torch)",
        ("moe-models", "rl-tasks", "rollout-core", "routing-state"),
    ),
    "rl-tasks": Rule(
        "Tasks, reward functions, dataset loaders and the `model` section (no torch)",
        ("moe-models", "run-lifecycle"),
    ),
    "trainers": Rule(
        "The trainers: losses, `train_step`, backends and weight sync; the LLM recipe (sections, setup, rollout, "
        "policy trainer, export, warm-up, greedy evaluation), distillation's teacher side, FlowGRPO's step",
        ("flow-models", "moe-models", "rl-tasks", "rollout-core", "routing-state", "run-lifecycle"),
    ),
    "async-pipeline": Rule(
        "The async machinery on Ray: the Ray session, prompt broker and ledger, staleness bound, rollouter fleet, "
        "trainer, validator and teacher actors, step transport, FlowGRPO's batches in flight",
        ("engine-adapters", "flow-models", "moe-models", "rollout-core", "run-lifecycle", "trainers"),
    ),
    "sync-ppo": Rule(
        "Synchronous PPO/GRPO in one process: its command line over `trainers.sync_ppo`",
        ("run-lifecycle", "trainers"),
        unused={"engine-adapters": ENGINES},
    ),
    "async-ppo": Rule(
        "Asynchronous PPO/GRPO on Ray: its command line over `async_pipeline.async_ppo`",
        ("async-pipeline", "run-lifecycle", "trainers"),
        unused={"engine-adapters": ENGINES},
    ),
    "flow-grpo": Rule(
        "FlowGRPO for flow-matching image models: its command line, its `ray` section and the assembly of a run "
        "(Ray rollouter, batches in flight) for `trainers.flow`'s loop",
        ("async-pipeline", "run-lifecycle", "trainers"),
    ),
}


@dataclass(frozen=True)
class OptionalImport:
    """A third-party import a member makes without declaring it in `[project].dependencies`.

    `within`: the file or folder (a path under the member's `src/`) that may make it; anywhere else it is an
    undeclared import. `distribution`: what provides the module. `declared_in`: where that distribution is declared
    instead: `extra NAME` (the member's `[project.optional-dependencies]`), `group NAME` (the member's
    `[dependency-groups]`), `root-group NAME` (the workspace root's) or `script PATH` (the separate environment
    that script builds; only that the script exists is checked). `why`: what keeps the import off the default
    install's path.
    """

    member: str
    module: str
    within: str
    distribution: str
    declared_in: str
    why: str


VLLM_WORKER = "runs inside vLLM's worker process, in vLLM's environment; nothing in engine_adapters imports it"
LLM = "the LLM modules (models, tasks, the recipe); the FlowGRPO path never imports them (apps/flow_grpo runs without)"
FLOW = "FlowGRPO's modules, imported only by the FlowGRPO path"
NATIVE = "the native engine's modules (engine_adapters.native), imported only where a native engine is built or run"
OPTIONAL: tuple[OptionalImport, ...] = (
    OptionalImport("trainers", "moe_models", "trainers/", "moe-models", "extra llm", LLM),
    OptionalImport("trainers", "rl_tasks", "trainers/", "rl-tasks", "extra llm", LLM),
    OptionalImport("trainers", "flow_models", "trainers/flow/", "flow-models", "extra flow", FLOW),
    OptionalImport("trainers", "matplotlib", "trainers/flow/pictures.py", "matplotlib", "extra flow", FLOW),
    OptionalImport("async-pipeline", "moe_models", "async_pipeline/", "moe-models", "extra llm", LLM),
    OptionalImport("async-pipeline", "engine_adapters", "async_pipeline/", "engine-adapters", "extra llm", LLM),
    OptionalImport("async-pipeline", "flow_models", "async_pipeline/flow_", "flow-models", "extra flow", FLOW),
    *(
        OptionalImport("engine-adapters", module, "engine_adapters/native/", dist, "extra native", NATIVE)
        for module, dist in (
            ("torch", "torch"),
            ("safetensors", "safetensors"),
            ("moe_models", "moe-models"),
            ("rl_tasks", "rl-tasks"),
        )
    ),
    OptionalImport(
        "engine-adapters",
        "vllm",
        "engine_adapters/vllm/worker_ext/",
        "vllm",
        "script scripts/setup_vllm_env.sh",
        VLLM_WORKER,
    ),
    OptionalImport(
        "engine-adapters",
        "torch",
        "engine_adapters/vllm/worker_ext/",
        "torch",
        "script scripts/setup_vllm_env.sh",
        VLLM_WORKER,
    ),
    OptionalImport(
        "engine-adapters",
        "safetensors",
        "engine_adapters/vllm/worker_ext/",
        "safetensors",
        "script scripts/setup_vllm_env.sh",
        VLLM_WORKER,
    ),
    OptionalImport(
        "flow-models",
        "diffusers",
        "flow_models/diffusers_adapter.py",
        "diffusers",
        "group dev",
        "imported in `require_diffusers` under try/except ImportError, which names the install command",
    ),
    OptionalImport(
        "trainers",
        "megatron",
        "trainers/backend/megatron/",
        "megatron-core",
        "extra megatron",
        "the Megatron backend's modules are imported only when `backend.kind` is `megatron`",
    ),
    OptionalImport(
        "trainers",
        "veomni",
        "trainers/backend/veomni/",
        "veomni",
        "root-group veomni",
        "the VeOmni backend's modules are imported only when `backend.kind` is `veomni`; not an extra of trainers "
        "because its pins would resolve every member's isolated install (see the root pyproject.toml)",
    ),
    OptionalImport(
        "trainers",
        "transformers",
        "trainers/rank_worker.py",
        "transformers",
        "root-group veomni",
        "imported only when `find_spec('transformers')` finds it (VeOmni's ranks; the Megatron environment has it for "
        "its DeepSeek-V3 parity tests)",
    ),
)


# ----------------------------------------------------------------------------------------------- reading the tree


@dataclass(frozen=True)
class Member:
    """A workspace member as its pyproject and sources give it: names, kind, declarations and imports."""

    dist: str
    name: str
    is_app: bool
    declared: frozenset[str]
    extras: Mapping[str, frozenset[str]]
    groups: Mapping[str, frozenset[str]]
    imports: Mapping[str, frozenset[str]]  # top-level module -> files (paths under src/) that import it


def requirement_names(requirements: Iterable[str]) -> frozenset[str]:
    return frozenset(canonicalize_name(Requirement(r).name) for r in requirements)


def imports_of(package: Path) -> dict[str, frozenset[str]]:
    """Top-level modules the sources under `package` import, anywhere in a file (function bodies and
    `if TYPE_CHECKING:` blocks included), without the package itself, the standard library, relative imports and
    sibling modules (`<name>.py` next to the importing file: the vLLM worker extension's folder is put on vLLM's
    PYTHONPATH, so its files import each other by top-level name)."""
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        where = path.relative_to(package.parent).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.partition(".")[0]
                sibling = (path.parent / f"{top}.py").exists()
                if top != package.name and top not in sys.stdlib_module_names and not sibling:
                    found.setdefault(top, set()).add(where)
    return {k: frozenset(v) for k, v in found.items()}


@cache
def read_members(root: Path = ROOT) -> dict[str, Member]:
    out = {}
    for kind in ("packages", "apps"):
        for project in sorted((root / kind).glob("*/pyproject.toml")):
            data = tomllib.loads(project.read_text())
            meta = data["project"]
            (package,) = [p for p in (project.parent / "src").iterdir() if p.is_dir() and "." not in p.name]
            dist = canonicalize_name(meta["name"])
            out[dist] = Member(
                dist,
                package.name,
                kind == "apps",
                requirement_names(meta.get("dependencies", [])),
                {k: requirement_names(v) for k, v in meta.get("optional-dependencies", {}).items()},
                {k: requirement_names(v) for k, v in data.get("dependency-groups", {}).items()},
                imports_of(package),
            )
    return out


def module_providers(members: Mapping[str, Member]) -> dict[str, frozenset[str]]:
    """Top-level module -> the distributions that provide it: the installed environment's, with the workspace
    members from their own pyprojects (editable installs do not list their modules)."""
    out = {m: frozenset(canonicalize_name(d) for d in ds) for m, ds in packages_distributions().items()}
    out.update({m.name: frozenset({m.dist}) for m in members.values()})
    return out


def member_arrows(members: Mapping[str, Member]) -> dict[str, dict[str, frozenset[str]]]:
    """Member -> the other members it imports -> the files that import each."""
    by_name = {m.name: m.dist for m in members.values()}
    return {
        m.dist: {by_name[top]: files for top, files in m.imports.items() if top in by_name} for m in members.values()
    }


# ----------------------------------------------------------------------------------------------------- checkers


def arrows_outside_the_rule(arrows: Mapping[str, Mapping[str, Iterable[str]]], rule: Mapping[str, Rule]) -> list[str]:
    return [
        f"{src} imports {dst} ({sorted(files)[0]}), not an arrow of the rule"
        for src, targets in sorted(arrows.items())
        for dst, files in sorted(targets.items())
        if dst not in (rule[src].may_import if src in rule else ())
    ]


def arrows_no_import_uses(arrows: Mapping[str, Mapping[str, Iterable[str]]], rule: Mapping[str, Rule]) -> list[str]:
    return [
        f"the rule lets {src} import {dst}, which it never does: remove the arrow"
        for src, r in sorted(rule.items())
        for dst in r.may_import
        if dst not in arrows.get(src, {})
    ]


def circle(graph: Mapping[str, Iterable[str]]) -> list[str]:
    """One circle of `graph` (its nodes in order, the first repeated at the end), or [] when it is a DAG."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def arrows_into_apps(rule: Mapping[str, Rule], apps: set[str]) -> list[str]:
    return [f"{src} may import the app {dst}" for src, r in sorted(rule.items()) for dst in r.may_import if dst in apps]


def undeclared_imports(
    member: Member, providers: Mapping[str, frozenset[str]], optional: Iterable[OptionalImport]
) -> list[str]:
    """Imports of `member` whose distribution its `[project].dependencies` do not declare, outside the places
    `optional` allows them in."""
    allowed = [(o.module, o.within) for o in optional if o.member == member.dist]
    bad = []
    for module, files in sorted(member.imports.items()):
        dists = providers.get(module)
        if dists is not None and dists & member.declared:
            continue
        stray = sorted(f for f in files if not any(module == m and f.startswith(w) for m, w in allowed))
        if stray:
            what = f"distribution {'/'.join(sorted(dists))}" if dists else "no installed distribution"
            bad.append(f"{member.dist} imports {module} ({what}) in {stray[0]} without declaring it")
    return bad


def unused_declarations(
    member: Member, providers: Mapping[str, frozenset[str]], unused: Mapping[str, str]
) -> list[str]:
    """Declared dependencies of `member` that none of its imports comes from, and reasons `unused` gives for a
    dependency that is imported after all (or not declared at all)."""
    used = set().union(*(providers.get(module, frozenset()) for module in member.imports))
    bad = [
        f"{member.dist} declares {dist} but never imports it"
        for dist in sorted(member.declared - used)
        if dist not in unused
    ]
    bad += [
        f"{member.dist}: `unused` lists {dist}, which it imports or does not declare"
        for dist in sorted(unused)
        if dist in used or dist not in member.declared
    ]
    return bad


def optional_import_problems(
    optional: Iterable[OptionalImport],
    members: Mapping[str, Member],
    root_groups: Mapping[str, frozenset[str]],
    root: Path,
) -> list[str]:
    """An optional import that no file makes any more, or whose distribution is not declared where it says."""
    bad = []
    for o in optional:
        member = members[o.member]
        if not any(f.startswith(o.within) for f in member.imports.get(o.module, ())):
            bad.append(f"{o.member}: no file under {o.within} imports {o.module}: remove it from OPTIONAL")
        kind, _, name = o.declared_in.partition(" ")
        places = {"extra": member.extras, "group": member.groups, "root-group": root_groups}
        if kind == "script":
            if not (root / name).is_file():
                bad.append(f"{o.member}: no script {name} builds the environment of {o.distribution}")
        elif canonicalize_name(o.distribution) not in places[kind].get(name, frozenset()):
            bad.append(f"{o.member}: {o.distribution} is not in {o.declared_in}")
    return bad


DOC_ROW = re.compile(r"^\| `(?P<dist>[a-z-]+)` \| (?P<purpose>[^|]+?) \| (?P<deps>[^|]*?) \|$")
DOC_DEP = re.compile(r"^`(?P<dist>[a-z-]+)`(?P<remove> \(to remove\))?$")


def rule_in_doc(text: str) -> dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """The rule table of docs/architecture.md: member -> (purpose, may import, arrows to remove). A row is
    ``| `member` | purpose | `a`, `b` (to remove) |``, with `-` for no arrow; the table follows the header row
    `| member | purpose | may import |`."""
    lines = text.splitlines()
    start = lines.index("| member | purpose | may import |") + 2
    out = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        row = DOC_ROW.match(line)
        assert row, f"docs/architecture.md: a rule row not in the form | `member` | purpose | `dep`, ... |: {line}"
        deps = [] if row["deps"] == "-" else [DOC_DEP.match(d.strip()) for d in row["deps"].split(",")]
        assert all(deps), f"docs/architecture.md: an arrow not written `name` or `name` (to remove): {line}"
        out[row["dist"]] = (
            row["purpose"],
            tuple(d["dist"] for d in deps),
            tuple(d["dist"] for d in deps if d["remove"]),
        )
    return out


def rule_as_doc(rule: Mapping[str, Rule]) -> dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]]:
    return {k: (r.purpose, r.may_import, tuple(d for d in r.may_import if d in r.to_remove)) for k, r in rule.items()}


# ------------------------------------------------------------------------------------------- the workspace today


def test_the_rule_names_every_workspace_member_and_nothing_else() -> None:
    assert sorted(RULE) == sorted(read_members())


def test_the_rule_is_a_dag() -> None:
    assert circle({k: r.may_import for k, r in RULE.items()}) == []


def longest_chain(rule: Mapping[str, Rule]) -> list[str]:
    """The longest path of members along the rule's arrows (a DAG), from the top down."""

    @cache
    def chain(member: str) -> tuple[str, ...]:
        below = [chain(d) for d in rule[member].may_import]
        return (member, *max(below, key=len, default=()))

    return list(max((chain(m) for m in rule), key=len))


MAX_CHAIN = 5
"""The longest chain of member dependencies allowed (apps included): e.g. async-ppo -> async-pipeline -> trainers
-> rollout-core -> routing-state."""


def test_the_longest_chain_of_members_is_at_most_max_chain() -> None:
    chain = longest_chain(RULE)
    assert len(chain) <= MAX_CHAIN, " -> ".join(chain)


def test_the_longest_chain_is_found() -> None:
    rule = {"a": Rule("", ("b", "c")), "b": Rule("", ("c",)), "c": Rule("", ("d",)), "d": Rule("")}
    assert longest_chain(rule) == ["a", "b", "c", "d"]


def test_no_arrow_of_the_rule_points_at_an_app() -> None:
    apps = {m.dist for m in read_members().values() if m.is_app}
    assert apps == {"sync-ppo", "async-ppo", "flow-grpo"}
    assert arrows_into_apps(RULE, apps) == []


def test_every_arrow_to_remove_is_an_arrow_of_the_rule_with_a_reason() -> None:
    bad = [(k, d) for k, r in RULE.items() for d, why in r.to_remove.items() if d not in r.may_import or not why]
    assert bad == []
    assert {(k, d) for k, r in RULE.items() for d in r.to_remove} == set()


def test_every_import_of_another_member_is_an_arrow_of_the_rule() -> None:
    assert arrows_outside_the_rule(member_arrows(read_members()), RULE) == []


def test_every_arrow_of_the_rule_is_an_import_of_todays_code() -> None:
    assert arrows_no_import_uses(member_arrows(read_members()), RULE) == []


def test_every_third_party_import_is_declared_or_a_listed_optional_import() -> None:
    members = read_members()
    providers = module_providers(members)
    assert [line for m in members.values() for line in undeclared_imports(m, providers, OPTIONAL)] == []


def test_every_optional_import_is_still_made_and_declared_where_the_list_says() -> None:
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    groups = {k: requirement_names(v) for k, v in root.get("dependency-groups", {}).items()}
    assert optional_import_problems(OPTIONAL, read_members(), groups, ROOT) == []


def test_every_declared_dependency_is_imported_or_listed_as_unused_with_a_reason() -> None:
    members = read_members()
    providers = module_providers(members)
    assert [line for m in members.values() for line in unused_declarations(m, providers, RULE[m.dist].unused)] == []


def test_the_workspace_root_depends_on_every_member_and_nothing_else() -> None:
    """The root is no package (no sources): its dependencies exist so that `uv run` installs the whole framework."""
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert root["tool"]["uv"]["package"] is False
    assert requirement_names(root["project"]["dependencies"]) == set(read_members())


def test_the_architecture_page_draws_the_rule() -> None:
    assert rule_in_doc(ARCHITECTURE.read_text()) == rule_as_doc(RULE)


# --------------------------------------------------------------------------- each checker fails on a broken input


def fake_member(dist: str, declared: Iterable[str] = (), imports: Mapping[str, Iterable[str]] | None = None) -> Member:
    files = {k: frozenset(v) for k, v in (imports or {}).items()}
    return Member(dist, dist.replace("-", "_"), False, frozenset(declared), {}, {}, files)


def test_an_import_outside_the_rule_and_an_arrow_without_an_import_are_reported() -> None:
    rule = {"a": Rule("", ("b",)), "b": Rule(""), "c": Rule("", ("a",))}
    arrows = {"a": {"b": ["a/x.py"], "c": ["a/y.py"]}, "b": {}, "c": {}}
    assert arrows_outside_the_rule(arrows, rule) == ["a imports c (a/y.py), not an arrow of the rule"]
    assert arrows_no_import_uses(arrows, rule) == ["the rule lets c import a, which it never does: remove the arrow"]
    assert arrows_outside_the_rule({"d": {"a": ["d/z.py"]}}, rule) == ["d imports a (d/z.py), not an arrow of the rule"]


def test_a_circle_in_a_rule_is_found_and_a_dag_has_none() -> None:
    assert circle({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == ["a", "b", "c", "a"]
    assert circle({"a": ["a"]}) == ["a", "a"]
    assert circle({"a": ["b", "c"], "b": ["c"], "c": []}) == []


def test_an_arrow_into_an_app_is_reported() -> None:
    rule = {"pkg": Rule("", ("app2",)), "app1": Rule("", ("pkg", "app2")), "app2": Rule("", ("pkg",))}
    assert arrows_into_apps(rule, {"app1", "app2"}) == ["app1 may import the app app2", "pkg may import the app app2"]


def test_an_undeclared_import_is_reported_unless_an_optional_import_allows_it_where_it_is() -> None:
    providers = {"numpy": frozenset({"numpy"}), "sklearn": frozenset({"scikit-learn"}), "x": frozenset({"x"})}
    member = fake_member("m", ["numpy"], {"numpy": ["m/a.py"], "sklearn": ["m/b.py"], "x": ["m/opt/c.py", "m/d.py"]})
    optional = [OptionalImport("m", "x", "m/opt/", "x", "extra x", "")]
    assert undeclared_imports(member, providers, optional) == [
        "m imports sklearn (distribution scikit-learn) in m/b.py without declaring it",
        "m imports x (distribution x) in m/d.py without declaring it",
    ]
    unknown = fake_member("m", [], {"nowhere": ["m/a.py"]})
    assert undeclared_imports(unknown, providers, []) == [
        "m imports nowhere (no installed distribution) in m/a.py without declaring it"
    ]


def test_a_declared_dependency_never_imported_is_reported_unless_a_reason_is_given() -> None:
    providers = {"numpy": frozenset({"numpy"}), "b": frozenset({"b"})}
    member = fake_member("m", ["numpy", "b", "c", "d"], {"numpy": ["m/a.py"]})
    assert unused_declarations(member, providers, {"c": "why"}) == [
        "m declares b but never imports it",
        "m declares d but never imports it",
    ]
    assert unused_declarations(member, providers, {"b": "", "c": "", "d": "", "numpy": "", "e": ""}) == [
        "m: `unused` lists e, which it imports or does not declare",
        "m: `unused` lists numpy, which it imports or does not declare",
    ]


def test_an_optional_import_no_file_makes_or_declared_nowhere_is_reported(tmp_path: Path) -> None:
    member = Member("m", "m", False, frozenset(), {"fast": frozenset({"x"})}, {}, {"x": frozenset({"m/opt/a.py"})})
    (tmp_path / "setup.sh").write_text("pip install x\n")
    good = [
        OptionalImport("m", "x", "m/opt/", "x", "extra fast", ""),
        OptionalImport("m", "x", "m/opt/", "x", "script setup.sh", ""),
    ]
    assert optional_import_problems(good, {"m": member}, {}, tmp_path) == []
    bad = [
        OptionalImport("m", "x", "m/other/", "x", "extra fast", ""),
        OptionalImport("m", "x", "m/opt/", "x", "root-group dev", ""),
        OptionalImport("m", "x", "m/opt/", "x", "script missing.sh", ""),
    ]
    assert optional_import_problems(bad, {"m": member}, {"dev": frozenset({"z"})}, tmp_path) == [
        "m: no file under m/other/ imports x: remove it from OPTIONAL",
        "m: x is not in root-group dev",
        "m: no script missing.sh builds the environment of x",
    ]


def test_the_source_reader_sees_function_level_and_type_checking_imports_and_skips_the_rest(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("import os\nfrom . import sub\nfrom pkg.sub import x\nimport numpy.linalg\n")
    (package / "sub" / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from other.types import T\n"
        "def f():\n    import torch\n    from .. import y\n"
    )
    assert imports_of(package) == {
        "numpy": frozenset({"pkg/__init__.py"}),
        "other": frozenset({"pkg/sub/__init__.py"}),
        "torch": frozenset({"pkg/sub/__init__.py"}),
    }


def test_the_doc_table_reader_gives_the_rule_and_refuses_a_malformed_row() -> None:
    text = (
        "intro\n\n| member | purpose | may import |\n|---|---|---|\n| `a` | Leaf, no imports | - |\n"
        "| `b` | Uses a and c | `a`, `c` (to remove) |\n\nafter\n"
    )
    assert rule_in_doc(text) == {"a": ("Leaf, no imports", (), ()), "b": ("Uses a and c", ("a", "c"), ("c",))}
    rule = {"a": Rule("Leaf, no imports"), "b": Rule("Uses a and c", ("a", "c"), to_remove={"c": "why"})}
    assert rule_in_doc(text) == rule_as_doc(rule)
    assert rule_in_doc(text) != rule_as_doc({**rule, "b": Rule("Uses a and c", ("a", "c"))})
    with pytest.raises(AssertionError, match="an arrow not written"):
        rule_in_doc(text.replace("`a`, `c` (to remove)", "a, c"))
    with pytest.raises(AssertionError, match="a rule row not in the form"):
        rule_in_doc(text.replace("| `a` | Leaf, no imports | - |", "| a | Leaf | - |"))
