"""Every `uv run ...` command shown in README.md, docs/*.md and the members' READMEs runs as shown, at `--help`
level: an app's flags resolve through that app's own `parse` (every key known, every value checked, the files it
names present), a script's or module's flags are among the `add_argument` options it defines, every repository
path a command names exists, and the apps' `--help` really runs. A failure names the file and line of the command.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# What `uv run` itself accepts before the command (those that take a value map to True).
UV_RUN_OPTIONS = {
    "--no-sync": False,
    "--locked": False,
    "--frozen": False,
    "--package": True,
    "--group": True,
    "--with": True,
}
# Placeholders the docs use for values only the reader has: replaced by a value of the right kind before parsing.
PLACEHOLDERS = ("DIR", "DIR1", "DIR2", "SYNC_RUN", "ASYNC_RUN", "HEAD_IP", "URL", "N", "S", "<run dir>")
# Benchmarks that forward the flags after `--` to the apps, and the apps that get them.
PASSTHROUGH = {"benchmarks/async_vs_sync.py": ("sync_ppo", "async_ppo"), "benchmarks/trl_grpo.py": ("sync_ppo",)}
REPO_PATH = re.compile(r"^(?:\./)?((?:configs|benchmarks|scripts|docs|tests|packages|apps)/[\w./-]*[\w/])")
FENCE = re.compile(r"^\s*```(\w*)\s*$")
INLINE = re.compile(r"(`+)(.+?)\1", re.DOTALL)
UV_RUN = re.compile(r"(?:^|(?<=\s))((?:[A-Z][A-Z0-9_]*=\S+\s+)*uv run\s+\S.*)")  # a bare `uv run` is prose


@dataclass(frozen=True)
class Command:
    """One `uv run` command as the docs show it (placeholders kept), with the file and line it starts on."""

    file: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: `{self.text}`"


def doc_files() -> list[Path]:
    return [
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted(ROOT.glob("packages/*/README.md")),
        *sorted(ROOT.glob("apps/*/README.md")),
    ]


def _commands_in(text: str) -> Iterator[str]:
    """The `uv run ...` commands of one code line or inline span: split at `&&` and `;`, shell comments dropped."""
    for part in re.split(r"&&|;", text):
        part = re.sub(r"(^|\s)#.*$", "", part).strip()
        match = UV_RUN.search(part)
        if match:
            yield " ".join(match.group(1).split())


def extract(path: Path, root: Path = ROOT) -> list[Command]:
    """The `uv run` commands of a Markdown file (named relative to `root`): each line of a shell code block (with
    `\\` continuations joined) and each inline code span of the prose (a span may wrap over lines)."""
    name = str(path.relative_to(root))
    lines = path.read_text().splitlines()
    found: list[Command] = []
    prose: list[tuple[int, str]] = []
    fence: str | None = None
    pending: tuple[int, str] | None = None
    for number, line in enumerate(lines, start=1):
        opened = FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(1) or "sh"
            continue
        if fence is not None:
            if FENCE.match(line):
                fence = None
            elif fence in ("bash", "sh", "shell", "console"):
                start, text = pending if pending else (number, "")
                text += " " + line.rstrip().removesuffix("\\")
                pending = (start, text) if line.rstrip().endswith("\\") else None
                if pending is None:
                    found += [Command(name, start, c) for c in _commands_in(text)]
            continue
        prose.append((number, line))
    joined = "\n".join(line for _, line in prose)
    starts = [0]
    for _, line in prose:
        starts.append(starts[-1] + len(line) + 1)
    for span in INLINE.finditer(joined):
        row = next(i for i in range(len(prose)) if starts[i + 1] > span.start())
        found += [Command(name, prose[row][0], c) for c in _commands_in(span.group(2).replace("\n", " "))]
    return found


def all_commands() -> list[Command]:
    return [c for path in doc_files() for c in extract(path)]


def _model_dir(root: Path) -> Path:
    """A stand-in checkpoint directory: what the config checks read (a supported family, the tokenizer files)."""
    model = root / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text('{"model_type": "qwen3_moe"}')
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (model / name).write_text("{}")
    return model


def substitute(text: str, tmp: Path) -> list[str]:
    """The command's words with its optional parts (`[...]`) included and its placeholders filled in."""
    run_dir = tmp / "run"
    run_dir.mkdir(exist_ok=True)
    values = {"DIR": str(_model_dir(tmp)), "SYNC_RUN": str(run_dir), "ASYNC_RUN": str(run_dir)}
    values |= {"DIR1": values["DIR"], "DIR2": values["DIR"], "HEAD_IP": "127.0.0.1", "URL": "http://127.0.0.1:30000"}
    values |= {"N": "4", "S": "1", "<run dir>": str(run_dir)}
    text = text.replace("<run dir>", values["<run dir>"])
    text = re.sub(r"\[([^\[\]]*)\]", r"\1", text)
    words = shlex.split(text)
    return [re.sub(r"\b(" + "|".join(PLACEHOLDERS[:-1]) + r")\b", lambda m: values[m.group(1)], w) for w in words]


