"""The house reads one way: no import cycle inside initmem (module-level or inside functions), the field list in
docs/fields.md is generated from config.py, and reading results needs no torch."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from initmem import config

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "initmem"


def import_graph() -> dict[str, set[str]]:
    """module -> the initmem modules it imports anywhere in its source (lazy imports in functions included)."""
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for name in modules:
        tree = ast.parse((PACKAGE / f"{name}.py").read_text(encoding="utf-8"))
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level == 1:  # from .x import y / from . import y
                    base = f"initmem.{base}" if base else "initmem"
                if base == "initmem":
                    deps |= {a.name for a in node.names if a.name in modules}
                elif base.startswith("initmem."):
                    deps.add(base.split(".")[1])
            elif isinstance(node, ast.Import):
                deps |= {a.name.split(".")[1] for a in node.names if a.name.startswith("initmem.")}
        graph[name] = deps - {name}
    return graph


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
    assert {"config", "train", "results", "point", "members"} <= set(graph)  # the graph really was read
    assert "config" in graph["results"] and "train" in graph["point"]
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_config_and_results_are_torch_free():
    code = ("import sys, initmem.config, initmem.results, initmem.metrics, initmem.run_folders; "
            "print(sorted(m for m in ('torch', 'papermill', 'jupytext', 'submitit') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


def test_the_training_path_needs_no_notebook_or_cluster_tools():
    code = ("import sys, initmem.train, initmem.point; "
            "print(sorted(m for m in ('papermill', 'jupytext', 'submitit', 'nbformat') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


def test_docs_field_list_is_generated_from_the_config():
    text = (REPO / "docs" / "fields.md").read_text(encoding="utf-8")
    assert text == config.fields_markdown(), "regenerate: python -m initmem.config > docs/fields.md"
    for name in ("sigma_w", "precision", "eval_every"):
        assert f"`{name}`" in text and config.field_help(name).replace("|", "/") in text


def test_the_architecture_table_lists_every_module_in_import_order():
    """docs/architecture.md's module table names every module once, and each imports only modules above it."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    order = re.findall(r"^\| `(\w+)\.py` \|", text, flags=re.M)
    graph = import_graph()
    assert sorted(order) == sorted(graph), sorted(set(order) ^ set(graph))
    above: set[str] = set()
    for name in order:
        assert graph[name] <= above, f"{name} imports {sorted(graph[name] - above)}, listed below it"
        above.add(name)


def test_modules_stay_readable_top_to_bottom():
    """The style rule: a module of the package stays under ~400 lines (split by responsibility, not by count)."""
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in PACKAGE.glob("*.py")}
    over = {n: s for n, s in sizes.items() if s > 400}
    assert len(sizes) > 20 and not over, over


# ---------------------------------------------------------------------------------------------- tensor factories
FACTORIES = {"empty", "zeros", "ones", "full", "arange", "randn", "rand", "randint", "randperm", "tensor"}
# (module, function) -> why its factories make CPU tensors (these modules belong to other owners; a reason may move
# onto its line). Anything else in initmem/ takes `device=` from an existing tensor or the config, or says on its
# line (a comment naming the CPU) why it is CPU-only.
CPU_BY_DESIGN = {
    ("data", "stratified_indices"): "split index maths on the CPU labels (the split is the same on every device)",
    ("data", "make_splits"): "index tensors into the CPU images; the splits are moved to the device at its end",
    ("data", "channel_stats"): "per-channel statistics from a CPU histogram (documented: returned on the CPU)",
    ("sources", "lowfreq"): "make_synthetic's images are made on the CPU like decoded ones; make_splits moves them",
    ("sources", "draw"): "the same (make_synthetic)",
    ("imagefolder", "_assemble"): "decoded images and labels are CPU tensors; make_splits moves them",
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
    found = [f for p in sorted(PACKAGE.glob("*.py")) for f in factory_calls(p.read_text(encoding="utf-8"), p.stem)]
    assert not found, "\n".join(found)
    assert set(CPU_BY_DESIGN) <= {(p.stem, fn.name) for p in PACKAGE.glob("*.py") for fn in ast.walk(
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
            "from initmem.cli import main\n"
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
    long = {(p.stem, fn.name): fn.end_lineno - fn.lineno + 1 for p in PACKAGE.glob("*.py")
            for fn in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.end_lineno - fn.lineno + 1 > 80}
    assert not long, long
