"""The workspace's shape, read statically from the source: no app imports another app, no package imports an app,
no import circle inside any package (function-level imports included), every import of a workspace member is
declared, and no file cites a document outside the repository."""

from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE_DOCS = re.compile(r"\bDESIGN\.md|\bREFERENCE(\.md| §| \d)|\.\./shared")


@dataclass(frozen=True)
class Member:
    """A workspace member: its distribution name, import name, source root, whether it is an app, and what its
    pyproject declares (its dependencies and those of its extras)."""

    dist: str
    name: str
    src: Path
    is_app: bool
    declared: frozenset[str]


def members() -> list[Member]:
    out = []
    for kind in ("packages", "apps"):
        for project in sorted((ROOT / kind).glob("*/pyproject.toml")):
            meta = tomllib.loads(project.read_text())["project"]
            extras = [d for ds in meta.get("optional-dependencies", {}).values() for d in ds]
            deps = {re.split(r"[<>=!~ \[]", d, maxsplit=1)[0] for d in [*meta.get("dependencies", []), *extras]}
            (pkg,) = [p for p in (project.parent / "src").iterdir() if p.is_dir() and not p.name.endswith("egg-info")]
            out.append(Member(meta["name"], pkg.name, pkg, kind == "apps", frozenset(deps)))
    return out


def module_name(member: Member, path: Path) -> str:
    parts = path.relative_to(member.src.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_imports(path: Path, module: str, modules: set[str]) -> set[str]:
    """Modules `path` depends on: every import in the file, at module level, under `if TYPE_CHECKING:` (a circle of
    type imports is a circle of design too) and inside functions (a lazy import is an arrow too: a config whose
    `build()` imports the implementation that imports the config back is a circle). Relative imports are resolved.
    `from a import b` imports the module `a.b` when there is one, else `a` (the parent packages every import runs
    first are not counted)."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            subs = {f"{base}.{a.name}" for a in node.names} & modules
            out.update(subs)
            if len(subs) < len(node.names):
                out.add(base)
    return out


def import_graph(member: Member) -> dict[str, set[str]]:
    modules = {module_name(member, p): p for p in member.src.rglob("*.py")}
    names = set(modules)
    return {m: {i for i in module_imports(p, m, names) if i in modules and i != m} for m, p in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def imported_members(member: Member, by_name: dict[str, Member]) -> dict[str, set[str]]:
    """Workspace members imported anywhere in `member` (lazy imports included): member name -> importing files."""
    out: dict[str, set[str]] = {}
    for path in member.src.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top in by_name and top != member.name:
                    out.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return out


def test_the_workspace_has_its_packages_and_apps() -> None:
    names = {m.name for m in members()}
    assert {
        "trainers",
        "run_lifecycle",
        "async_pipeline",
        "rl_tasks",
        "moe_models",
        "flow_models",
        "engine_adapters",
        "sync_ppo",
        "async_ppo",
        "flow_grpo",
    } <= names


def test_no_app_imports_another_app_and_no_package_imports_an_app() -> None:
    by_name = {m.name: m for m in members()}
    bad = [
        f"{m.name} imports {other} in {sorted(files)[0]}"
        for m in by_name.values()
        for other, files in imported_members(m, by_name).items()
        if by_name[other].is_app
    ]
    assert not bad, bad


def test_every_import_of_a_workspace_member_is_declared_in_pyproject() -> None:
    by_name = {m.name: m for m in members()}
    bad = [
        f"{m.dist} imports {other} ({sorted(files)[0]}) without declaring {by_name[other].dist}"
        for m in by_name.values()
        for other, files in imported_members(m, by_name).items()
        if by_name[other].dist not in m.declared
    ]
    assert not bad, bad


def test_no_package_has_an_import_circle() -> None:
    found = {m.name: cycles(import_graph(m)) for m in members()}
    assert not {k: v for k, v in found.items() if v}, found


def test_the_cycle_finder_sees_a_circle_through_three_modules(tmp_path: Path) -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    source = tmp_path / "m.py"
    source.write_text("from p import sub, name\nif TYPE_CHECKING:\n    import q\ndef f():\n    import r\n")
    assert module_imports(source, "p.m", {"p", "p.sub", "p.m"}) == {"p", "p.sub", "q", "r"}


def test_a_circle_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    """The config-builds-its-implementation circle: `config.build()` imports `impl` lazily, `impl` imports
    `config` at module level."""
    root = tmp_path / "src" / "pkg"
    root.mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "config.py").write_text("class Config:\n    def build(self):\n        from pkg.impl import Impl\n")
    (root / "impl.py").write_text("from pkg.config import Config\n\nclass Impl:\n    pass\n")
    member = Member("pkg", "pkg", root, False, frozenset())
    assert cycles(import_graph(member)) == [["pkg.config", "pkg.impl"]]


def test_no_file_cites_a_document_outside_the_repository() -> None:
    roots = [ROOT / d for d in ("packages", "apps", "tests", "benchmarks", "docs", "scripts")]
    files = [p for r in roots if r.exists() for p in r.rglob("*") if p.suffix in (".py", ".md", ".sh", ".toml", ".c")]
    files += [ROOT / "README.md", ROOT / ".ci" / "run"]
    this = Path(__file__).resolve()
    bad = [str(p.relative_to(ROOT)) for p in files if p.resolve() != this and OUTSIDE_DOCS.search(p.read_text())]
    assert not bad, bad


def test_no_two_public_classes_of_the_workspace_share_a_name() -> None:
    """One type per name: a reader (or an import) never has to ask which `EngineConfig` is meant."""
    where: dict[str, list[str]] = {}
    for member in members():
        for path in member.src.rglob("*.py"):
            for node in ast.parse(path.read_text(), str(path)).body:
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    where.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    assert not {name: paths for name, paths in where.items() if len(paths) > 1}