def split_uv_run(words: list[str]) -> tuple[dict[str, str], dict[str, str | None], list[str]]:
    """(environment prefix, `uv run`'s own options, the command after them)."""
    env: dict[str, str] = {}
    while words and re.fullmatch(r"[A-Z][A-Z0-9_]*=\S*", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    if words[:2] != ["uv", "run"]:
        raise ValueError(f"expected `uv run` after the environment, got {words[:2]}")
    words = words[2:]
    options: dict[str, str | None] = {}
    while words and words[0].startswith("--"):
        if words[0] not in UV_RUN_OPTIONS:
            raise ValueError(f"uv run option {words[0]}: expected one of {sorted(UV_RUN_OPTIONS)}")
        flag = words.pop(0)
        options[flag] = words.pop(0) if UV_RUN_OPTIONS[flag] else None
    if not words:
        raise ValueError("expected a command after `uv run`, got none")
    return env, options, words


def defined_options(source: Path) -> set[str]:
    """The option strings a script's `add_argument` calls define (`--x` and, for BooleanOptionalAction, `--no-x`),
    read from its source without running it; `-h/--help` always."""
    options = {"-h", "--help"}
    for node in ast.walk(ast.parse(source.read_text(), str(source))):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            boolean = any(
                k.arg == "action" and isinstance(k.value, ast.Attribute) and k.value.attr == "BooleanOptionalAction"
                for k in node.keywords
            )
            for name in (n for n in names if n.startswith("-")):
                options.add(name)
                if boolean:
                    options.add("--no-" + name.removeprefix("--"))
    return options


def has_positional(source: Path) -> bool:
    tree = ast.parse(source.read_text(), str(source))
    return any(
        isinstance(node, ast.Call)
        and getattr(node.func, "attr", None) == "add_argument"
        and any(isinstance(a, ast.Constant) and not str(a.value).startswith("-") for a in node.args)
        for node in ast.walk(tree)
    )


def app_parsers() -> dict[str, Callable[[list[str]], object]]:
    from async_ppo.cli import parse as async_parse
    from flow_grpo.cli import parse as flow_parse
    from sync_ppo.cli import parse as sync_parse

    return {"sync_ppo": sync_parse, "async_ppo": async_parse, "flow_grpo": flow_parse}


def check_app(app: str, argv: list[str]) -> None:
    """The app's own parse: every key known, every value valid, every file it names present. What is checked only
    when the run builds its task is checked here too: a dataset file's rows, and the data sources `teacher.sources`
    names."""
    parse = app_parsers()[app]
    if argv == ["--help"] or argv == ["-h"]:
        return  # run for real by test_the_apps_help_runs
    try:
        cfg, _ = parse(argv)
    except SystemExit as exc:
        raise ValueError(f"{app} refused the flags (exit {exc.code})") from None
    if getattr(getattr(cfg, "task", None), "kind", None) == "dataset":
        cfg.task.build()
    teacher = getattr(cfg, "teacher", None)
    named = teacher.named() if teacher is not None and teacher.sources else {}
    if named:
        task = cfg.task.build()
        sources = {e.data_source for e in (*task.splits.train, *task.splits.validation)}
        unknown = sorted(set(named) - sources)
        if unknown:
            raise ValueError(f"teacher.sources: expected data sources of the task {sorted(sources)}, got {unknown}")


def check_paths(words: list[str]) -> None:
    for word in words:
        for piece in word.split("="):
            match = REPO_PATH.match(piece.split("::")[0])
            if match and not (ROOT / match.group(1)).exists():
                raise ValueError(f"{match.group(1)}: expected a file of the repository, got none")


def check_script(source: Path, args: list[str], shown: str) -> None:
    """`args` against the options `source` defines; the flags after `--` against the apps it forwards them to."""
    own, rest = (args[: args.index("--")], args[args.index("--") + 1 :]) if "--" in args else (args, [])
    options = defined_options(source)
    for word in own:
        if word.startswith("-") and word.split("=")[0] not in options:
            raise ValueError(f"{shown} {word}: expected one of {sorted(options)}")
    if not has_positional(source) and any(not w.startswith("-") for w in own[:1]):
        raise ValueError(f"{shown}: expected options only, got {own[0]!r}")
    if rest:
        apps = PASSTHROUGH.get(shown)
        if apps is None:
            raise ValueError(f"{shown}: expected no flags after `--` (it forwards none), got {rest}")
        config = own[own.index("--config") + 1 : own.index("--config") + 2] if "--config" in own else []
        for app in apps:
            check_app(app, [*(["--config", *config] if config else []), *rest])


def check(command: Command, tmp: Path) -> None:
    """Raises ValueError (got/expected) when the command would not run as shown."""
    env, options, words = split_uv_run(substitute(command.text, tmp))
    check_paths(words)
    target, args = words[0], words[1:]
    if "--package" in options:
        members = {tomllib.loads(p.read_text())["project"]["name"] for p in ROOT.glob("*/*/pyproject.toml")}
        if options["--package"] not in members:
            raise ValueError(f"--package {options['--package']}: expected a workspace member, got none")
        if target == "pytest":
            raise ValueError(
                "`uv run --package X pytest` syncs inexactly (an undeclared import still passes): expected "
                "`uv sync --locked --package X` then `uv run --no-sync pytest tests/X`"
            )
    if target.startswith("apps/"):
        app = target.removeprefix("apps/").rstrip("/")
        if app not in app_parsers():
            raise ValueError(f"{target}: expected one of apps/{sorted(app_parsers())}")
        check_app(app, args)
    elif target == "python" and args[:1] == ["-m"]:
        module = args[1]
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            raise ValueError(f"python -m {module}: expected an importable module, got none")
        check_script(Path(spec.origin), args[2:], f"python -m {module}")
    elif target == "python":
        script = ROOT / args[0]
        if not script.is_file():
            raise ValueError(f"{args[0]}: expected a script of the repository, got none")
        check_script(script, args[1:], args[0])
    elif not (Path(sys.prefix) / "bin" / target).exists() and target != options.get("--with"):
        raise ValueError(
            f"{target}: expected an app, `python ...`, a console script of the environment or of `--with`, got none"
        )
    if env.get("UV_PROJECT_ENVIRONMENT") and "--no-sync" not in options:
        raise ValueError("UV_PROJECT_ENVIRONMENT without --no-sync: expected --no-sync (a sync would rebuild it)")


COMMANDS = all_commands()


def test_the_docs_show_uv_run_commands_in_code_blocks_and_inline_spans() -> None:
    where = {(c.file, c.text) for c in COMMANDS}
    assert ("README.md", "uv run pytest") in where
    assert len({c.file for c in COMMANDS}) >= 5, sorted({c.file for c in COMMANDS})
    assert len(COMMANDS) >= 40, len(COMMANDS)


def test_every_uv_run_command_in_the_docs_parses_with_known_flags_and_present_files(tmp_path: Path) -> None:
    failures = []
    for command in COMMANDS:
        try:
            check(command, tmp_path)
        except (ValueError, OSError) as exc:
            failures.append(f"{command}: {exc}")
    assert not failures, "commands that would not run as shown:\n" + "\n".join(failures)


def test_a_broken_command_is_reported_with_its_file_and_line(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text("Intro.\n\nRun `uv run apps/sync_ppo\n--run.stepz 3` here.\n\n```bash\nuv run python -m json\n```\n")
    found = extract(doc, tmp_path)
    expected = [(7, "uv run python -m json"), (3, "uv run apps/sync_ppo --run.stepz 3")]
    assert [(c.line, c.text) for c in found] == expected
    with pytest.raises(ValueError, match="refused the flags"):
        check(found[1], tmp_path)


@pytest.mark.parametrize(
    "case",
    [
        ("uv run apps/sync_ppo --task.addition_weight 0.5 --algorithm.kind opd --teacher.sources addition=DIR1", None),
        ("uv run apps/sync_ppo --algorithm.kind opd --teacher.sources addition=DIR1", "expected data sources"),
        ("uv run python benchmarks/async_vs_sync.py --steps 2 -- --run.stepz 3", "refused the flags"),
        ("uv run python benchmarks/async_vs_sync.py --stepz 2", "expected one of"),
        ("uv run python benchmarks/no_such.py", "expected a file of the repository"),
        ("uv run --package routing-state pytest tests/routing_state", "syncs inexactly"),
        ("uv run --no-sync pytest tests/routing_state", None),
        ("uv run --with tensorboard tensorboard --logdir runs/sync_ppo", None),
        ("uv run no_such_tool --x", "expected an app"),
        ("uv run apps/sync_ppo --task dataset --task.train_file docs/examples/reverse.jsonl --task.val_size 32", None),
        (
            "uv run apps/sync_ppo --task dataset --task.train_file docs/examples/nothing.jsonl --task.val_size 2",
            "expected",
        ),
        ("UV_PROJECT_ENVIRONMENT=.veomni-env uv run apps/sync_ppo", "expected --no-sync"),
    ],
)
def test_the_check_refuses_what_would_fail_and_passes_what_runs(case: tuple[str, str | None], tmp_path: Path) -> None:
    text, error = case
    command = Command("x.md", 1, text)
    if error is None:
        check(command, tmp_path)
    else:
        with pytest.raises(ValueError, match=error):
            check(command, tmp_path)


def test_every_repository_path_the_docs_name_in_code_exists() -> None:
    """Scripts, configs, benchmarks and tests named in code spans or blocks (outside `uv run` commands too, e.g.
    `bash scripts/...` or a test that proves a promise) are files of the repository."""
    missing = []
    for path in doc_files():
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            for word in re.findall(r"(?:configs|benchmarks|scripts|tests)/[\w./-]*\.(?:py|sh|toml)", line):
                if not (ROOT / word).is_file():
                    missing.append(f"{path.relative_to(ROOT)}:{number}: {word}")
    assert not missing, "paths named in the docs that the repository lacks:\n" + "\n".join(missing)


def test_every_relative_link_in_the_docs_points_at_a_file_of_the_repository() -> None:
    """`[text](docs/x.md#part)` and the like: the file exists (anchors are not checked)."""
    broken = []
    for path in doc_files():
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            for target in re.findall(r"\]\(([^)\s]+)\)", line):
                if re.match(r"[a-z]+:", target) or target.startswith("#"):
                    continue
                if not (path.parent / target.split("#")[0]).exists():
                    broken.append(f"{path.relative_to(ROOT)}:{number}: {target}")
    assert not broken, "links to files the repository lacks:\n" + "\n".join(broken)


def workspace_imports() -> set[str]:
    return {p.name for p in ROOT.glob("*/*/src/*") if (p / "__init__.py").is_file()}


def defined_names(source: Path) -> set[str]:
    """Names a module defines or imports at its top level, lazy exports (`_EXPORTS = {name: module}`, served by a
    module `__getattr__`) included; read statically: nothing is imported."""
    names: set[str] = set()
    for node in ast.parse(source.read_text(), str(source)).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
            lazy = any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in targets)
            if lazy and isinstance(node.value, ast.Dict):
                names.update(k.value for k in node.value.keys if isinstance(k, ast.Constant))
    return names


def unresolved(dotted: str) -> str | None:
    """Why `module.Name` (or `package.module`) does not name something importable, or None when it does: the
    longest prefix that is a module, then the next part a module of it or a name it defines."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            spec = importlib.util.find_spec(".".join(parts[:cut]))
        except ModuleNotFoundError:  # a prefix is a module, not a package: a shorter cut finds it
            continue
        if spec is not None and spec.origin is not None:
            if cut == len(parts):
                return None
            if parts[cut] in defined_names(Path(spec.origin)):
                return None
            return f"{parts[cut]}: expected a name defined in {'.'.join(parts[:cut])} ({spec.origin}), got none"
    return f"expected an importable module, got none for {parts[0]}"


def test_every_workspace_name_the_docs_cite_is_importable_there() -> None:
    """A code span such as `rollout_core.Engine` or `engine_adapters.native.decode.CachedModel` names something that
    `from <module> import <name>` finds (checked in the source, without importing the optional backends)."""
    ours = workspace_imports()
    wrong = []
    for path in doc_files():
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines, start=1):
            for dotted in re.findall(r"`(\w+(?:\.\w+)+)`", line):
                if dotted.split(".")[0] in ours and (why := unresolved(dotted)):
                    wrong.append(f"{path.relative_to(ROOT)}:{number}: `{dotted}`: {why}")
    assert not wrong, "names the docs cite that are not importable where they say:\n" + "\n".join(wrong)


def test_a_name_cited_from_the_wrong_module_is_unresolved() -> None:
    assert unresolved("rollout_core.teacher_scores.TeacherScores") is None
    assert unresolved("trainers.train_step") is None  # a lazy export
    assert unresolved("rollout_core.testing.engine_contract.CHECKS") is None
    assert "TeacherScores: expected a name defined in rollout_core" in (unresolved("rollout_core.TeacherScores") or "")


@pytest.mark.parametrize("app", ["sync_ppo", "async_ppo", "flow_grpo"])
def test_the_apps_help_runs(app: str) -> None:
    """`uv run apps/<app> --help` is `python apps/<app> --help` in the synced environment."""
    done = subprocess.run(
        [sys.executable, f"apps/{app}", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: {app}"), done.stdout[:200]


def imports_torch_at_module_level(source: Path) -> bool:
    """Whether the script imports torch (or a workspace module that does) before `main` runs; a sibling benchmark
    it imports counts as what that one imports."""
    heavy = {"torch", "ray", "transformers", "trl", "datasets", "moe_models", "native_engine", "trainers"}
    for node in ast.parse(source.read_text(), str(source)).body:
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        for name in names:
            if name.split(".")[0] in heavy:
                return True
            sibling = source.parent / f"{name}.py"
            if sibling.is_file() and sibling != source and imports_torch_at_module_level(sibling):
                return True
    return False


LIGHT_SCRIPTS = sorted(
    {
        w
        for c in COMMANDS
        for w in shlex.split(c.text)
        if re.fullmatch(r"benchmarks/\w+\.py", w)
        and (ROOT / w).is_file()
        and not imports_torch_at_module_level(ROOT / w)
    }
)


def test_some_benchmarks_the_docs_run_are_light_enough_to_ask_for_their_help() -> None:
    assert len(LIGHT_SCRIPTS) >= 4, LIGHT_SCRIPTS


@pytest.mark.parametrize("script", LIGHT_SCRIPTS)
def test_a_light_benchmarks_help_runs_and_lists_the_options_read_from_its_source(script: str) -> None:
    """The static reading of a script's options (`defined_options`) against its real `--help`."""
    done = subprocess.run(
        [sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    missing = sorted(o for o in defined_options(ROOT / script) if o not in done.stdout)
    assert not missing, f"{script} --help lacks {missing}"


def test_the_rollout_core_demo_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rollout_core.demo"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "status=ok" in done.stdout, done.stdout[-400:]
