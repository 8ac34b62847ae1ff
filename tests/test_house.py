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
    code = ("import sys, initmem.config, initmem.results, initmem.metrics; "
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
