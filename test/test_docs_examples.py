"""The docs as tested text (docs/README.md, "Examples are tests"): every ```python block of
README.md and docs/*.md runs, every ```bash command resolves (its console script, module, script
file, launch file and the options it passes), every module and file the prose names exists, and
reader-facing pages carry no run-history labels. A moved module or a renamed option breaks this
suite, not the reader.

A block that cannot run here says so in the Markdown, in a comment on the line before it:
``<!-- example: needs-gpu -->`` (a CUDA GPU), ``<!-- example: torch -->`` (PyTorch on a GPU),
``<!-- example: continues -->`` (runs after the block before it in the same file, in one process),
``<!-- example: skip <reason> -->``; ``numpy`` and ``run`` are names for plain blocks."""
from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import io
import os
import re
import shlex
import subprocess
import sys
import tokenize
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
HISTORY = {"history.md", "node_latency_history.md"}  # run history lives there, labels and all
MARK = re.compile(r"^\s*<!--\s*example:\s*([\w-]+)\s*(.*?)\s*-->\s*$")
FENCE_OPEN = re.compile(r"^(\s*)```(\w*)\s*$")
RUN_KINDS = {"run", "numpy"}
KINDS = RUN_KINDS | {"needs-gpu", "torch", "continues", "skip"}
TIMEOUT_S = 180


@dataclass
class Block:
    doc: Path
    line: int
    lang: str
    code: str
    kind: str = "run"
    reason: str = ""

    @property
    def id(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"


def blocks_of(doc: Path) -> list[Block]:
    out, lines = [], doc.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE_OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang, start = len(m.group(1)), m.group(2), i + 1
        j = start
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        code = "\n".join(line[indent:] if line[:indent].strip() == "" else line for line in lines[start:j])
        block = Block(doc, i + 1, lang, code + "\n")
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        mark = MARK.match(lines[k]) if k >= 0 else None
        if mark:
            block.kind, block.reason = mark.group(1), mark.group(2)
        out.append(block)
        i = j + 1
    return out


ALL = [b for doc in DOCS for b in blocks_of(doc)]
PYTHON = [b for b in ALL if b.lang == "python"]
SHELL = [b for b in ALL if b.lang in ("bash", "sh", "shell")]


@cache
def have_gpu() -> bool:
    from conftest import _have_gpu

    return _have_gpu()


def have_torch_gpu() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def chain(block: Block) -> list[Block]:
    """The block and, for a ``continues`` block, the ones it continues."""
    same = [b for b in PYTHON if b.doc == block.doc]
    at = same.index(block)
    first = at
    while first > 0 and same[first].kind == "continues":
        first -= 1
    return same[first : at + 1]


def skip_reason(blocks: list[Block]) -> str | None:
    for b in blocks:
        if b.kind == "skip":
            return f"{b.id}: {b.reason}"
        if b.kind == "needs-gpu" and not have_gpu():
            return f"{b.id}: needs a CUDA GPU"
        if b.kind == "torch" and not (have_gpu() and have_torch_gpu()):
            return f"{b.id}: needs PyTorch on a CUDA GPU"
    return None


@pytest.fixture(scope="module")
def example_env():
    """An isolated DDS domain (examples may create nodes) and no display."""
    from ros_harness import isolate_ros_env

    isolate_ros_env()
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=path)


def test_every_marker_is_known_and_skips_say_why():
    bad = [f"{b.id}: {b.kind}" for b in ALL if b.kind not in KINDS]
    bad += [f"{b.id}: skip without a reason" for b in ALL if b.kind == "skip" and not b.reason]
    bad += [f"{b.id}: continues nothing" for b in PYTHON if b.kind == "continues" and chain(b)[0] is b]
    assert not bad, "\n".join(bad)


def test_the_docs_have_examples():
    assert len(PYTHON) >= 6 and len(SHELL) >= 8, (len(PYTHON), len(SHELL))


@pytest.mark.parametrize("block", PYTHON, ids=lambda b: b.id)
def test_python_example_runs(block, example_env, tmp_path):
    blocks = chain(block)
    reason = skip_reason(blocks)
    if reason:
        pytest.skip(reason)
    code = "\n".join(b.code for b in blocks)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=example_env, capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, f"{block.id} exited {proc.returncode}:\n{proc.stderr[-3000:]}"


