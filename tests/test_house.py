"""The house reads one way: no import cycle inside initmem (module-level or inside functions), the field list in
docs/fields.md is generated from config.py, and reading results needs no torch."""

from __future__ import annotations

import ast
import collections
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from initmem import config

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "initmem"
TOP = ("errors", "config", "metrics")  # the shared vocabulary beside the subpackages
# package -> the packages it may import ("top": the vocabulary). The house reads one way: nothing imports upward.
MAY_IMPORT = {
    "top": {"top"},
    "store": {"top", "store"},
    "data": {"top", "store", "data"},
    "engine": {"top", "store", "data", "engine"},
    "analysis": {"top", "store", "analysis"},
    "study": {"top", "store", "data", "engine", "analysis", "study"},
    "figures": {"top", "store", "analysis", "study", "figures"},
    "cli": {"top", "store", "data", "engine", "analysis", "study", "figures", "cli"},
}
TORCH_FREE = ("top", "store", "analysis")  # reading and analysing results never loads torch


def modules() -> dict[str, Path]:
    """`pkg.module` (or a top module's name) -> its file, for every module of initmem but the faces."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("")
        if rel.name in ("__init__", "__main__") or rel.parts[0] == "__pycache__":
            continue
        found[".".join(rel.parts)] = path
    return found


def package_of(module: str) -> str:
    return module.split(".")[0] if "." in module else "top"


def imports_of(source: str, known: set[str]) -> set[str]:
    """The initmem modules (keys of `known`) a source imports anywhere (lazy imports in functions included); a
    `from initmem.pkg import name` of a module counts as that module, of another name as the package's face."""
    deps = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "initmem":
            base = node.module.removeprefix("initmem").lstrip(".")
            for alias in node.names:
                full = f"{base}.{alias.name}" if base else alias.name
                deps.add(full if full in known else base or alias.name)
        elif isinstance(node, ast.Import):
            deps |= {a.name.removeprefix("initmem.") for a in node.names if a.name.startswith("initmem.")}
    return {d for d in deps if d}


def import_graph() -> dict[str, set[str]]:
    """module -> the initmem modules (or packages, for a face) it imports anywhere in its source."""
    mods = modules()
    return {name: imports_of(path.read_text(encoding="utf-8"), set(mods)) - {name} for name, path in mods.items()}


def forbidden_imports(graph: dict[str, set[str]]) -> list[str]:
    """`module imports dep (package may import only ...)` for every edge the package rules forbid."""
    return [f"{m} imports {d} ({package_of(m)} may import only {sorted(MAY_IMPORT[package_of(m)])})"
            for m, deps in sorted(graph.items()) for d in sorted(deps)
            if package_of(d) not in MAY_IMPORT[package_of(m)]]


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state and (cycle := visit(m)):
                return cycle
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (cycle := visit(n)):
            return cycle
    return None


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert {"config", "engine.trainer", "store.results", "study.point", "engine.members"} <= set(graph)
    assert "config" in graph["store.results"] and "engine.trainer" in graph["study.point"]  # the graph was read
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def benchmark_imports(source: str, known: set[str]) -> set[str]:
    """The modules of `known` (benchmarks/) a source imports anywhere: `from benchmarks import x`, `from
    benchmarks.x import y`, `import benchmarks.x`, and a sibling imported by its bare name (`import x`)."""
    deps = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            deps |= ({parts[1]} if len(parts) > 1 else {a.name for a in node.names}) if parts[0] == "benchmarks" \
                else {parts[0]}
        elif isinstance(node, ast.Import):
            deps |= {a.name.removeprefix("benchmarks.").split(".")[0] for a in node.names}
    return deps & known


def test_benchmarks_have_no_import_cycle_and_edit_no_path():
    """benchmarks/ is a package run as `python -m benchmarks.<name>`: its modules import each other one way, and none
    puts a folder on sys.path (nor needs a `noqa: E402` for an import below such an edit)."""
    files = {p.stem: p for p in sorted((REPO / "benchmarks").glob("*.py")) if p.stem != "__init__"}
    graph = {name: benchmark_imports(p.read_text(encoding="utf-8"), set(files)) - {name} for name, p in files.items()}
    assert {"device_check", "device_steps", "parity"} <= set(graph) and "parity" in graph["device_steps"]
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))
    edits = [f"{p.name}:{node.lineno}" for p in files.values() for node in ast.walk(ast.parse(p.read_text()))
             if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", "") == "sys"]
    edits += [f"{p.name}: noqa: E402" for p in files.values() if "noqa: E402" in p.read_text()]
    assert not edits, edits
    code = "from benchmarks import a, b\nimport benchmarks.c\nfrom benchmarks.d import x\nimport e\nfrom f import y\n"
    assert benchmark_imports(code, set("abcdefg")) == set("abcdef")  # the old cycle: `import parity` both ways


def test_packages_import_only_the_packages_below_them():
    graph = import_graph()
    assert {package_of(m) for m in graph} == set(MAY_IMPORT), "a package without a rule, or a rule without one"
    assert not forbidden_imports(graph), "\n".join(forbidden_imports(graph))


def test_a_planted_forbidden_import_is_caught():
    """The rule check reads real sources: an engine module that imports the study, or a store module that imports
    the engine (lazily, inside a function), fails it."""
    graph = import_graph()
    mods = set(modules())
    planted = {**graph, "engine.loop": graph["engine.loop"] | imports_of("from initmem.study import sweep\n", mods),
               "store.results": graph["store.results"] | imports_of(
                   "def f():\n    from initmem.engine.trainer import train\n", mods)}
    assert forbidden_imports(planted) == [
        "engine.loop imports study.sweep (engine may import only ['data', 'engine', 'store', 'top'])",
        "store.results imports engine.trainer (store may import only ['store', 'top'])"]


def test_the_torch_free_packages_import_no_torch():
    """store, analysis and the vocabulary never name torch in their sources, and importing all of them (and the
    top-level face's load_runs) loads none of torch, papermill, jupytext or submitit."""
    named = [m for m, p in modules().items() if package_of(m) in TORCH_FREE
             and re.search(r"^\s*(import torch|from torch)", p.read_text(encoding="utf-8"), flags=re.M)]
    assert not named, named
    free = [f"initmem.{m}" for m in modules() if package_of(m) in TORCH_FREE]
    code = (f"import sys, importlib, initmem; [importlib.import_module(m) for m in {free!r}]; "
            "initmem.load_runs('results/cpu'); "
            "print(sorted(m for m in ('torch', 'papermill', 'jupytext', 'submitit') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


def test_the_training_path_needs_no_notebook_or_cluster_tools():
    code = ("import sys, initmem.engine.trainer, initmem.study.point; "
            "print(sorted(m for m in ('papermill', 'jupytext', 'submitit', 'nbformat') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


def test_the_folders_show_the_architecture():
    """At most 6 top-level modules beside the subpackages; no three sibling modules share a name prefix (a prefix
    standing in for a folder); each package's face is short and names only what its modules define."""
    top = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert len(top) <= 6 and set(TOP) <= set(top), top
    for folder in [PACKAGE, *sorted(p.parent for p in PACKAGE.glob("*/__init__.py"))]:
        stems = [p.stem for p in folder.glob("*.py") if not p.stem.startswith("__")]
        prefixes = collections.Counter(s.split("_")[0] for s in stems if "_" in s or any(
            o.startswith(s + "_") for o in stems))
        assert all(n < 3 for n in prefixes.values()), (folder.name, prefixes)
    for face in sorted(PACKAGE.glob("*/__init__.py")):
        package = importlib.import_module(f"initmem.{face.parent.name}")
        assert len(face.read_text(encoding="utf-8").splitlines()) <= 30, face
        assert package.__all__ and all(getattr(package, n) is not None for n in package.__all__), face


def test_the_top_level_api_is_the_readers_and_imports_lazily():
    import initmem
    assert {"load_runs", "load_histories", "TrainConfig", "train", "spread", "run_point"} <= set(initmem.__all__)
    assert initmem.load_runs is importlib.import_module("initmem.store.results").load_runs
    assert initmem.spread is importlib.import_module("initmem.metrics").spread
    with pytest.raises(AttributeError, match="has no attribute 'lod_runs'"):
        initmem.lod_runs  # noqa: B018


def private_imports(source: str) -> list[str]:
    """`module.name` for every private name (one leading underscore) a source imports from an initmem module."""
    return [f"{node.module}.{a.name}" for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ImportFrom)
            and (node.module or "").startswith("initmem") for a in node.names
            if a.name.startswith("_") and not a.name.startswith("__")]


def test_no_module_imports_another_modules_private_name():
    """What a module shares is public (config's `NEUTRAL_HPARAMS`, `field_error`); `_name` stays in its module."""
    found = {m: names for m, p in modules().items() if (names := private_imports(p.read_text(encoding="utf-8")))}
    assert not found, found
    assert private_imports("from initmem.config import _NEUTRAL, ARCHS\nimport initmem.config\n") == [
        "initmem.config._NEUTRAL"]


def test_docs_field_list_is_generated_from_the_config():
    text = (REPO / "docs" / "fields.md").read_text(encoding="utf-8")
    assert text == config.fields_markdown(), "regenerate: python -m initmem.config > docs/fields.md"
    for name in ("sigma_w", "precision", "eval_every"):
        assert f"`{name}`" in text and config.field_help(name).replace("|", "/") in text


PAGE_LINES = {"README.md": 100, "docs/findings.md": 250, "docs/performance.md": 150, "docs/gpu/README.md": 120,
              "docs/architecture.md": 130}  # a reader's page stays a page (issue 49's budgets)


def test_the_pages_a_reader_opens_keep_their_length():
    """Each page within its line budget (findings.md's lines within 400 characters); README's `make figures` in its
    first 45 lines; docs outside docs/experiments/ within 22,000 words; params/*.yaml within 180 lines in all."""
    for page, most in PAGE_LINES.items():
        lines = (REPO / page).read_text(encoding="utf-8").splitlines()
        assert len(lines) <= most, (page, len(lines), most)
        assert page != "docs/findings.md" or max(map(len, lines)) <= 400, "a verdict row over 400 characters"
    assert any("make figures" in line for line in (REPO / "README.md").read_text(encoding="utf-8").splitlines()[:45])
    docs = [p for p in (REPO / "docs").rglob("*.md") if "experiments" not in p.relative_to(REPO / "docs").parts]
    words = sum(len(p.read_text(encoding="utf-8").split()) for p in docs)
    assert words <= 22_000, f"docs outside docs/experiments/ hold {words:,} words: move records into experiments/"
    assert sum(len(p.read_text(encoding="utf-8").splitlines()) for p in (REPO / "params").glob("*.yaml")) <= 180


def test_the_architecture_tables_list_every_module_in_import_order():
    """docs/architecture.md has one table per package (a heading naming the folder, `initmem/` for the vocabulary);
    together they name every module once, and each imports only modules listed above it. The page stays a page
    (<= 130 lines, none over 400 characters): the detail lives in each module's docstring."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 130 and max(map(len, lines)) <= 400, (len(lines), max(map(len, lines)))
    order, package = [], None
    for line in text.splitlines():
        if m := re.match(r"^#+ .*`initmem/(\w+/)?`", line):
            package = m.group(1) or ""
        elif (m := re.match(r"^\| `(\w+)\.py` \|", line)) and package is not None:
            order.append(f"{package[:-1]}.{m.group(1)}" if package else m.group(1))
    graph = import_graph()
    assert sorted(order) == sorted(graph), sorted(set(order) ^ set(graph))
    above: set[str] = set()
    for name in order:
        below = {d for d in graph[name] if d in graph} - above  # a face (a package name) is checked by its rule
        assert not below, f"{name} imports {sorted(below)}, listed below it"
        above.add(name)


def test_modules_stay_readable_top_to_bottom():
    """The style rule: a module of the package stays under ~400 lines (split by responsibility, not by count)."""
    sizes = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in modules().items()}
    over = {n: s for n, s in sizes.items() if s > 400}
    assert len(sizes) > 20 and not over, over


# ---------------------------------------------------------------------------------------------- tensor factories
FACTORIES = {"empty", "zeros", "ones", "full", "arange", "randn", "rand", "randint", "randperm", "tensor"}
# (module, function) -> why its factories make CPU tensors (these modules belong to other owners; a reason may move
# onto its line). Anything else in initmem/ takes `device=` from an existing tensor or the config, or says on its
# line (a comment naming the CPU) why it is CPU-only.
CPU_BY_DESIGN = {
    ("data.splits", "stratified_indices"): "split index maths on the CPU labels (the same split on every device)",
    ("data.splits", "make_splits"): "index tensors into the CPU images; the splits are moved to the device at its end",
    ("data.splits", "channel_stats"): "per-channel statistics from a CPU histogram (documented: returned on the CPU)",
    ("data.sources", "lowfreq"): "synthetic images are made on the CPU like decoded ones; make_splits moves them",
    ("data.sources", "draw"): "the same (make_synthetic)",
    ("data.imagefolder", "_assemble"): "decoded images and labels are CPU tensors; make_splits moves them",
}


def factory_calls(source: str, module: str = "?") -> list[str]:
    """`module:line function: call` for every tensor factory in `source` that takes no `device=` and whose lines
    do not say why it is CPU-only (a comment naming the CPU), outside the functions of CPU_BY_DESIGN."""
    tree, lines = ast.parse(source), source.splitlines()
    owner: dict[int, str] = {}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):  # breadth first: an inner function is visited later and wins
                owner[id(node)] = fn.name
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name, base = node.func.attr, node.func.value
        is_factory = name in FACTORIES and isinstance(base, ast.Name) and base.id == "torch"
        if not (is_factory or name == "skip_init") or any(kw.arg == "device" for kw in node.keywords):
            continue
        text = lines[node.lineno - 1:node.end_lineno]
        if any("#" in line and "CPU" in line.split("#", 1)[1] for line in text):
            continue
        if (module, owner.get(id(node), "")) in CPU_BY_DESIGN:
            continue
        found.append((node.lineno, f"{module}:{node.lineno} {owner.get(id(node), '<module>')}: "
                                   f"{ast.get_source_segment(source, node)}"))
    return [f for _, f in sorted(found)]


def test_every_tensor_factory_in_the_package_takes_its_device():
    """A tensor made without `device=` lands on the CPU: on a GPU run the step then fails (or silently copies).
    Every factory in initmem/ takes its device from an existing tensor or the config, or says why it is CPU-only."""
    found = [f for m, p in modules().items() for f in factory_calls(p.read_text(encoding="utf-8"), m)]
    assert not found, "\n".join(found)
    assert set(CPU_BY_DESIGN) <= {(m, fn.name) for m, p in modules().items() for fn in ast.walk(
        ast.parse(p.read_text(encoding="utf-8"))) if isinstance(fn, ast.FunctionDef)}  # no stale exemption


def test_the_factory_scan_flags_a_bare_factory_and_accepts_a_device_or_a_reason():
    code = ("import torch\n"
            "def f(x):\n"
            "    a = torch.empty(3)\n"
            "    b = torch.zeros(3, device=x.device)\n"
            "    c = torch.arange(3)  # on the CPU: host index maths\n"
            "    d = torch.nn.utils.skip_init(torch.nn.Linear, 2, 2)\n"
            "    e = torch.nn.Parameter(torch.ones(\n"
            "        2))\n"
            "    return torch.tensor([1.0])\n")
    assert [f.split(": ", 1)[0] for f in factory_calls(code, "m")] == ["m:3 f", "m:6 f", "m:7 f", "m:9 f"]


def _plan_without(torch_blocked: bool, *flags: str) -> subprocess.CompletedProcess:
    """`initmem plan params/01_optimizers.yaml --profile paper FLAGS` in a child; with `torch_blocked` torch cannot
    be imported there (as on a login node without it). Prints whether torch was imported."""
    code = ("import sys\n" + ("sys.modules['torch'] = None\n" if torch_blocked else "") +
            "from initmem.cli.commands import main\n"
            f"rc = main(['plan', 'params/01_optimizers.yaml', '--profile', 'paper', *{list(flags)!r}])\n"
            "print('torch imported:', sys.modules.get('torch') is not None, file=sys.stderr)\n"
            "sys.exit(rc)\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=180,
                          env={**__import__("os").environ, "PYTHONPATH": str(REPO), "INITMEM_CACHE": "/nonexistent"})


def test_the_planner_runs_where_torch_is_absent_and_imports_it_only_to_resolve_auto():
    out = _plan_without(True)  # default --device auto, no torch: auto is this CPU, and it says so
    assert out.returncode == 0, out.stderr[-3000:]
    assert "01_optimizers" in out.stdout and "torch is not installed here: --device auto is this CPU" in out.stderr
    assert "torch imported: False" in out.stderr
    out = _plan_without(False, "--device", "cpu")  # torch installed but not needed: not imported
    assert out.returncode == 0 and "torch imported: False" in out.stderr, out.stderr[-3000:]
    out = _plan_without(False)  # auto with torch here: imported to look for a GPU, and said so
    assert out.returncode == 0 and "torch imported: True" in out.stderr and "imported torch" in out.stderr


def test_functions_stay_short_enough_to_read_on_one_screen():
    """The style rule for functions: none over 80 lines."""
    long = {(m, fn.name): fn.end_lineno - fn.lineno + 1 for m, p in modules().items()
            for fn in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.end_lineno - fn.lineno + 1 > 80}
    assert not long, long


def test_every_relative_link_of_the_pages_a_reader_opens_resolves():
    """README, docs/ (records included) and the figure indexes: each relative link's file exists and its #anchor is
    one of that page's headings (as GitHub makes them)."""
    from test_notebook_headers import _link_problems
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / "figures").rglob("README.md"))]
    broken = {str(p.relative_to(REPO)): bad for p in pages
              if (bad := [x for x in _link_problems(p.read_text(encoding="utf-8"), p.parent)
                          if not x.split("](", 1)[1].startswith(("http://", "https://", "mailto:"))])}
    assert not broken, broken