# --- shell commands ------------------------------------------------------------------------------
def console_scripts() -> dict[str, str]:
    """name -> 'module:function' from setup.py (read, not run)."""
    tree = ast.parse((REPO / "setup.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and key.value == "console_scripts":
                    pairs = [ast.literal_eval(e).split("=") for e in value.elts]
                    return {k.strip(): v.strip() for k, v in pairs}
    raise AssertionError("no console_scripts in setup.py")


SCRIPTS = console_scripts()


def launch_arguments(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "ARGUMENTS" for t in node.targets):
            return set(ast.literal_eval(node.value))
    raise AssertionError(f"{path}: no ARGUMENTS table")


@cache
def help_of_script(name: str, sub: str = "") -> str:
    """--help of a console script, called in-process (its argparse parser, no ROS context)."""
    module, func = SCRIPTS[name].split(":")
    main = getattr(importlib.import_module(module), func)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        main([sub, "--help"] if sub else ["--help"])
    assert done.value.code in (0, None), f"{name} {sub} --help exited {done.value.code}"
    return out.getvalue()


@cache
def help_of_file(path: str) -> str:
    proc = subprocess.run([sys.executable, path, "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                              p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)))
    assert proc.returncode == 0, f"python {path} --help exited {proc.returncode}: {proc.stderr[-500:]}"
    return proc.stdout


def uses_argparse(path: Path) -> bool:
    return "argparse" in path.read_text()


def module_file(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    return Path(spec.origin) if spec and spec.origin else None


def options(args: list[str]) -> list[str]:
    out = []
    for a in args:
        if a == "--ros-args":
            break
        a = a.strip("[]")
        if a.startswith("--") and len(a) > 2:
            out.append(a.split("=", 1)[0])
    return out


def missing_options(help_text: str, args: list[str]) -> list[str]:
    return [o for o in options(args) if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", help_text)]


def subcommand(name: str, args: list[str]) -> str:
    top = help_of_script(name)
    choices = re.search(r"\{([\w,-]+)\}", top)
    if choices and args and args[0] in choices.group(1).split(","):
        return args[0]
    return ""


def commands(text: str):
    """Each simple command of a shell text: tokens without leading VAR=value assignments."""
    text = re.sub(r"\\\n", " ", text)
    for line in text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line)
        for part in re.split(r"&&|\|\||;|\|", line):
            try:
                tokens = shlex.split(part)
            except ValueError:
                tokens = part.split()
            while tokens and re.match(r"^\w+=", tokens[0]):
                tokens.pop(0)
            if tokens:
                yield tokens


def check_command(tokens: list[str]) -> list[str]:
    """Why ``tokens`` would not run as the docs say ([] when it resolves)."""
    cmd, args = tokens[0], tokens[1:]
    base = os.path.basename(cmd)
    if base in SCRIPTS:
        return check_script(base, args)
    if base.startswith(("bevpool-", "bevpool_")):
        return [f"{base}: no such console script in setup.py"]
    if re.fullmatch(r"python3?(\.\d+)?", base):
        if args[:1] == ["-m"] and len(args) > 1:
            return check_module(args[1], args[2:])
        if args and args[0].endswith(".py"):
            return check_file(args[0], args[1:])
        return []
    if re.match(r"(\./)?scripts/", cmd):
        return [] if (REPO / cmd).exists() else [f"{cmd}: no such script"]
    if cmd == "ros2" and len(args) >= 3 and args[1] == "bevpool_ros":
        if args[0] == "run":
            return [] if args[2] in SCRIPTS else [f"ros2 run bevpool_ros {args[2]}: no such console script"]
        if args[0] == "launch":
            launch = REPO / "launch" / args[2]
            if not launch.exists():
                return [f"{args[2]}: no such launch file"]
            known = launch_arguments(launch)
            return [f"{args[2]}: no launch argument {a.split(':=')[0]!r}" for a in args[3:]
                    if ":=" in a and a.split(":=")[0] not in known]
    return []


def check_script(name: str, args: list[str]) -> list[str]:
    module, func = SCRIPTS[name].split(":")
    path = module_file(module)
    if path is None or not hasattr(importlib.import_module(module), func):
        return [f"{name}: {SCRIPTS[name]} does not resolve"]
    if not uses_argparse(path):
        return []
    sub = subcommand(name, args)
    return [f"{name} {sub}: no option {o}" for o in missing_options(help_of_script(name, sub), args)]


def check_module(module: str, args: list[str]) -> list[str]:
    if module == "pytest":
        return [f"pytest: no {a}" for a in args
                if "/" in a and not a.startswith("-") and not list(REPO.glob(a.split("::")[0].rstrip("/")))]
    path = module_file(module)
    if path is None:
        return [f"python -m {module}: no such module"]
    for name, target in SCRIPTS.items():  # a console script's module: check its options too
        if target.split(":")[0] == module:
            return check_script(name, args)
    return []


def check_file(path: str, args: list[str]) -> list[str]:
    if not (REPO / path).exists():
        return [f"python {path}: no such file"]
    if not uses_argparse(REPO / path):
        return []
    return [f"python {path}: no option {o}" for o in missing_options(help_of_file(path), args)]


@pytest.mark.parametrize("block", SHELL, ids=lambda b: b.id)
def test_shell_example_resolves(block):
    if block.kind == "skip":
        pytest.skip(block.reason)
    bad = [why for tokens in commands(block.code) for why in check_command(tokens)]
    assert not bad, f"{block.id}:\n" + "\n".join(bad)


INLINE = re.compile(r"`((?:\.venv/bin/)?(?:python3? |bevpool[-_]|\./scripts/|scripts/|ros2 (?:run|launch) )[^`]*)`")


def prose(doc: Path):
    """(line number, text) of the lines outside fenced blocks."""
    fenced = False
    for n, line in enumerate(doc.read_text().splitlines(), 1):
        if line.strip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            yield n, line


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_inline_commands_resolve(doc):
    """Commands quoted in running text (the results tables' commands among them) resolve too."""
    bad = []
    for n, line in prose(doc):
        for text in INLINE.findall(line):
            for tokens in commands(text.replace("...", " ")):
                if tokens[0].startswith(("bevpool-", "bevpool_")) and os.path.basename(tokens[0]) not in SCRIPTS:
                    continue  # a thread, kernel or file name, not a command
                bad += [f"{doc.name}:{n}: {why}" for why in check_command(tokens)]
    assert not bad, "\n".join(bad)


# --- names in the prose -------------------------------------------------------------------------
DOTTED = re.compile(r"(?<![\w./-])bevpool_ros(?:\.\w+)+")
PATH = re.compile(r"(?<![\w./-])((?:bevpool_ros|bench|test|scripts|plugin|config|launch|msg|docs)/[\w./*{},-]*[\w*}])")


def resolves(name: str) -> bool:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        try:
            spec = importlib.util.find_spec(module)
            found = spec is not None and spec.origin is not None  # not an empty folder (namespace)
        except ModuleNotFoundError:
            found = False
        if not found:
            continue
        obj = importlib.import_module(module)
        for attr in parts[i:]:
            try:
                obj = getattr(obj, attr)
            except AttributeError:
                return False
        return True
    return False


def expand(path: str) -> list[str]:
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    if "," not in m.group(1):  # a placeholder such as {camera}
        return []
    return [p for alt in m.group(1).split(",") for p in expand(path[: m.start()] + alt + path[m.end():])]


def globbed(path: str) -> bool:
    try:
        return bool(list(REPO.glob(path)))
    except ValueError:  # not a pattern
        return False


# a module named from inside the package (node/inputs.py, gpu/device_inputs.py): found under one of these
MODULE_PATH = re.compile(r"(?<![\w./-])((?:[a-z_]+/)+\w+\.py)\b")
MODULE_ROOTS = (REPO, REPO / "bevpool_ros", REPO / "bevpool_ros" / "backends")


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_named_modules_and_files_exist(doc):
    bad = []
    for n, line in enumerate(doc.read_text().splitlines(), 1):
        bad += [f"{doc.name}:{n}: module {name}" for name in DOTTED.findall(line) if not resolves(name)]
        bad += [f"{doc.name}:{n}: module file {path}" for path in MODULE_PATH.findall(line)
                if not path.startswith("install/") and not any((root / path).exists() for root in MODULE_ROOTS)]
        for raw in PATH.findall(line):
            for path in expand(raw.rstrip(".")):
                if not any((REPO / p).exists() or globbed(p) for p in (path, path.rstrip("*."))):  # **bold**
                    bad.append(f"{doc.name}:{n}: file {path}")
    assert not bad, "\n".join(bad)


# --- reader-facing text -------------------------------------------------------------------------
LABEL = re.compile(
    r"\b(?:issue|session|round)s? ?#?\d+\b"                      # issue 15, session 26, round 2
    r"|\b(?:call|stop)s? \d+(?![\d.]|[-\d.]*\s*(?:us|ms|s)\b)"   # call 7, stop 34 (not "a call 13 us")
    r"|\b(?:first|second|third|fourth|fifth|sixth|previous|this|that) session\b"
    r"|\b(?:before|after) the fix\b", re.IGNORECASE)
CODE_SPAN = re.compile(r"`[^`]*`")


@pytest.mark.parametrize("doc", [d for d in DOCS if d.name not in HISTORY], ids=lambda d: d.name)
def test_no_history_labels(doc):
    """Sessions, calls, issue numbers and rounds belong in docs/history.md; the reference pages
    state what is true now (file names in code spans are left alone)."""
    bad = [f"{doc.name}:{n}: {m.group(0)!r}" for n, line in prose(doc)
           for m in LABEL.finditer(CODE_SPAN.sub("", line))]
    assert not bad, "\n".join(bad)


def code_prose(path: Path):
    """(line, text) of every comment and docstring of a Python file."""
    source = path.read_text()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(
                    first.value.value, str):
                for n, line in enumerate(first.value.value.splitlines()):
                    yield first.lineno + n, line


def test_no_history_labels_in_the_code():
    """The package's comments and docstrings say what the code does, not when it changed."""
    package = REPO / "bevpool_ros"
    bad = [f"{path.relative_to(REPO)}:{n}: {m.group(0)!r}" for path in sorted(package.rglob("*.py"))
           for n, line in code_prose(path) for m in LABEL.finditer(CODE_SPAN.sub("", line))]
    assert not bad, "\n".join(bad)


def test_the_index_lists_every_doc():
    """docs/README.md has one line per page of docs/."""
    index = (REPO / "docs" / "README.md").read_text()
    listed = set(re.findall(r"^- \[[^\]]+\]\(([\w.-]+\.md)\):", index, re.MULTILINE))
    pages = {p.name for p in (REPO / "docs").glob("*.md")} - {"README.md"}
    assert pages == listed, f"not indexed: {sorted(pages - listed)}; indexed but missing: {sorted(listed - pages)}"


def test_the_quick_start_is_two_commands():
    readme = (REPO / "README.md").read_text()
    section = readme.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    quick = [b for b in SHELL if b.doc.name == "README.md" and b.code.strip() in section]
    assert len(re.findall(r"^```", section, re.MULTILINE)) == 2 and len(quick) == 1
    assert quick[0].code.split() == ["./scripts/demo.sh", "./scripts/test.sh"]


def readme_section(title: str) -> str:
    return (REPO / "README.md").read_text().split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_says_one_thing_about_the_fuzz_seed():
    """The Tests paragraph says the fuzz seed passes now; "Not verified here" must not call it failing."""
    tests, unverified = readme_section("Tests"), readme_section("Not verified here")
    seeds = set(re.findall(r"seed (\d{6,})", tests)) | set(re.findall(r"seed \D*(\d{6,})", unverified))
    assert seeds, "the README names no fuzz seed"
    for seed in seeds:
        assert re.search(rf"{seed}.*?that seed passes", " ".join(tests.split())), f"Tests: seed {seed} not said to pass"
        said = [ln for ln in unverified.splitlines() if seed in ln]
        assert not any(re.search(r"\bfails?\b|not investigated", ln) for ln in said), said
